"""A store in MongoDB through a ``pymongo`` database that the caller owns; no transactions.

The library creates no index: create those in :data:`INDEXES` once per database
(``for name, models in INDEXES.items(): database[name].create_indexes(models)``). Until
then every call raises :class:`~agentsessions.errors.SchemaMissingError`. The schema's
version is recorded in the collection ``agentsessions_schema``: by the first call on a
database with no session yet, or by ``agentsessions migrate --store mongodb://...``, which
brings a database made by an earlier release forward (see ``_schema``); the store reads it
at its first call and refuses an older one by name. It needs
MongoDB 4.2 or later (``add_steer`` is an update with an aggregation pipeline), and
``fork`` 4.4 (its ``$merge`` writes into the collection it reads).

Every step another client can observe is one single-document atomic operation, so the
store needs no multi-document transaction, and works on a standalone ``mongod`` (which
refuses them) as well as on a replica set. A save writes its messages where no reader
looks, then commits by updating one session document; a reader reads that document, then
the messages it names:

- One message document per message, keyed by (session, epoch, position, chunk). An epoch
  is a random token shared by a run of positions written together. A message whose JSON
  passes 15 MiB is split into chunks of raw UTF-8, so no document nears the 16 MB limit.
- One session document per session: its transcript (the random ``revision``, ``length``
  and ``segments``: which epoch holds which run of positions), its run record, and its
  pending steers, so that a steer, a claim, a release and the save that carries taken
  steers each change that one document atomically.

A save that extends what this store object last saw appends to the last epoch past the
stored length, where readers do not look, then sets the session document with a
compare-and-set on the revision (a run's save also on its token). A save that changes an
earlier message writes the rest under a fresh epoch; one that this store object cannot
vouch for writes everything under one. Documents no segment names any more are deleted
after the commit. A reader that raced such a deletion sees the session document change
under it, and reads again. Two saves of one session at once: the last to commit wins.
A fork has the server copy the source's messages under a fresh epoch of the new id, checks
as a reader does that the source still names them, and commits by inserting the new
session document.

Times (``updated_at``, ``lease_expires_at``) are int64 microseconds since the epoch from
this CLIENT's clock, because BSON dates keep only milliseconds; leases are compared with
the clock of the replica asking, so replicas' clocks should agree to well within a lease.
Tokens come from one counter document that ``delete`` never resets.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Collection as Several  # pymongo's Collection is the other one
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

try:
    import pymongo
    from bson.binary import Binary
    from bson.codec_options import DEFAULT_CODEC_OPTIONS
    from bson.errors import BSONError
    from pymongo import DeleteMany, ReturnDocument
    from pymongo.collection import Collection
    from pymongo.database import Database
    from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError
    from pymongo.read_preferences import ReadPreference
    from pymongo.write_concern import WriteConcern
except ImportError as error:  # pragma: no cover - depends on what is installed
    raise ImportError("agentsessions.stores.mongodb needs pymongo: pip install agentsessions[mongodb]") from error

from agentsessions.approvals import Approval, Decision, pending_error
from agentsessions.codec import encode_text
from agentsessions.errors import ConflictError, SchemaMissingError, StoreError
from agentsessions.messages import Message
from agentsessions.metadata import check_metadata, metadata_filter, pair_texts
from agentsessions.runs import (
    ENDINGS,
    Claim,
    Progress,
    Renewal,
    RunState,
    SessionInfo,
    Steer,
    busy,
    check_updated_before,
    derive_state,
    state_filter,
    superseded,
    utcnow,
)
from agentsessions.session import check_fork_at, check_session_id
from agentsessions.stores.kit import approvals as kit_approvals
from agentsessions.stores.kit import arguments, steerkeys, values
from agentsessions.stores.kit import busy as policies
from agentsessions.stores.kit.failures import could_not, translated
from agentsessions.stores.kit.incremental import KnownSessions, SavePlan, new_revision, plan_save
from agentsessions.stores.kit.listing import Page, pages
from agentsessions.stores.kit.prune import PruneFilter, check_prune, prune_listed
from agentsessions.stores.kit.values import micros
from agentsessions.stores.mongodb import _approvals, _layout
from agentsessions.stores.mongodb._fork import PrefixCopy, forked, taken
from agentsessions.stores.mongodb._layout import (
    RUNNING,
    STATE_FIELDS,
    STEER_OVERHEAD,
    STEER_ROOM,
    RunStep,
    State,
    after,
    assemble,
    attempts,
    documents,
    holds,
    in_run,
    in_states,
    index_key,
    info_of,
    kept_digest,
    kept_key,
    key,
    key_size,
    lease_micros,
    moment,
    next_state,
    parse_state,
    preview_of,
    renewals,
    revision_is,
    sort_key,
    steer_pipeline,
    steers_of,
    text_of,
    too_many_steers,
)
from agentsessions.stores.mongodb._schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    MongoMigrator,
    checked_version,
    read_version,
    record_new,
)
from agentsessions.usage import Usage

__all__ = [
    "COUNTERS",
    "INDEXES",
    "MESSAGES",
    "MIGRATIONS",
    "PAGE_SIZE",
    "SCHEMA_VERSION",
    "SESSIONS",
    "MongoMigrator",
    "MongoStore",
    "migrator",
]

SESSIONS = "agentsessions_sessions"
MESSAGES = "agentsessions_messages"
Gate = tuple[dict[str, Any], dict[str, Any]]
"""What an edited approval adds to a save's commit: a condition, and fields to set."""
COUNTERS = "agentsessions_counters"

