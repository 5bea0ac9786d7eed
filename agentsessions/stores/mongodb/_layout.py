"""How :mod:`agentsessions.stores.mongodb` lays sessions out in documents; private to it.

A session document names its transcript as runs of positions (segments), each held by the
message documents of one random epoch; this module plans those segments, cuts messages
into documents and joins them back. It also holds the conversions every query needs (ids
to stored keys and sort keys, datetimes to int64 microseconds), the pause between attempts
of an optimistic write, and the mapping of run records: what a run's save adds to its
commit, the updates a steer and a renewal send, and the record that ``info`` and
``sessions`` report. It does no I/O.
"""

from __future__ import annotations

import datetime
import itertools
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
from bson.binary import Binary
from pymongo import UpdateOne

from agentsessions.codec import decode_text, dump_message, encode_text
from agentsessions.errors import StoreError
from agentsessions.messages import Message
from agentsessions.metadata import from_pair_texts
from agentsessions.runs import Claim, Progress, RunState, SessionInfo, Steer, derive_state
from agentsessions.stores.kit import values
from agentsessions.stores.kit.incremental import SavePlan, new_revision
from agentsessions.stores.kit.summary import fold_usage, preview, stored_usage
from agentsessions.usage import Usage

MAX_SEGMENTS = 16  # past this many, a save rewrites the transcript under one epoch
CHUNK_BYTES = 15 * 1024 * 1024  # under BSON's 16 MiB with room for the other fields


# One query per run of positions, never an $or of runs: not every server answers an $or
# from the index (SecantusDB scans the collection).
def in_run(key: object, epoch: int, start: int, end: int | None = None) -> dict[str, Any]:
    """The messages of ``epoch`` from position ``start`` up to ``end`` (no end: all after ``start``)."""
    positions = {"$gte": start} if end is None else {"$gte": start, "$lt": end}
    return {"session_id": key, "epoch": epoch, "position": positions}


@attrs.frozen
class State:
    """A session document's transcript: which epoch holds which positions, and what is left to delete."""

    revision: int
    length: int
    segments: tuple[tuple[int, int], ...]  # (epoch, first position), ascending
    garbage: tuple[tuple[int, int], ...] = ()  # (epoch, first position to delete)

    def runs(self) -> list[tuple[int, int, int]]:
        """(epoch, start, end) for each segment, end exclusive."""
        ends = [start for _, start in self.segments[1:]] + [self.length]
        return [(epoch, start, end) for (epoch, start), end in zip(self.segments, ends, strict=True)]

    def covers(self, earlier: State) -> bool:
        """Whether every message ``earlier`` names is still named here, so none was deleted since."""
        return self.agrees(earlier) == earlier.length

    def agrees(self, earlier: State) -> int:
        """How many of the messages ``earlier`` names are, from the first, still named here (none deleted)."""
        if self.revision == earlier.revision:
            return earlier.length
        mine = {(epoch, start): end for epoch, start, end in self.runs()}
        for epoch, start, end in earlier.runs():
            still = mine.get((epoch, start), start)  # a segment ends after it starts: never below `start`
            if still < end:
                return still
        return earlier.length

    def prefix(self, at: int) -> State:
        """The part of this transcript before position ``at`` (at least 1): what a fork copies."""
        return State(self.revision, at, tuple(segment for segment in self.segments if segment[1] < at))

    def document(self, now: int) -> dict[str, Any]:
        """The fields a save sets, ``now`` being its time in microseconds."""
        return {
            "revision": self.revision,
            "length": self.length,
            "segments": [{"epoch": e, "start": s} for e, s in self.segments],
            "garbage": [{"epoch": e, "start": s} for e, s in self.garbage],
            "updated_at": now,
        }


STATE_FIELDS = {"revision": 1, "length": 1, "segments": 1, "garbage": 1}
"""The fields of a session document that :func:`parse_state` reads."""


def parse_state(doc: Mapping[str, Any] | None) -> State | None:
    """The session document's transcript; ``None`` when no transcript was ever saved."""
    if doc is None or "revision" not in doc:
        return None  # no document, or one that add_steer or claim created
    return State(
        doc["revision"],
        doc["length"],
        tuple((s["epoch"], s["start"]) for s in doc["segments"]),
        tuple((g["epoch"], g["start"]) for g in doc.get("garbage", ())),
    )


def revision_is(old: State | None) -> dict[str, Any]:
    """The condition that a session document still holds ``old``, the transcript a save read."""
    return {"revision": {"$exists": False}} if old is None else {"revision": old.revision}


