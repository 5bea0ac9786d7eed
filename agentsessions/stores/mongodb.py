"""A store in MongoDB through a ``pymongo`` database that the caller owns; no transactions.

The library creates no index: create those in :data:`INDEXES` once per database
(``for name, models in INDEXES.items(): database[name].create_indexes(models)``). Until
then every call raises :class:`~agentsessions.errors.SchemaMissingError`.

Every step another client can observe is one single-document atomic operation, so the
store needs no multi-document transaction, and works on a standalone ``mongod`` (which
refuses them) as well as on a replica set. A save writes its messages
where no reader looks, then commits by replacing one session document; a reader reads
that document, then the messages it names:

- One message document per message, keyed by (session, epoch, position, chunk). An epoch
  is a random token shared by a run of positions written together. A message whose JSON
  passes 15 MiB is split into chunks of raw UTF-8, so no document nears the 16 MB limit.
- One session document per session: the random ``revision`` of its transcript, its
  ``length``, and its ``segments``: which epoch holds which run of positions.

A save that extends what this store object last saw appends to the last epoch past the
stored length, where readers do not look, then sets the session document with a
compare-and-set on the revision. A save that changes an earlier message (a steer added to
trailing tool results) writes the rest under a fresh epoch; one that this store object
cannot vouch for writes everything under one. Documents no segment names any more are
deleted after the commit. A reader that raced such a deletion sees the session document
change under it, and reads again. Two saves of one session at once: the last to commit
wins, whole; the other starts over.
"""

from __future__ import annotations

import datetime
import itertools
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import attrs

try:
    import pymongo
    from bson.binary import Binary
    from bson.codec_options import DEFAULT_CODEC_OPTIONS
    from pymongo import DeleteMany
    from pymongo.collection import Collection
    from pymongo.database import Database
    from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError
    from pymongo.read_preferences import ReadPreference
    from pymongo.write_concern import WriteConcern
except ImportError as error:  # pragma: no cover - depends on what is installed
    raise ImportError("agentsessions.stores.mongodb needs pymongo: pip install agentsessions[mongodb]") from error

from agentsessions.codec import decode_text, dump_message, encode_text, load_message
from agentsessions.errors import SchemaMissingError, StoreError
from agentsessions.messages import Message
from agentsessions.session import check_session_id, check_steer
from agentsessions.stores._incremental import KnownSessions, SavePlan, new_revision, plan_save

SESSIONS = "agentsessions_sessions"
MESSAGES = "agentsessions_messages"
STEERS = "agentsessions_steers"

# The unique keys are what make a stale writer's insert fail instead of overwriting a
# message a reader may be reading. Session documents need only their _id.
INDEXES: dict[str, list[pymongo.IndexModel]] = {
    MESSAGES: [
        pymongo.IndexModel(
            [("session_id", 1), ("epoch", 1), ("position", 1), ("chunk", 1)],
            unique=True,
            name="agentsessions_messages_key",
        )
    ],
    STEERS: [pymongo.IndexModel([("session_id", 1), ("seq", 1)], unique=True, name="agentsessions_steers_key")],
}
"""The indexes to create before first use: collection name -> models for ``create_indexes``."""

# Documents, in the three collections above. Ids are str, or Binary of the id's UTF-8 with
# surrogates passed through when it has lone surrogates (BSON strings cannot hold them).
#   session: {_id, revision, length, segments: [{epoch, start}], garbage: [{epoch, start}],
#             updated_at, steer_seq}
#   message: {session_id, epoch, position, body}, and when split, `chunks` on the first
#            piece and `chunk` (1, 2...) on the others
#   steer:   {session_id, seq, text: Binary, claim (while being taken)}
# A message body is codec JSON as a string, never a sub-document (which would reorder and
# drop a tool call's duplicate keys), or Binary pieces of that JSON's UTF-8 when split.
# The first piece has no `chunk`, like an unsplit message, so an unsplit message and a
# split one written at the same place collide on the unique key. `garbage` lists what the
# last save left to delete: the next save deletes it again, in case a crash stopped it.