# The unique message key is what makes a stale writer's insert fail instead of overwriting
# a message a reader may be reading. The listing index serves sessions()' keyset pages.
INDEXES: dict[str, list[pymongo.IndexModel]] = {
    SESSIONS: [
        pymongo.IndexModel([("updated_at", -1), ("sort", -1)], name="agentsessions_sessions_listing"),
        # A multikey index: one entry per metadata pair, each pair's sessions newest first.
        pymongo.IndexModel([("metadata", 1), ("updated_at", -1), ("sort", -1)], name="agentsessions_sessions_metadata"),
    ],
    MESSAGES: [
        pymongo.IndexModel(
            [("session_id", 1), ("epoch", 1), ("position", 1), ("chunk", 1)],
            unique=True,
            name="agentsessions_messages_key",
        )
    ],
}
"""The indexes to create before first use: collection name -> models for ``create_indexes``."""

PAGE_SIZE = 500
"""How many sessions :meth:`MongoStore.sessions` fetches per query."""

# Documents. Ids (and replica names) are str, or Binary of their UTF-8 with surrogates
# passed through when they hold lone surrogates (BSON strings cannot hold them).
#   session: {_id, sort (the id's bytes in hex), revision, length, segments: [{epoch, start}],
#             garbage: [{epoch, start}], updated_at, run_state, token, holder, lease,
#             lease_expires_at, cancel_requested, steers: [{seq, text: Binary}], steer_seq,
#             steer_bytes, steer_keys: [{k: Binary key, d: Binary SHA-256 of the text}],
#             preview (str, or Binary as ids are), usage (kit.summary's text)};
#             absent fields are null, 0, false or empty
#   message: {session_id, epoch, position, body}, and when split, `chunks` on the first
#            piece and `chunk` (1, 2...) on the others
#   counter: {_id: "tokens", value}
# A message body is codec JSON as a string, never a sub-document (which would reorder and
# drop a tool call's duplicate keys), or Binary pieces of that JSON's UTF-8 when split.
# `garbage` lists what the last save left to delete: the next save deletes it again, in
# case a crash stopped it. `steer_bytes` sums the pending steers' sizes and the kept keys'
# (which stay after their steers are taken), to refuse a steer before the document passes
# 16 MB; `steer_seq` numbers the steers and changes with each one.

# What each call sends (session: the session document; messages: its message documents):
#   save        find_one session; insert_many new messages; update_one session where the
#               revision is still the one read (the commit); delete_many the garbage
#   save_run    the same, the commit also conditional on the token (and, to release,
#               on no steer having arrived; with usage, on the usage text read), pulling the
#               taken steers and setting the usage folded
#   messages    find_one session; find the messages of each run; find_one session again
#   add_steer   find_one_and_update session (a pipeline: push the steer, count it, and keep
#               its key, the filter requiring the key new); when nothing matched, find_one
#               session (a retry of a kept key, or no room), or update_one inserting it
#   take_steers find_one session; update_one session pulling the steers read, if all still there
#   claim       find_one_and_update counter ($inc); update_one session where never held or
#               ended (upsert); if it is held, update_one where its lease lapsed (a take-over)
#   renew       bulk_write of one update per claim; find the sessions' tokens and cancel flags
#   delete      find_one session; delete_one session if its revision is still the one read
#               (the commit); bulk_write a delete_many per epoch it named
#   fork        find_one source and new session; per run of the source's segments, an
#               aggregate ending in $merge; find_one source again; insert_one new session
#               (the commit). If a save raced it: delete_many the copies it outdated, copy again.
#               Before the commit, find the copies from the last back until one has text (the preview)

# `usage`: a save_run with the run's usage folds it into the text it read, in its commit.
_RUN_FIELDS = dict.fromkeys(("token", "run_state", "cancel_requested", "steers", "steer_seq", "usage"), 1)
_RUN_FIELDS |= STATE_FIELDS
_INFO_FIELDS = dict.fromkeys(
    (
        *("sort", "length", "updated_at", "run_state", "holder", "lease_expires_at", "cancel_requested"),
        *("steers.seq", "pending_approvals", "approval_deadline", "metadata", "usage", "preview"),
    ),
    1,
)  # steers.seq: their count without their text
_BODY_FIELDS = {"_id": 0, "position": 1, "chunk": 1, "chunks": 1, "body": 1}
_ORDER = [("updated_at", -1), ("sort", -1)]
_KEPT_FIELDS = {"steer_bytes": 1, "steer_keys": 1, "run_state": 1, "lease_expires_at": 1, "holder": 1}
_FOREVER = 2**63 - 1  # `updated_at < this` holds for every saved session and no other