def next_state(old: State | None, revision: int, keep: int, length: int, *, fresh: bool) -> tuple[State, int, int]:
    """The state after a save, the epoch to write, and the first position to write under it.

    Appends go to the last epoch; anything else starts a fresh epoch at ``keep`` (at 0
    when there are too many segments). Segments after ``keep`` go to the garbage, whole,
    and the one that ``keep`` cuts loses its tail (and any stray documents past its end).
    """
    if old is not None and keep == old.length and not fresh:
        return State(revision, length, old.segments), old.segments[-1][0], keep
    epoch = new_revision()
    kept = [s for s in old.segments if s[1] < keep] if old is not None else []
    if len(kept) >= MAX_SEGMENTS:
        kept, keep = [], 0
    dropped = [(e, 0) for e, start in old.segments if start >= keep] if old is not None else []
    cut = [(kept[-1][0], keep)] if kept else []
    return State(revision, length, (*kept, (epoch, keep)), tuple(dropped + cut)), epoch, keep


def documents(plan: SavePlan, key: object, epoch: int, start: int) -> Iterator[dict[str, Any]]:
    """The message documents of positions ``start:`` under ``epoch``, a message past 15 MiB in chunks."""
    for position in range(start, len(plan.messages)):
        body = dump_message(plan.messages[position])
        doc = {"session_id": key, "epoch": epoch, "position": position}
        if len(body) * 4 <= CHUNK_BYTES or len(data := body.encode()) <= CHUNK_BYTES:
            yield {**doc, "body": body}
            continue
        pieces = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)]
        yield {**doc, "chunks": len(pieces), "body": Binary(pieces[0])}
        for chunk, piece in enumerate(pieces[1:], start=1):
            yield {**doc, "chunk": chunk, "body": Binary(piece)}


def _piece(doc: Mapping[str, Any]) -> tuple[int, int]:
    return doc["position"], doc.get("chunk", 0)


def assemble(length: int, docs: list[dict[str, Any]]) -> list[str | bytes] | None:
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


# --- Keys, sort keys, times -----------------------------------------------------------


def key(text: str) -> str | Binary:
    """A session id (or a replica name) as stored: the str itself, unless it holds lone surrogates."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return Binary(encode_text(text))  # a str can never equal a Binary, so ids stay apart
    return text


def text_of(stored: str | bytes) -> str:
    """The inverse of :func:`key` (pymongo hands a Binary back as ``bytes``)."""
    return stored if isinstance(stored, str) else decode_text(stored)


def preview_of(messages: Sequence[Message]) -> str | Binary:
    """The transcript's preview as a session document keeps it: stored as :func:`key` stores an id."""
    return key(preview(messages))  # a Binary only when it holds lone surrogates, which BSON strings cannot


def sort_key(session_id: str) -> str:
    """The id's bytes in hex: ids that compare as bytes, across str and Binary keys.

    Not a Binary: MongoDB orders Binary values by length before content, and ``$lt`` does
    not compare a str with a Binary. Hex keeps byte order, since every byte is two digits.
    """
    return encode_text(session_id).hex()


# Times are int64 microseconds since the epoch (values.micros): BSON dates keep only milliseconds.


def lease_micros(lease: float) -> int:
    """A lease in seconds as microseconds, rounded as ``timedelta(seconds=lease)`` rounds it."""
    return datetime.timedelta(seconds=lease) // values.MICROSECOND


def moment(stored: int | None) -> datetime.datetime | None:
    """The inverse of :func:`~agentsessions.stores.kit.values.micros`; ``None`` stays ``None``."""
    return None if stored is None else values.moment(stored)


def attempts(seconds: float) -> Iterator[int]:
    """Attempt numbers until ``seconds`` have passed, with a growing random pause between them.

    Writes that lose a compare-and-set to another writer, and reads that a save changed
    under them, start over; the random pause keeps a few writers from colliding forever.
    """
    deadline = time.monotonic() + seconds
    for attempt in itertools.count():
        yield attempt
        if time.monotonic() >= deadline:
            return
        time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))


def index_key(index: Mapping[str, Any]) -> tuple[tuple[tuple[str, Any], ...], bool]:
    """An index's fields and uniqueness, as a server reports them or an ``IndexModel`` states them."""
    # Servers and tools may report a key's direction as 1 or 1.0.
    fields = tuple((name, int(d) if isinstance(d, (int, float)) else d) for name, d in index["key"].items())
    return fields, bool(index.get("unique", False))


# --- Run records: what a save_run commits, what info and sessions() report ----------------

RUNNING = RunState.RUNNING.value
STEER_OVERHEAD = 64  # bytes a steer's seq and field names take in the document, rounded up
STEER_ROOM = 15 * 1024 * 1024  # pending steers' bytes and kept steer keys', under the 16 MB document limit