# What each call sends (session: the session document; messages: its message documents):
#   save         find_one session; insert_many new messages; update_one session where
#                revision is still the one read (the commit); delete_many the garbage
#   messages     find_one session; find the messages of each run; find_one session again
#   add_steer    find_one_and_update session $inc steer_seq (upsert); insert_one steer
#   take_steers  update_many unclaimed steers to a fresh claim; find them by seq; delete_many

_STATE_FIELDS = {"revision": 1, "length": 1, "segments": 1, "garbage": 1}
_BODY_FIELDS = {"_id": 0, "position": 1, "chunk": 1, "chunks": 1, "body": 1}
_MAX_SEGMENTS = 16  # past this many, a save rewrites the transcript under one epoch
_CHUNK_BYTES = 15 * 1024 * 1024  # under BSON's 16 MiB with room for the other fields


# One query per run of positions, never an $or of runs: not every server answers an $or
# from the index (SecantusDB scans the collection).
def _in_run(key: object, epoch: int, start: int, end: int | None = None) -> dict[str, Any]:
    """The messages of ``epoch`` from position ``start`` up to ``end`` (no end: all after ``start``)."""
    positions = {"$gte": start} if end is None else {"$gte": start, "$lt": end}
    return {"session_id": key, "epoch": epoch, "position": positions}


@attrs.frozen
class _State:
    """A session document: which epoch holds which positions, and what is left to delete."""

    revision: int
    length: int
    segments: tuple[tuple[int, int], ...]  # (epoch, first position), ascending
    garbage: tuple[tuple[int, int], ...] = ()  # (epoch, first position to delete)

    def runs(self) -> list[tuple[int, int, int]]:
        """(epoch, start, end) for each segment, end exclusive."""
        ends = [start for _, start in self.segments[1:]] + [self.length]
        return [(epoch, start, end) for (epoch, start), end in zip(self.segments, ends, strict=True)]

    def covers(self, earlier: _State) -> bool:
        """Whether every message ``earlier`` names is still named here, so none was deleted since."""
        if self.revision == earlier.revision:
            return True
        mine = {(epoch, start): end for epoch, start, end in self.runs()}
        return all(mine.get((epoch, start), -1) >= end for epoch, start, end in earlier.runs() if end > start)

    def document(self) -> dict[str, Any]:
        """The fields a save sets."""
        return {
            "revision": self.revision,
            "length": self.length,
            "segments": [{"epoch": e, "start": s} for e, s in self.segments],
            "garbage": [{"epoch": e, "start": s} for e, s in self.garbage],
            "updated_at": datetime.datetime.now(datetime.UTC),
        }


def _parse_state(doc: Mapping[str, Any] | None) -> _State | None:
    """The session document's transcript state; ``None`` when no transcript was ever saved."""
    if doc is None or "revision" not in doc:
        return None  # no document, or one add_steer made for its counter
    return _State(
        doc["revision"],
        doc["length"],
        tuple((s["epoch"], s["start"]) for s in doc["segments"]),
        tuple((g["epoch"], g["start"]) for g in doc.get("garbage", ())),
    )