class MongoStore:
    """Sessions in a MongoDB database; safe to share between threads and processes.

    ``database`` is the caller's; the store opens nothing of its own. It reads from the
    primary (a secondary may lag the session document) and always waits for writes to be
    acknowledged. ``timeout`` bounds each call, in seconds (``pymongo.timeout``).
    """

    def __init__(self, database: Database[Any], *, timeout: float = 10.0) -> None:
        self.database = database
        self._name = f"MongoDB store {database.name!r}"
        self._timeout = timeout
        write_concern = database.write_concern if database.write_concern.acknowledged else WriteConcern()
        db = database.with_options(
            codec_options=DEFAULT_CODEC_OPTIONS, read_preference=ReadPreference.PRIMARY, write_concern=write_concern
        )
        self._sessions: Collection[dict[str, Any]] = db[SESSIONS]
        self._messages: Collection[dict[str, Any]] = db[MESSAGES]
        self._counters: Collection[dict[str, Any]] = db[COUNTERS]
        self._known = KnownSessions()
        self._indexes_checked = False
        self._version: int | None = None  # read (or, for a new database, recorded) at the first call

    def __repr__(self) -> str:
        return f"MongoStore(database={self.database.name!r})"

    def migrator(self) -> MongoMigrator:
        """What migrates this store's database (``agentsessions migrate`` drives it); see :func:`migrator`."""
        return migrator(self.database)

    def schema_version(self) -> int:
        """The version of the database's schema, read (or recorded, for a new one) at the first call."""
        if self._version is None:
            with self._errors("read the schema version", None):
                pass
        assert self._version is not None  # the first call reads it, or raises
        return self._version

    # --- Transcripts and steers (the seed's four) ------------------------------------------

    def save(self, session_id: str, messages: Sequence[Message], *, holder: object | None = None) -> None:
        """Make ``messages`` the transcript; writes only what is new since this store last saw it.

        What is saved is remembered beside ``holder`` (a session handle), for as long as it lives.
        """
        plan = plan_save(self._known, session_id, messages, holder)
        stored = key(session_id)
        with self._errors("save the transcript", session_id):
            for _ in attempts(self._timeout):
                old = parse_state(self._sessions.find_one({"_id": stored}, STATE_FIELDS))
                revision = self._try_save(plan, stored, old)
                if revision is not None:
                    self._known.remember(session_id, revision, plan.messages, holder)
                    return
        raise self._gave_up("save the transcript", session_id, "other writers kept saving it first")

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none."""
        check_session_id(session_id)
        stored = key(session_id)
        with self._errors("read the transcript", session_id):
            for _ in attempts(self._timeout):
                state = parse_state(self._sessions.find_one({"_id": stored}, STATE_FIELDS))
                if state is None:
                    return []
                bodies = self._bodies(stored, state)
                if bodies is not None:  # else a save deleted some of them meanwhile: read again
                    return self._known.read(session_id, state.revision, bodies)
        raise self._gave_up("read the transcript", session_id, "saves kept changing it while it was read")

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Leave a steer for the session's run; returns the session's state as it was stored.

        A ``key`` the session holds stores nothing: the state for the same text, a
        :class:`ConflictError` for another. Keys live in the session's document with the
        steers (one update checks the key and adds both). Raises :class:`StoreError`,
        storing nothing, when the steers waiting and the keys kept would pass 15 MiB: the
        document is limited to 16 MB. ``if_busy`` decides what the steer does while a live run
        holds the session (:mod:`agentsessions.stores.kit.busy`), in the same update.
        """
        session_id, text, steer_key = arguments.add_steer(session_id, text, key)
        if_busy, data = policies.check(if_busy), encode_text(text)
        kept = None if steer_key is None else kept_key(steer_key, steerkeys.digest(text))
        size = len(data) + STEER_OVERHEAD + (key_size(kept) if kept is not None else 0)
        if size > STEER_ROOM:
            raise too_many_steers(self.database.name, session_id, size, 0)
        stored = _layout.key(session_id)  # the parameter hides the layout's key()
        with self._errors("add a steer", session_id):
            for _ in attempts(self._timeout):
                now = micros(utcnow())
                state = self._push_steer(session_id, stored, Binary(data), size, kept, if_busy, now)
                if state is not None:
                    return state
                doc = self._sessions.find_one({"_id": stored}, _KEPT_FIELDS)
                expires = moment(doc.get("lease_expires_at")) if doc else None
                state = derive_state(doc.get("run_state"), expires, values.moment(now)) if doc else None
                if kept is not None and steer_key is not None and doc is not None:
                    digest = kept_digest(doc, kept)
                    if digest is not None and not steerkeys.fresh(digest, text, session_id, steer_key):
                        return derive_state(doc.get("run_state"), moment(doc.get("lease_expires_at")), utcnow())
                if doc is not None and if_busy == "reject" and state is RunState.RUNNING:
                    holder = text_of(doc["holder"]) if doc.get("holder") else None
                    raise busy(session_id, holder, expires)  # the update matched no document a live run holds
                if doc is not None and doc.get("steer_bytes", 0) + size > STEER_ROOM:
                    raise too_many_steers(self.database.name, session_id, size, doc["steer_bytes"])
        raise self._gave_up("add a steer", session_id, "its document kept being created and deleted")

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first; each goes to exactly one caller."""
        check_session_id(session_id)
        stored = key(session_id)
        with self._errors("take steers", session_id):
            for _ in attempts(self._timeout):
                doc = self._sessions.find_one({"_id": stored}, {"steers": 1})
                if doc is None or not doc.get("steers"):
                    return []
                if self._pull(stored, doc):
                    return [steer.text for steer in steers_of(doc)]
        raise self._gave_up("take steers", session_id, "other takers kept taking them first")

    # --- Records: info, listing, delete, cancel ---------------------------------------------

    def info(self, session_id: str) -> SessionInfo:
        """The session's record; an unknown id is ``IDLE`` with length 0."""
        check_session_id(session_id)
        with self._errors("read the record", session_id):
            doc = self._sessions.find_one({"_id": key(session_id)}, _INFO_FIELDS)
        return SessionInfo(session_id) if doc is None else info_of(session_id, doc, utcnow())

    def set_metadata(self, session_id: str, metadata: Mapping[str, str]) -> None:
        """Make ``metadata`` the session's whole metadata: one update of its document, made if there is none."""
        check_session_id(session_id)
        pairs = pair_texts(check_metadata(metadata))
        update = {"$set": {"metadata": pairs}, "$setOnInsert": {"sort": sort_key(session_id)}}
        with self._errors("set the metadata", session_id):
            self._sessions.update_one({"_id": key(session_id)}, update, upsert=True)

    def sessions(
        self,
        *,
        state: RunState | Several[RunState] | None = None,
        updated_before: datetime.datetime | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Iterator[SessionInfo]:
        """Every session (holding each pair of ``metadata``), newest update first (never saved last), in pages."""
        states, before, pairs = state_filter(state), check_updated_before(updated_before), metadata_filter(metadata)
        saved: dict[str, Any] = {"updated_at": {"$lt": _FOREVER if before is None else micros(before)}}
        # Saved sessions first, then the never saved ones (no updated_at), each in keyset pages.
        phases: list[dict[str, Any]] = [saved] if before is not None else [saved, {"updated_at": None}]
        if pairs:
            phases = [{**phase, "metadata": {"$all": pair_texts(pairs)}} for phase in phases]
        return self._listing(phases, states)

    def _listing(self, phases: list[dict[str, Any]], states: frozenset[RunState] | None) -> Iterator[SessionInfo]:
        if states is not None and not states:
            return
        for phase in phases:
            yield from pages(functools.partial(self._page, phase, states), _last, self._name, PAGE_SIZE)

    def _page(
        self, phase: dict[str, Any], states: frozenset[RunState] | None, last: Mapping[str, Any] | None
    ) -> Page[Mapping[str, Any]]:
        with self._errors("list the sessions", None):
            now = utcnow()
            query = {"$and": [phase, *after(last), *in_states(states, micros(now))]}
            docs = list(self._sessions.find(query, _INFO_FIELDS).sort(_ORDER).limit(PAGE_SIZE))
        return docs, functools.partial(_listed_info, now=now)

    def delete(self, session_id: str) -> bool:
        """Remove the session whole; ``True`` if it existed.

        Deleting the session document is the commit: from then on no reader finds the
        session. Its message documents go next, by the epochs the document named.
        """
        check_session_id(session_id)
        stored = key(session_id)
        with self._errors("delete", session_id):
            for _ in attempts(self._timeout):
                doc = self._sessions.find_one({"_id": stored}, STATE_FIELDS)
                if doc is None:
                    return False
                # Only the transcript read may go, so that its epochs are all there is to delete.
                if self._sessions.delete_one({"_id": stored, **revision_is(parse_state(doc))}).deleted_count:
                    break
            else:
                raise self._gave_up("delete", session_id, "saves kept changing it")
            epochs = {s["epoch"] for s in doc.get("segments", ())} | {g["epoch"] for g in doc.get("garbage", ())}
            if epochs:
                self._messages.bulk_write([DeleteMany({"session_id": stored, "epoch": e}) for e in epochs])
        self._known.forget(session_id)
        return True

    def prune(
        self,
        *,
        updated_before: datetime.datetime,
        state: RunState | Several[RunState] | None = None,
        metadata: Mapping[str, str] | None = None,
        batch: int = 500,
    ) -> int:
        """Delete the sessions last updated before ``updated_before`` (ended ones by default), a batch at a time.

        Each session goes by one ``delete_one`` whose filter carries the whole rule (state,
        lease, ``updated_at``, metadata) and the transcript read: a claim that came first
        keeps its session. Its message documents go next, as in :meth:`delete`.
        """
        wanted = check_prune(updated_before, state, metadata, batch)
        return prune_listed(self.sessions, wanted, functools.partial(self._prune_batch, wanted=wanted))

    def _prune_batch(self, ids: list[str], wanted: PruneFilter) -> int:
        rule: dict[str, Any] = {"updated_at": {"$lt": micros(wanted.before)}}
        if wanted.pairs:
            rule["metadata"] = {"$all": pair_texts(wanted.pairs)}
        gone: dict[str, tuple[object, set[int]]] = {}
        with self._errors("prune the sessions", None):
            for session_id in ids:
                stored = key(session_id)
                for _ in attempts(self._timeout):
                    doc = self._sessions.find_one({"_id": stored}, {**STATE_FIELDS, **_INFO_FIELDS})
                    now = utcnow()
                    if doc is None or not wanted.matches(info_of(session_id, doc, now)):
                        break  # gone already, or claimed, saved or changed since it was listed: kept
                    # The whole rule again, at the same moment, and the transcript read: all or nothing.
                    live = {"$and": [{"_id": stored, **revision_is(parse_state(doc))}, rule]}
                    live["$and"].extend(in_states(wanted.states, micros(now)))
                    if self._sessions.delete_one(live).deleted_count:
                        segments = (*doc.get("segments", ()), *doc.get("garbage", ()))
                        gone[session_id] = (stored, {s["epoch"] for s in segments})
                        break
                else:
                    raise self._gave_up("prune", session_id, "saves kept changing it")
            doomed = [
                DeleteMany({"session_id": stored, "epoch": e}) for stored, epochs in gone.values() for e in epochs
            ]
            if doomed:
                self._messages.bulk_write(doomed)
        for session_id in gone:
            self._known.forget(session_id)
        return len(gone)

    def cancel(self, session_id: str) -> bool:
        """Ask the live run holding the session to stop; ``False`` when none holds it."""
        check_session_id(session_id)
        with self._errors("cancel the run", session_id):
            live = {"_id": key(session_id), "run_state": RUNNING, "lease_expires_at": {"$gt": micros(utcnow())}}
            return self._sessions.update_one(live, {"$set": {"cancel_requested": True}}).matched_count == 1

    def fork(self, session_id: str, new_id: str, *, at: int | None = None) -> None:
        """Copy the first ``at`` messages (all when ``None``) into a new session, idle with no steers.

        The server copies the message documents under a fresh epoch of ``new_id``, where no
        reader looks; inserting the new session document, with the preview read back from the
        copies and no usage, commits the fork. What a save of
        the source deletes meanwhile is copied again. Raises :class:`ConflictError` if ``new_id``
        has a document (a transcript, steers or a run), ``ValueError`` for an ``at``
        outside ``0..length``.
        """
        check_session_id(session_id), check_session_id(new_id)
        with suppress(ValueError):
            check_fork_at(at, 0)  # a TypeError before any I/O; the range once the length is read
        source, target = key(session_id), key(new_id)
        with self._errors("fork the transcript", session_id):
            state = parse_state(self._sessions.find_one({"_id": source}, STATE_FIELDS))
            check_fork_at(at, state.length if state else 0)  # before the conflict, as the SQL stores
            if self._sessions.find_one({"_id": target}, {"_id": 1}) is not None:
                raise taken(new_id)  # found before copying anything; the insert below checks again
            copies = PrefixCopy(self._sessions, self._messages, source, target)
            made = copies.make(state, at, attempts(self._timeout))
            if made is None:
                raise self._gave_up("fork the transcript", session_id, "saves kept changing it while it was copied")
            epoch, length = made
            preview = copies.preview(epoch, length)  # its messages' preview, read back from what was copied
            try:
                self._sessions.insert_one(forked(target, new_id, length, epoch, micros(utcnow()), preview))
            except DuplicateKeyError:  # created since the check: by a save, a steer, a claim or a fork
                copies.drop(epoch)
                raise taken(new_id) from None

    # --- Holding a run ---------------------------------------------------------------------

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Hold the session for a run, taking over a stalled one; busy while another lease is live."""
        session_id, replica, lease = arguments.claim(session_id, replica, lease)
        stored = key(session_id)
        with self._errors("claim", session_id):
            for _ in attempts(self._timeout):
                token, now = self._next_token(), micros(utcnow())
                lapsed = {"lease_expires_at": {"$not": {"$gt": now}}}  # as derive_state: no lease is no hold
                # Free: never held or ended (the upsert), or stalled (the second update, apart so
                # that the claim knows it took over; the rare case pays for it); never a state a
                # newer version wrote. A waiting session is free once every call is decided.
                done = {"run_state": {"$in": [None, *sorted(state.value for state in ENDINGS)]}}
                ended = {"_id": stored, "$or": [done, _approvals.FREE_WAIT]}
                held = {"run_state": RUNNING, "token": token, "holder": key(replica), "lease": lease}
                held |= {"lease_expires_at": now + lease_micros(lease), "cancel_requested": False}
                with suppress(DuplicateKeyError):  # the document exists and the filter refused it
                    self._sessions.update_one(ended, {"$set": held, "$setOnInsert": _new(session_id)}, upsert=True)
                    return Claim(session_id, token, replica, lease)
                stalled = {"_id": stored, "run_state": RUNNING, **lapsed}
                if self._sessions.update_one(stalled, {"$set": held}).matched_count:
                    return Claim(session_id, token, replica, lease, took_over=True)
                doc = self._sessions.find_one({"_id": stored}, _INFO_FIELDS)
                if doc is not None and (info := info_of(session_id, doc, utcnow())).state is RunState.RUNNING:
                    raise busy(session_id, info.holder, info.lease_expires_at)
                if doc is not None and info.state is RunState.WAITING and info.pending_approvals:
                    raise pending_error(session_id, info.pending_approvals)
        raise self._gave_up("claim", session_id, "its record kept changing")

    # --- Approvals (the document's fields: see _approvals) -----------------------------------

    def wait(self, claim: Claim, approvals: Sequence[Approval]) -> None:
        """Release the session held by ``claim`` as ``WAITING`` for ``approvals``, in one conditional update."""
        with self._errors("wait for approval", getattr(claim, "session_id", None)):
            _approvals.wait(self._sessions, claim, approvals)

    def approvals(self, session_id: str) -> list[Approval]:
        """The calls of the session's latest wait, decided or not."""
        check_session_id(session_id)
        with self._errors("read the approvals", session_id):
            return _approvals.approvals(self._sessions, session_id)

    def decide(
        self, session_id: str, decisions: Mapping[str, Decision], *, rewrite: kit_approvals.Rewrite | None = None
    ) -> RunState:
        """Record ``decisions`` on the waiting calls, all or none, in one conditional update; the state after.

        An edited input rewrites the wait's ``tool_use`` block (the last message) as a save
        does, and the commit of that save, one update of the session document, also records
        the decisions, conditional on the wait and on the approvals read.
        """
        check_session_id(session_id)

        def edit(old: str | None, new: str, pending: int, inputs: Mapping[str, str]) -> bool:
            transcript = self.messages(session_id)
            if not transcript:
                raise ConflictError(f"session {session_id!r:.80} has no transcript holding its wait")
            last = len(transcript) - 1
            transcript[last] = kit_approvals.rewritten(rewrite, last, transcript[last], inputs)
            plan, stored = plan_save(self._known, session_id, transcript), key(session_id)
            state = parse_state(self._sessions.find_one({"_id": stored}, STATE_FIELDS))
            gate = (
                {"run_state": _approvals.WAITING, "approvals": old},
                {"approvals": new, "pending_approvals": pending},
            )
            revision = self._try_save(plan, stored, state, gate=gate)
            if revision is not None:
                self._known.remember(session_id, revision, plan.messages)
            return revision is not None

        with self._errors("record the decisions", session_id):
            return _approvals.decide(self._sessions, session_id, decisions, edit=edit)

    def peek_steers(self, session_id: str) -> list[Steer]:
        """The waiting steers, oldest first, left in place."""
        check_session_id(session_id)
        with self._errors("read the steers", session_id):
            return steers_of(self._sessions.find_one({"_id": key(session_id)}, {"steers": 1}))

    def save_run(
        self,
        claim: Claim,
        messages: Sequence[Message],
        *,
        taken: Sequence[int] = (),
        end: RunState | None = None,
        unless_steered: bool = False,
        usage: Usage | None = None,
    ) -> Progress:
        """Save as the holder of ``claim``, deleting the ``taken`` steers; release with ``end``.

        With ``usage`` (the run's tokens so far) the commit also replaces the session's usage
        text, on condition that it is still the one read: the fold is part of the compare-and-set.
        """
        call = arguments.save_run(claim, taken, end, unless_steered, usage)
        plan, gone, end = plan_save(self._known, claim.session_id, messages, claim), frozenset(call.taken), call.end
        stored = key(claim.session_id)
        with self._errors("save the transcript", claim.session_id):
            for _ in attempts(self._timeout):
                doc = self._sessions.find_one({"_id": stored}, _RUN_FIELDS)
                if doc is None or doc.get("token") != claim.token or doc.get("run_state") != RUNNING:
                    raise superseded(claim)
                step = RunStep.of(doc, claim, gone, end, call.unless_steered, call.usage)
                revision = self._try_save(plan, stored, parse_state(doc), step)
                if revision is not None:
                    self._known.remember(claim.session_id, revision, plan.messages, None if step.released else claim)
                    return step.progress
        raise self._gave_up("save the transcript", claim.session_id, "other writers kept changing its record")

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        """Extend each claim's lease in one write; report the claims lost and those asked to cancel."""
        claims = arguments.renew(claims)
        if not claims:
            return Renewal()
        with self._errors(f"renew the leases of {len(claims)} runs", None):
            self._sessions.bulk_write(renewals(claims, micros(utcnow())), ordered=False)
            ids = list({key(c.session_id) for c in claims})
            found = self._sessions.find({"_id": {"$in": ids}}, {"token": 1, "run_state": 1, "cancel_requested": 1})
            records = {text_of(doc["_id"]): doc for doc in found}
        held = {c for c in claims if holds(records.get(c.session_id), c)}
        cancelling = {c for c in held if records[c.session_id].get("cancel_requested")}
        return Renewal(frozenset(claims) - held, frozenset(cancelling))

    # --- Saving: the compare-and-set every save ends with ------------------------------------

    def _try_save(
        self, plan: SavePlan, stored: object, old: State | None, run: RunStep | None = None, *, gate: Gate | None = None
    ) -> int | None:
        """One attempt at a save (a run's with ``run``): its new revision, or ``None`` if another writer came first."""
        revision = new_revision()
        bodies = None
        if old is not None and plan.needs_bodies(old.revision, old.length):
            # Not the transcript this store object saw last: its rows are read once, and those
            # the new transcript repeats stay.
            bodies = self._bodies(stored, old)
            if bodies is None:
                return None  # another save came meanwhile
        keep = plan.rows_to_keep(old.revision if old else None, bodies)
        new, epoch, start = next_state(old, revision, keep, len(plan.messages), fresh=False)
        appends = old is not None and epoch == old.segments[-1][0]
        if appends and not self._insert(plan, stored, epoch, start):
            # Documents already sit past the stored length of the last epoch: another
            # writer's, in flight or dead. A fresh epoch cannot collide with them, and
            # committing it cuts them off, to be collected with the garbage.
            new, epoch, start = next_state(old, revision, keep, len(plan.messages), fresh=True)
            appends = False
        if not appends and not self._insert(plan, stored, epoch, start):
            return None  # a random epoch already in use: try again with another
        if not self._commit(plan, old, new, run, gate):
            # Appended documents stay past the stored length, where no reader looks; the
            # first save to append there collides with them, cuts them off and collects them.
            if not appends:
                self._messages.delete_many({"session_id": stored, "epoch": epoch})
            return None
        self._collect(stored, (old.garbage if old else ()) + new.garbage)
        return revision

    def _insert(self, plan: SavePlan, stored: object, epoch: int, start: int) -> bool:
        """Insert messages ``start:`` under ``epoch``; ``False`` if one of their keys is taken."""
        docs = list(documents(plan, stored, epoch, start))
        if not docs:
            return True
        try:
            self._messages.insert_many(docs)
        except BulkWriteError as error:
            if all(e.get("code") == 11000 for e in error.details.get("writeErrors", ())):
                return False
            raise
        return True

    def _commit(
        self, plan: SavePlan, old: State | None, new: State, run: RunStep | None = None, gate: Gate | None = None
    ) -> bool:
        """Replace the session's transcript ``old`` with ``new``: the save's one atomic step.

        A plain save creates the document if it is missing; a run's (``run``) requires
        its claim to hold it, and also renews the lease, pulls steers and may release. A
        ``gate`` (an edited approval's) adds its condition and its fields to the update.
        """
        now = micros(utcnow())
        where = {"_id": key(plan.session_id), **revision_is(old)}
        update: dict[str, Any] = {"$set": {**new.document(now), "preview": preview_of(plan.messages)}}
        if gate is not None:
            condition, fields = gate
            return self._sessions.update_one(where | condition, {"$set": update["$set"] | fields}).matched_count == 1
        if run is None:
            update["$setOnInsert"] = _new(plan.session_id)
            try:  # no transcript yet: the document is absent, or holds only steers or a record
                result = self._sessions.update_one(where, update, upsert=old is None)
            except DuplicateKeyError:
                return False  # another writer created it between our read and this write
            return result.matched_count == 1 or result.upserted_id is not None
        update["$set"] |= {"lease_expires_at": now + lease_micros(run.lease), **run.fields}
        return self._sessions.update_one(where | run.condition, update | run.operators).matched_count == 1

    def _collect(self, stored: object, garbage: tuple[tuple[int, int], ...]) -> None:
        if not garbage:
            return
        # The save has committed, so a failure here is not the caller's: the session
        # document lists the garbage, and the next save deletes it.
        with suppress(PyMongoError):
            self._messages.bulk_write([DeleteMany(in_run(stored, e, start)) for e, start in garbage], ordered=False)

    def _bodies(self, stored: object, state: State) -> list[str | bytes] | None:
        """The stored bodies of the messages ``state`` names, or ``None`` if a save deleted some of them meanwhile."""
        if not state.length:
            return []
        runs = [run for run in state.runs() if run[2] > run[1]]
        docs = [doc for run in runs for doc in self._messages.find(in_run(stored, *run), _BODY_FIELDS)]
        after = parse_state(self._sessions.find_one({"_id": stored}, STATE_FIELDS))
        # A stale writer may re-insert a key that was deleted, so a complete read proves
        # nothing by itself; the state still naming every message read does.
        if after is None or not after.covers(state):
            return None
        bodies = assemble(state.length, docs)
        if bodies is None:
            raise StoreError(f"session {stored!r:.80} names messages that are not stored; the database was changed")
        return bodies

    # --- Steers and tokens -----------------------------------------------------------------

    def _push_steer(
        self,
        session_id: str,
        stored: object,
        text: Binary,
        size: int,
        kept: Mapping[str, Binary] | None,
        if_busy: str,
        now: int,
    ) -> RunState | None:
        """Append a steer with the next seq if there is room (and its key is new); the state then, or ``None``.

        ``if_busy`` is decided at ``now`` by the same update: ``"reject"`` matches no
        document a live run holds; ``"queue"`` and ``"interrupt"`` mark the steer for a later claim.
        """
        pipeline = steer_pipeline(session_id, text, size, kept, if_busy, now)  # the filter leaves room under 16 MB
        room: dict[str, Any] = {"_id": stored, "steer_bytes": {"$not": {"$gt": STEER_ROOM - size}}}
        if kept is not None:
            room["steer_keys.k"] = {"$ne": kept["k"]}  # the key's check and the steer's adding: one update
        if if_busy == "reject":
            room["$or"] = [{"run_state": {"$ne": RUNNING}}, {"lease_expires_at": {"$not": {"$gt": now}}}]
        doc = self._sessions.find_one_and_update(
            room, pipeline, projection={"run_state": 1, "lease_expires_at": 1}, return_document=ReturnDocument.AFTER
        )
        if doc is not None:
            return derive_state(doc.get("run_state"), moment(doc.get("lease_expires_at")), values.moment(now))
        # No such document (or no room): create it with the steer. Every document has a
        # sort key, so this filter matches none, and the upsert inserts or collides. Not
        # one upserting find_one_and_update: SecantusDB can apply that to a document made
        # meanwhile and answer null, and the steer would be added twice.
        with suppress(DuplicateKeyError):
            self._sessions.update_one({"_id": stored, "sort": {"$exists": False}}, pipeline, upsert=True)
            return RunState.IDLE  # a new document: no run has held it
        return None

    def _pull(self, stored: object, doc: Mapping[str, Any]) -> bool:
        """Remove the steers ``doc`` holds, if every one is still there; whether they were."""
        # A read, then one update conditional on what was read, not one find_one_and_update
        # returning the document before: SecantusDB finds that document, then writes, so
        # two takers can both be handed it.
        seqs = [steer["seq"] for steer in doc["steers"]]
        size = sum(len(steer["text"]) + STEER_OVERHEAD for steer in doc["steers"])
        present = {"_id": stored, "$and": [{"steers.seq": seq} for seq in seqs]}
        pull = {"$pull": {"steers": {"seq": {"$in": seqs}}}, "$inc": {"steer_bytes": -size}}
        return self._sessions.update_one(present, pull).matched_count == 1

    def _next_token(self) -> int:
        for _ in range(2):
            with suppress(DuplicateKeyError):  # two first claims raced to create the counter
                doc = self._counters.find_one_and_update(
                    {"_id": "tokens"}, {"$inc": {"value": 1}}, upsert=True, return_document=ReturnDocument.AFTER
                )
                if doc is not None:
                    return int(doc["value"])
        raise StoreError(f"{could_not(self._name, 'count a token')} in {COUNTERS!r}")

    # --- Errors and indexes ----------------------------------------------------------------

    def _gave_up(self, action: str, session_id: str, why: str) -> StoreError:
        return StoreError(f"{could_not(self._name, action, session_id)}: {why} for {self._timeout} s")

    def _check_indexes(self) -> None:
        if self._indexes_checked:
            return
        for name, models in INDEXES.items():
            present = {index_key(index) for index in self._messages.database[name].list_indexes()}
            for model in models:
                if index_key(model.document) not in present:
                    raise SchemaMissingError(
                        f"MongoDB store {self.database.name!r}: collection {name!r} has no index "
                        f"{model.document['name']!r}; create agentsessions.stores.mongodb.INDEXES first: "
                        f"for name, models in INDEXES.items(): database[name].create_indexes(models)"
                    )
        self._indexes_checked = True  # a race here only checks twice

    @contextmanager
    def _errors(self, action: str, session_id: str | None) -> Iterator[None]:
        errors = (PyMongoError, BSONError)
        with translated(errors, self._name, action, session_id, known=self._known), pymongo.timeout(self._timeout):
            # Once per store object (a race only reads it twice). An older version is refused
            # before the indexes are checked: its missing index is the migration's to build.
            found = self._version
            if found is None:
                found = read_version(self._sessions.database, SESSIONS)
                if found is not None:
                    checked_version(found, could_not(self._name, action, session_id))
            self._check_indexes()
            if self._version is None:
                self._version = found if found is not None else record_new(self._sessions.database)
            yield


def _last(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    return doc  # the next page starts after it (see after())


def _listed_info(doc: Mapping[str, Any], now: datetime.datetime) -> SessionInfo:
    return info_of(text_of(doc["_id"]), doc, now)


def _new(session_id: str) -> dict[str, Any]:
    """The fields a session document gets when an upsert creates it."""
    return {"sort": sort_key(session_id)}


def migrator(database: Database[Any]) -> MongoMigrator:
    """The :class:`~agentsessions.stores.kit.schema.Migrator` of ``database``."""
    return MongoMigrator(database, INDEXES, SESSIONS)