@attrs.frozen
class RunStep:
    """What one attempt of ``save_run`` adds to its commit, decided from the document it read.

    Each condition keeps what it returns true at the commit: the claim still holds; the
    steers it pulls are there (so ``steer_bytes`` drops by exactly theirs); the cancel
    flag it reports is unchanged; to release only if no steer waits, no steer came
    (``steer_seq``); and to report the waiting ones, each is still there. With the run's
    usage, the ``usage`` text read is still the one stored, and ``fields`` sets it folded
    (:func:`~agentsessions.stores.kit.summary.fold_usage`): a compare-and-set. A steer that
    arrives after the read does not stop a step that reports: the run takes it at its next
    collection. Only a release must see every steer, so steady steering cannot keep a run
    from ending its step (its release fails once, and the next attempt reports them).
    """

    lease: float
    condition: dict[str, Any]
    operators: dict[str, Any]
    fields: dict[str, Any]  # set beside the transcript: the release's state, the folded usage
    progress: Progress

    @property
    def released(self) -> bool:
        """Whether the commit ends the run (sets its state)."""
        return "run_state" in self.fields

    @classmethod
    def of(
        cls,
        doc: Mapping[str, Any],
        claim: Claim,
        taken: frozenset[int],
        end: RunState | None,
        unless_steered: bool,
        usage: Usage | None = None,
    ) -> RunStep:
        """The step for a run holding ``claim`` that read ``doc`` (the arguments as save_run got them)."""
        steers = sorted(doc.get("steers", ()), key=lambda s: int(s["seq"]))
        pulled = [s for s in steers if s["seq"] in taken]
        waiting = [s for s in steers if s["seq"] not in taken]
        release = end is not None and not (unless_steered and waiting)
        cancel = bool(doc.get("cancel_requested", False))
        condition: dict[str, Any] = {"token": claim.token, "run_state": RUNNING}
        present = pulled + (waiting if end is not None and not release else [])
        if present:
            condition["$and"] = [{"steers.seq": s["seq"]} for s in present]  # $all of several fails on SecantusDB
        if end is not None and unless_steered and release:
            condition["steer_seq"] = doc.get("steer_seq")
        if not release:
            condition["cancel_requested"] = True if cancel else {"$ne": True}
        operators: dict[str, Any] = {}
        fields: dict[str, Any] = {}
        if usage is not None:
            condition["usage"] = doc.get("usage")  # None matches a document without one, as read
            fields["usage"] = fold_usage(doc.get("usage"), claim.token, usage)
        if pulled:
            operators["$pull"] = {"steers": {"seq": {"$in": [s["seq"] for s in pulled]}}}
            operators["$inc"] = {"steer_bytes": -sum(len(s["text"]) + STEER_OVERHEAD for s in pulled)}
        if end is not None and release:
            fields |= {"run_state": end.value, "cancel_requested": False}
            return cls(claim.lease, condition, operators, fields, Progress())
        pending = tuple(_steer(s) for s in waiting) if end is not None else ()
        return cls(claim.lease, condition, operators, fields, Progress(cancel, pending))


def steer_pipeline(
    session_id: str,
    text: Binary,
    size: int,
    kept: Mapping[str, Binary] | None = None,
    if_busy: str = "steer",
    now: int = 0,
) -> list[Any]:
    """The update that appends a steer of ``size`` bytes to a session document, numbering it.

    A pipeline, so the steer carries the seq this same update counts to; it also gives a
    document it creates its sort key. ``kept`` is a keyed steer's :func:`kept_key` entry,
    appended to ``steer_keys`` in the same update (its filter makes sure the key is new).
    With ``if_busy`` ``"queue"`` or ``"interrupt"``, the steer carries ``after``: the
    document's token if a run holds it with its lease live at ``now`` (microseconds), else 0,
    decided by the same update; ``"interrupt"`` then also sets ``cancel_requested``.
    """
    steer: dict[str, Any] = {"seq": "$steer_seq", "text": {"$literal": text}}
    live = {"$and": [{"$eq": ["$run_state", RUNNING]}, {"$gt": ["$lease_expires_at", now]}]}
    if if_busy in ("queue", "interrupt"):
        steer["after"] = {"$cond": [live, "$token", 0]}
    fields: dict[str, Any] = {
        "steers": {"$concatArrays": [{"$ifNull": ["$steers", []]}, [steer]]},
        "steer_bytes": {"$add": [{"$ifNull": ["$steer_bytes", 0]}, size]},
        "sort": {"$ifNull": ["$sort", {"$literal": sort_key(session_id)}]},
    }
    if kept is not None:
        fields["steer_keys"] = {"$concatArrays": [{"$ifNull": ["$steer_keys", []]}, [{"$literal": dict(kept)}]]}
    if if_busy == "interrupt":
        fields["cancel_requested"] = {"$cond": [live, True, {"$ifNull": ["$cancel_requested", False]}]}
    return [{"$set": {"steer_seq": {"$add": [{"$ifNull": ["$steer_seq", 0]}, 1]}}}, {"$set": fields}]