class MongoStore:
    """Sessions in a MongoDB database; safe to share between threads and processes.

    ``database`` is the caller's; the store opens nothing of its own. It reads from the
    primary (a secondary may lag the session document) and always waits for writes to be
    acknowledged. ``timeout`` bounds each call, in seconds (``pymongo.timeout``).
    """

    def __init__(self, database: Database[Any], *, timeout: float = 10.0) -> None:
        self.database = database
        self._timeout = timeout
        write_concern = database.write_concern if database.write_concern.acknowledged else WriteConcern()
        db = database.with_options(
            codec_options=DEFAULT_CODEC_OPTIONS, read_preference=ReadPreference.PRIMARY, write_concern=write_concern
        )
        self._sessions: Collection[dict[str, Any]] = db[SESSIONS]
        self._messages: Collection[dict[str, Any]] = db[MESSAGES]
        self._steers: Collection[dict[str, Any]] = db[STEERS]
        self._known = KnownSessions()
        self._indexes_checked = False

    def __repr__(self) -> str:
        return f"MongoStore(database={self.database.name!r})"

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Make ``messages`` the transcript; writes only what is new since this store last saw it."""
        plan = plan_save(self._known, session_id, messages)
        key = _key(session_id)
        with self._errors("save the transcript", session_id):
            for _ in _attempts(self._timeout):
                old = _parse_state(self._sessions.find_one({"_id": key}, _STATE_FIELDS))
                revision = self._try_save(plan, key, old)
                if revision is not None:
                    self._known.remember(session_id, revision, plan.messages)
                    return
        raise StoreError(
            f"MongoDB store {self.database.name!r} could not save the transcript of session {session_id!r:.80}: "
            f"other writers kept saving it first for {self._timeout} s"
        )

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none."""
        check_session_id(session_id)
        key = _key(session_id)
        with self._errors("read the transcript", session_id):
            for _ in _attempts(self._timeout):
                state = _parse_state(self._sessions.find_one({"_id": key}, _STATE_FIELDS))
                if state is None:
                    return []
                loaded = self._read(key, state)
                if loaded is not None:
                    self._known.remember(session_id, state.revision, loaded)
                    return loaded
        raise StoreError(
            f"MongoDB store {self.database.name!r} could not read the transcript of session {session_id!r:.80}: "
            f"saves kept changing it while it was read for {self._timeout} s"
        )

    def add_steer(self, session_id: str, text: str) -> None:
        """Leave a steer for the session's next run."""
        check_session_id(session_id)
        check_steer(text)
        key = _key(session_id)
        with self._errors("add a steer", session_id):
            seq = self._next_steer_seq(key)
            self._steers.insert_one({"session_id": key, "seq": seq, "text": Binary(encode_text(text))})

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first; each goes to exactly one caller."""
        check_session_id(session_id)
        key, claim = _key(session_id), new_revision()
        with self._errors("take steers", session_id):
            taken = self._take(key, claim)
        return [decode_text(doc["text"]) for doc in taken]

    def _take(self, key: object, claim: int) -> list[dict[str, Any]]:
        # Each steer is claimed by one atomic update, so two takers never share one; the
        # claim is where a lease will go when a save is to acknowledge the steers it carries.
        mine = {"session_id": key, "claim": claim}
        try:
            claimed = self._steers.update_many({"session_id": key, "claim": None}, {"$set": {"claim": claim}})
            if not claimed.modified_count:
                return []
            taken = list(self._steers.find(mine, {"_id": 0, "seq": 1, "text": 1}).sort("seq", 1))
            self._steers.delete_many(mine)
        except PyMongoError:
            # The caller gets none of them, so hand them back to the next take if we still can.
            with suppress(PyMongoError):
                self._steers.update_many(mine, {"$unset": {"claim": ""}})
            raise
        return taken

    def _try_save(self, plan: SavePlan, key: object, old: _State | None) -> int | None:
        """One attempt at a save: its new revision, or ``None`` when another writer committed first."""
        revision = new_revision()
        keep = plan.rows_to_keep(old.revision if old else None)
        new, epoch, start = _next_state(old, revision, keep, len(plan.messages), fresh=False)
        appends = old is not None and epoch == old.segments[-1][0]
        if appends and not self._insert(plan, key, epoch, start):
            # Documents already sit past the stored length of the last epoch: another
            # writer's, in flight or dead. A fresh epoch cannot collide with them, and
            # committing it cuts them off, to be collected with the garbage.
            new, epoch, start = _next_state(old, revision, keep, len(plan.messages), fresh=True)
            appends = False
        if not appends and not self._insert(plan, key, epoch, start):
            return None  # a random epoch already in use: try again with another
        if not self._commit(key, old, new):
            # Appended documents stay past the stored length, where no reader looks; the
            # first save to append there collides with them, cuts them off and collects them.
            if not appends:
                self._messages.delete_many({"session_id": key, "epoch": epoch})
            return None
        self._collect(key, (old.garbage if old else ()) + new.garbage)
        return revision

    def _insert(self, plan: SavePlan, key: object, epoch: int, start: int) -> bool:
        """Insert messages ``start:`` under ``epoch``; ``False`` if one of their keys is taken."""
        docs = list(_documents(plan, key, epoch, start))
        if not docs:
            return True
        try:
            self._messages.insert_many(docs)
        except BulkWriteError as error:
            if all(e.get("code") == 11000 for e in error.details.get("writeErrors", ())):
                return False
            raise
        return True

    def _commit(self, key: object, old: _State | None, new: _State) -> bool:
        """Replace the session's state with ``new`` if it is still ``old``: the save's one atomic step."""
        if old is None:
            try:  # no transcript yet: the document is absent, or holds only the steer counter
                self._sessions.update_one(
                    {"_id": key, "revision": {"$exists": False}}, {"$set": new.document()}, upsert=True
                )
            except DuplicateKeyError:
                return False  # another writer created it between our read and this write
            return True
        result = self._sessions.update_one({"_id": key, "revision": old.revision}, {"$set": new.document()})
        return result.matched_count == 1

    def _collect(self, key: object, garbage: tuple[tuple[int, int], ...]) -> None:
        if not garbage:
            return
        # The save has committed, so a failure here is not the caller's: the session
        # document lists the garbage, and the next save deletes it.
        with suppress(PyMongoError):
            self._messages.bulk_write([DeleteMany(_in_run(key, e, start)) for e, start in garbage], ordered=False)

    def _read(self, key: object, state: _State) -> list[Message] | None:
        """The messages ``state`` names, or ``None`` if a save deleted some of them meanwhile."""
        if not state.length:
            return []
        runs = [run for run in state.runs() if run[2] > run[1]]
        docs = [doc for run in runs for doc in self._messages.find(_in_run(key, *run), _BODY_FIELDS)]
        after = _parse_state(self._sessions.find_one({"_id": key}, _STATE_FIELDS))
        # A stale writer may re-insert a key that was deleted, so a complete read proves
        # nothing by itself; the state still naming every message read does.
        if after is None or not after.covers(state):
            return None
        bodies = _assemble(state.length, docs)
        if bodies is None:
            raise StoreError(f"session {key!r:.80} names messages that are not stored; the database was changed")
        return [load_message(body) for body in bodies]

    def _next_steer_seq(self, key: object) -> int:
        for _ in range(2):
            try:
                doc = self._sessions.find_one_and_update(
                    {"_id": key},
                    {"$inc": {"steer_seq": 1}},
                    projection={"steer_seq": 1},
                    upsert=True,
                    return_document=pymongo.ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                continue  # two upserts raced to create the document; now it exists
            if doc is not None:
                return int(doc["steer_seq"])
        raise StoreError(f"could not count the steers of session {key!r:.80}")

    def _check_indexes(self) -> None:
        if self._indexes_checked:
            return
        for name, models in INDEXES.items():
            present = {_index_key(index) for index in self._messages.database[name].list_indexes()}
            for model in models:
                if _index_key(model.document) not in present:
                    raise SchemaMissingError(
                        f"MongoDB store {self.database.name!r}: collection {name!r} has no index "
                        f"{model.document['name']!r}; create agentsessions.stores.mongodb.INDEXES first: "
                        f"for name, models in INDEXES.items(): database[name].create_indexes(models)"
                    )
        self._indexes_checked = True  # a race here only checks twice

    @contextmanager
    def _errors(self, action: str, session_id: str) -> Iterator[None]:
        try:
            with pymongo.timeout(self._timeout):
                self._check_indexes()
                yield
        except PyMongoError as error:
            self._known.forget(session_id)
            raise StoreError(
                f"MongoDB store {self.database.name!r} could not {action} of session {session_id!r:.80}: {error}"
            ) from error


def _attempts(seconds: float) -> Iterator[int]:
    """Attempt numbers until ``seconds`` have passed, with a growing random pause between them.

    Saves that lose the compare-and-set to another writer, and reads that a save changed
    under them, start over; the random pause keeps a few writers from colliding forever.
    """
    deadline = time.monotonic() + seconds
    for attempt in itertools.count():
        yield attempt
        if time.monotonic() >= deadline:
            return
        time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))


def _key(session_id: str) -> str | Binary:
    """The session id as stored: the str itself, unless it holds lone surrogates."""
    if session_id.isascii():
        return session_id
    try:
        session_id.encode()
    except UnicodeEncodeError:
        return Binary(encode_text(session_id))  # a str can never equal a Binary, so ids stay apart
    return session_id


def _index_key(index: Mapping[str, Any]) -> tuple[tuple[tuple[str, Any], ...], bool]:
    # Servers and tools may report a key's direction as 1 or 1.0.
    fields = tuple((name, int(d) if isinstance(d, (int, float)) else d) for name, d in index["key"].items())
    return fields, bool(index.get("unique", False))


def _next_state(old: _State | None, revision: int, keep: int, length: int, *, fresh: bool) -> tuple[_State, int, int]:
    """The state after a save, the epoch to write, and the first position to write under it.

    Appends go to the last epoch; anything else starts a fresh epoch at ``keep`` (at 0
    when there are too many segments). Segments after ``keep`` go to the garbage, whole,
    and the one that ``keep`` cuts loses its tail (and any stray documents past its end).
    """
    if old is not None and keep == old.length and not fresh:
        return _State(revision, length, old.segments), old.segments[-1][0], keep
    epoch = new_revision()
    kept = [s for s in old.segments if s[1] < keep] if old is not None else []
    if len(kept) >= _MAX_SEGMENTS:
        kept, keep = [], 0
    dropped = [(e, 0) for e, start in old.segments if start >= keep] if old is not None else []
    cut = [(kept[-1][0], keep)] if kept else []
    return _State(revision, length, (*kept, (epoch, keep)), tuple(dropped + cut)), epoch, keep


def _documents(plan: SavePlan, key: object, epoch: int, start: int) -> Iterator[dict[str, Any]]:
    for position in range(start, len(plan.messages)):
        body = dump_message(plan.messages[position])
        doc = {"session_id": key, "epoch": epoch, "position": position}
        if len(body) * 4 <= _CHUNK_BYTES or len(data := body.encode()) <= _CHUNK_BYTES:
            yield {**doc, "body": body}
            continue
        pieces = [data[i : i + _CHUNK_BYTES] for i in range(0, len(data), _CHUNK_BYTES)]
        yield {**doc, "chunks": len(pieces), "body": Binary(pieces[0])}
        for chunk, piece in enumerate(pieces[1:], start=1):
            yield {**doc, "chunk": chunk, "body": Binary(piece)}


def _piece(doc: Mapping[str, Any]) -> tuple[int, int]:
    return doc["position"], doc.get("chunk", 0)


def _assemble(length: int, docs: list[dict[str, Any]]) -> list[str | bytes] | None:
    """Each position's body, joining split ones; ``None`` if any position or piece is missing."""
    docs.sort(key=_piece)
    bodies: list[str | bytes] = []
    index = 0
    for position in range(length):
        chunks = docs[index].get("chunks", 1) if index < len(docs) else 1
        parts = docs[index : index + chunks]
        if [_piece(doc) for doc in parts] != [(position, chunk) for chunk in range(chunks)]:
            return None
        bodies.append(parts[0]["body"] if chunks == 1 else b"".join(bytes(doc["body"]) for doc in parts))
        index += chunks
    return bodies