def kept_key(key: str, digest: bytes) -> dict[str, Binary]:
    """A steer key as the session document keeps it in ``steer_keys``: the key and its text's digest."""
    return {"k": Binary(encode_text(key)), "d": Binary(digest)}


def key_size(kept: Mapping[str, Binary]) -> int:
    """The bytes a kept key adds to ``steer_bytes``: it stays in the document after its steer is taken."""
    return len(kept["k"]) + len(kept["d"]) + STEER_OVERHEAD


def kept_digest(doc: Mapping[str, Any] | None, kept: Mapping[str, Binary]) -> bytes | None:
    """The digest a session document keeps for ``kept``'s key; ``None`` when it keeps none."""
    entries = doc.get("steer_keys", ()) if doc is not None else ()
    return next((bytes(entry["d"]) for entry in entries if bytes(entry["k"]) == bytes(kept["k"])), None)


def too_many_steers(store: str, session_id: str, size: int, waiting: int) -> StoreError:
    """The error for a steer of ``size`` bytes that ``waiting`` bytes of steers leave no room for."""
    already = f" on top of the {waiting} bytes already waiting" if waiting else ""
    return StoreError(
        f"MongoDB store {store!r} could not add a steer of {size} bytes to session "
        f"{session_id!r:.80}{already}: pending steers live in the session's document, which MongoDB "
        f"limits to 16 MB, so at most {STEER_ROOM} bytes of steers can wait at once"
    )


def renewals(claims: Sequence[Claim], now: int) -> list[UpdateOne]:
    """One update per claim extending its lease from ``now`` (microseconds), if it still holds."""
    return [
        UpdateOne(
            {"_id": key(c.session_id), "token": c.token, "run_state": RUNNING},
            {"$set": {"lease_expires_at": now + lease_micros(c.lease)}},
        )
        for c in claims
    ]


def steers_of(doc: Mapping[str, Any] | None) -> list[Steer]:
    """The steers a session document holds, oldest first."""
    steers = doc.get("steers", ()) if doc is not None else ()
    return sorted((_steer(s) for s in steers), key=lambda s: s.seq)


def _steer(stored: Mapping[str, Any]) -> Steer:
    """A steer as the document keeps it; ``after`` only when it was queued for a later claim."""
    return Steer(int(stored["seq"]), decode_text(stored["text"]), int(stored.get("after", 0)))


def holds(doc: Mapping[str, Any] | None, claim: Claim) -> bool:
    """Whether the session document says ``claim`` holds the session."""
    return doc is not None and doc.get("token") == claim.token and doc.get("run_state") == RUNNING


def info_of(session_id: str, doc: Mapping[str, Any], now: datetime.datetime) -> SessionInfo:
    """The record a session document holds, its state derived at ``now``."""
    expires, holder = moment(doc.get("lease_expires_at")), doc.get("holder")
    state = derive_state(doc.get("run_state"), expires, now, session_id)
    return SessionInfo(
        session_id,
        doc.get("length", 0),
        moment(doc.get("updated_at")),
        state,
        None if holder is None else text_of(holder),
        expires,
        len(doc.get("steers", ())),
        bool(doc.get("cancel_requested", False)),
        int(doc.get("pending_approvals", 0)) if state is RunState.WAITING else 0,
        # An array of pairs, each the JSON text of [key, value]: one value per pair that a
        # multikey index holds and a query names exactly (a key as a field name would not
        # do: a dot or a leading $ means something there).
        metadata=from_pair_texts(doc.get("metadata", ())),
        approval_deadline=moment(doc.get("approval_deadline")) if state is RunState.WAITING else None,
        # Both absent until the session's first save under version 6.
        usage=stored_usage(doc.get("usage")),
        preview=text_of(doc.get("preview") or ""),
    )


def after(last: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The keyset condition for the page after the session ``last`` (none for the first page)."""
    if last is None:
        return []
    if last.get("updated_at") is None:
        return [{"sort": {"$lt": last["sort"]}}]
    updated = last["updated_at"]
    return [{"$or": [{"updated_at": {"$lt": updated}}, {"updated_at": updated, "sort": {"$lt": last["sort"]}}]}]


def in_states(states: frozenset[RunState] | None, now: int) -> list[dict[str, Any]]:
    """The condition that a session's derived state, at ``now`` (microseconds), is one of ``states``."""
    if states is None:
        return []
    clauses: list[dict[str, Any]] = []
    for state in sorted(states):
        if state is RunState.IDLE:
            clauses.append({"run_state": None})
        elif state is RunState.RUNNING:
            clauses.append({"run_state": RUNNING, "lease_expires_at": {"$gt": now}})
        elif state is RunState.STALLED:
            clauses.append({"run_state": RUNNING, "lease_expires_at": {"$not": {"$gt": now}}})
        else:
            clauses.append({"run_state": state.value})
    return [{"$or": clauses}]
