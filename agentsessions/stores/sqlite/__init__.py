"""A store in one SQLite file (stdlib ``sqlite3``), shared by threads and by processes.

It creates its tables on open, and migrates a file made by an older release on open, in
one ``BEGIN IMMEDIATE`` transaction, safely while other processes have the file open (the
schema, its versions and that migration are in ``_schema``; the version is recorded in the
file's ``agentsessions_schema`` table). A file from before the run columns (whose
``updated_at`` is ``NOT NULL`` seconds, which SQLite cannot change in place) is refused with
a :class:`~agentsessions.errors.StoreError`. WAL lets readers run beside the one writer;
the busy timeout makes writers from other threads and processes wait their turn instead of
failing. Every step of more than one statement is one ``BEGIN IMMEDIATE`` transaction,
which takes the write lock before it reads, so no step ever has to upgrade a read into a
write and fail halfway.

Clock: ``updated_at`` and leases come from this process's clock (``utcnow()``), kept as
integer microseconds since the epoch. Processes that share a file share a machine, and
so one clock.
"""

from __future__ import annotations

import datetime
import functools
import os
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import Any

from agentsessions.approvals import Approval, Decision, pending_error
from agentsessions.codec import decode_text, dump_message, encode_text, load_message
from agentsessions.errors import ConflictError
from agentsessions.messages import Message
from agentsessions.metadata import check_metadata, load_metadata, metadata_filter
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
from agentsessions.stores.kit.approvals import check_wait, deadline_of, decode, encode, pending_count
from agentsessions.stores.kit.failures import translated
from agentsessions.stores.kit.incremental import KnownSessions, SavePlan, new_revision, plan_save
from agentsessions.stores.kit.listing import Page, pages
from agentsessions.stores.kit.prune import PruneFilter, check_prune, prune_listed
from agentsessions.stores.kit.summary import fold_usage, preview, stored_usage
from agentsessions.stores.sqlite._schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION, migrator, prepare
from agentsessions.usage import Usage

__all__ = ["MIGRATIONS", "PAGE_SIZE", "SCHEMA", "SCHEMA_VERSION", "SQLiteStore", "migrator", "open"]

PAGE_SIZE = 500
"""How many sessions :meth:`SQLiteStore.sessions` fetches per query."""

_SELECT_SESSION = "SELECT revision, length FROM agentsessions_sessions WHERE id = ?"
# Bodies come as bytes: the codec's JSON decoder reads UTF-8 itself, so making a str of each first is wasted.
_SELECT_MESSAGES = "SELECT CAST(body AS BLOB) FROM agentsessions_messages WHERE session_id = ? ORDER BY position"
_SELECT_MESSAGE_AT = "SELECT CAST(body AS BLOB) FROM agentsessions_messages WHERE session_id = ? AND position = ?"
_UPDATE_MESSAGE_AT = "UPDATE agentsessions_messages SET body = ? WHERE session_id = ? AND position = ?"
_RENEW_REVISION = "UPDATE agentsessions_sessions SET revision = ? WHERE id = ?"
_DELETE_MESSAGES_FROM = "DELETE FROM agentsessions_messages WHERE session_id = ? AND position >= ?"
_INSERT_MESSAGE = "INSERT INTO agentsessions_messages (session_id, position, body) VALUES (?, ?, ?)"
_UPSERT_SESSION = """
INSERT INTO agentsessions_sessions (id, revision, length, updated_at, preview) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET revision = excluded.revision, length = excluded.length,
                               updated_at = excluded.updated_at, preview = excluded.preview
"""
# A steer or a claim before any save makes the record: length 0, never updated, IDLE.
_CREATE_RECORD = "INSERT INTO agentsessions_sessions (id, revision, length) VALUES (?, ?, 0) ON CONFLICT DO NOTHING"
_SELECT_HOLD = "SELECT run_state, lease_expires_at, holder, token FROM agentsessions_sessions WHERE id = ?"
_NEXT_STEER = "UPDATE agentsessions_counters SET steers = steers + 1"
_INSERT_STEER = """
INSERT INTO agentsessions_steers (session_id, seq, text, after_token) SELECT ?, steers, ?, ? FROM agentsessions_counters
"""
_INTERRUPT = "UPDATE agentsessions_sessions SET cancel_requested = 1 WHERE id = ?"
_SELECT_KEY = "SELECT digest FROM agentsessions_steer_keys WHERE session_id = ? AND steer_key = ?"
_INSERT_KEY = "INSERT INTO agentsessions_steer_keys (session_id, steer_key, digest) VALUES (?, ?, ?)"
# RETURNING gives rows in no promised order, so each carries its seq to sort by.
_TAKE_STEERS = "DELETE FROM agentsessions_steers WHERE session_id = ? RETURNING seq, text"
_PEEK_STEERS = "SELECT seq, text, after_token FROM agentsessions_steers WHERE session_id = ? ORDER BY seq"
_DELETE_STEER = "DELETE FROM agentsessions_steers WHERE session_id = ? AND seq = ?"
_NEXT_TOKEN = "UPDATE agentsessions_counters SET tokens = tokens + 1 RETURNING tokens"
_CLAIM = """
UPDATE agentsessions_sessions SET run_state = 'running', token = ?, holder = ?, lease = ?,
                                  lease_expires_at = ?, cancel_requested = 0
WHERE id = ?
"""
_SELECT_RUN = """
SELECT revision, length, token, run_state, lease, cancel_requested, usage FROM agentsessions_sessions WHERE id = ?
"""
_SAVE_RUN = """
UPDATE agentsessions_sessions SET revision = ?, length = ?, updated_at = ?, lease_expires_at = ?,
                                  run_state = ?, cancel_requested = ?, preview = ?, usage = ?
WHERE id = ?
"""
_RENEW = """
UPDATE agentsessions_sessions SET lease_expires_at = ?1 + CAST(round(lease * 1000000) AS INTEGER)
WHERE id = ?2 AND token = ?3 AND run_state = 'running'
RETURNING cancel_requested
"""
_CANCEL = """
UPDATE agentsessions_sessions SET cancel_requested = 1
WHERE id = ? AND run_state = 'running' AND lease_expires_at > ?
"""
# A fork is a new record and a copy of the rows made by SQLite itself, never through Python.
_FORK_RECORD = "INSERT INTO agentsessions_sessions (id, revision, length, updated_at, preview) VALUES (?, ?, ?, ?, ?)"
# The fork's preview: its messages from the last, read until one has text (most often the first read).
_MESSAGES_BACK = """
SELECT CAST(body AS BLOB) FROM agentsessions_messages WHERE session_id = ? AND position < ? ORDER BY position DESC
"""
_COPY_MESSAGES = """
INSERT INTO agentsessions_messages (session_id, position, body)
SELECT ?, position, body FROM agentsessions_messages WHERE session_id = ? AND position < ? ORDER BY position
"""
_DELETE_METADATA = "DELETE FROM agentsessions_metadata WHERE session_id = ?"
_INSERT_METADATA = "INSERT INTO agentsessions_metadata (session_id, mkey, mvalue) VALUES (?, ?, ?)"
_DELETE_SESSION = (
    _DELETE_METADATA,
    "DELETE FROM agentsessions_messages WHERE session_id = ?",
    "DELETE FROM agentsessions_steers WHERE session_id = ?",
    "DELETE FROM agentsessions_steer_keys WHERE session_id = ?",
    "DELETE FROM agentsessions_sessions WHERE id = ?",
)
_DELETE_APPROVALS = "DELETE FROM agentsessions_approvals WHERE session_id = ?"
# A wait is released by the run holding the session: its token must still be the record's.
_WAIT = """
UPDATE agentsessions_sessions SET run_state = 'waiting', cancel_requested = 0
WHERE id = ? AND token = ? AND run_state = 'running'
"""
_PUT_APPROVALS = """
INSERT INTO agentsessions_approvals (session_id, body, pending) VALUES (?, ?, ?)
ON CONFLICT (session_id) DO UPDATE SET body = excluded.body, pending = excluded.pending
"""
_SELECT_APPROVALS = "SELECT body FROM agentsessions_approvals WHERE session_id = ?"
_SELECT_DECIDING = """
SELECT s.run_state, s.lease_expires_at, a.body FROM agentsessions_sessions AS s
LEFT JOIN agentsessions_approvals AS a ON a.session_id = s.id WHERE s.id = ?
"""
# The swap of kit.approvals.decide: only over the text read, and only while the session waits.
_SWAP_APPROVALS = """
UPDATE agentsessions_approvals SET body = ?, pending = ?
WHERE session_id = ? AND body = ?
  AND EXISTS (SELECT 1 FROM agentsessions_sessions WHERE id = ? AND run_state = 'waiting')
"""
_PENDING = "SELECT pending FROM agentsessions_approvals WHERE session_id = ?"
_INFO_COLUMNS = """id, length, updated_at, run_state, holder, lease_expires_at, cancel_requested,
       (SELECT count(*) FROM agentsessions_steers WHERE session_id = s.id),
       (SELECT pending FROM agentsessions_approvals WHERE session_id = s.id),
       (SELECT json_group_object(mkey, mvalue) FROM agentsessions_metadata WHERE session_id = s.id),
       (SELECT body FROM agentsessions_approvals WHERE session_id = s.id AND pending > 0),
       preview, usage"""
# One pair of sessions(metadata=...): the session ids the pair's index gives.
_HOLDS_PAIR = " AND id IN (SELECT session_id FROM agentsessions_metadata WHERE mkey = :k{n} AND mvalue = :v{n})"
_INFO = f"SELECT {_INFO_COLUMNS} FROM agentsessions_sessions AS s WHERE id = ?"
# Keyset pages over the (updated_at, id) index, newest first; SQLite sorts NULL lowest, so
# never-saved records come last, walked in a second pass (a row value with NULL compares NULL).
_PAGE = f"""
SELECT {_INFO_COLUMNS} FROM agentsessions_sessions AS s
WHERE {{where}} ORDER BY updated_at DESC, id DESC LIMIT {PAGE_SIZE}
"""
_SAVED_BELOW = "(updated_at, id) < (:updated, :id)"
_NEVER_SAVED = "updated_at IS NULL"
_NEVER_SAVED_BELOW = "updated_at IS NULL AND id < :id"
_LATEST = 2**63 - 1  # above any updated_at: with id X'' the first page's bound excludes nothing
_STATE_SQL = {
    RunState.IDLE: "run_state IS NULL",
    RunState.RUNNING: "(run_state = 'running' AND lease_expires_at > :now)",
    RunState.STALLED: "(run_state = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= :now))",
    **{state: f"run_state = '{state.value}'" for state in (*ENDINGS, RunState.WAITING)},
}


class SQLiteStore:
    """Sessions and their runs in one SQLite file.

    Each thread gets its own connection (sqlite3 connections belong to one thread), so
    one store object is safe to share between threads; several processes may open the
    same file. ``timeout`` is how long a writer waits for another to finish, in seconds.

    ``durable`` chooses what a power cut or an OS crash may cost. ``False`` (the default)
    runs WAL with ``synchronous=NORMAL``: a commit returns once it is in the WAL file, not
    yet flushed to disk, so such a crash may lose the last commits (never corrupt the file;
    a crash of the process alone loses nothing). ``True`` runs ``synchronous=FULL``: every
    commit waits for its fsync, which costs a disk flush per save.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0, durable: bool = False) -> None:
        if not isinstance(durable, bool):
            raise TypeError(f"durable must be a bool, got {type(durable).__name__}: {durable!r:.80}")
        self.path = os.fspath(path)
        self.durable = durable
        self._timeout = timeout
        self._local = threading.local()
        self._pid = os.getpid()
        self._known = KnownSessions()
        with self._errors("create the tables"):
            self._version = prepare(self._connection(), self.path).version

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    def schema_version(self) -> int:
        """The version of the file's schema, read (and migrated to, when older) on open."""
        assert self._version is not None  # prepare() returns a version or raises
        return self._version

    # --- Transcripts and steers (the seed's four) ------------------------------------------

    def save(self, session_id: str, messages: Sequence[Message], *, holder: object | None = None) -> None:
        """Make ``messages`` the transcript; writes only what is new since this store last saw it.

        What is saved is remembered beside ``holder`` (a session handle), for as long as it lives.
        """
        plan = plan_save(self._known, session_id, messages, holder)
        revision, key = new_revision(), encode_text(session_id)
        with self._errors("save the transcript", session_id), self._transaction() as db:
            _write_messages(db, key, plan, db.execute(_SELECT_SESSION, (key,)).fetchone())
            db.execute(_UPSERT_SESSION, (key, revision, len(plan.messages), _now(), _preview(plan.messages)))
        self._known.remember(session_id, revision, plan.messages, holder)

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none."""
        key = encode_text(check_session_id(session_id))
        with self._errors("read the transcript", session_id), self._transaction("BEGIN") as db:
            row = db.execute(_SELECT_SESSION, (key,)).fetchone()
            bodies = db.execute(_SELECT_MESSAGES, (key,)).fetchall()
        return self._known.read(session_id, row[0] if row else None, [body for (body,) in bodies])

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Leave a steer for the session's run; returns the session's state as it was stored.

        A ``key`` the session holds stores nothing: the state for the same text, a
        :class:`ConflictError` for another. ``if_busy`` decides what the steer does while a
        live run holds the session (:mod:`agentsessions.stores.kit.busy`).
        """
        session_id, text, steer_key = arguments.add_steer(session_id, text, key)
        if_busy, sid = policies.check(if_busy), encode_text(session_id)
        # One transaction with the record's write lock: a run releasing the session either
        # sees this steer or has released before it, and the state returned says which. The
        # steer key and the if_busy policy are decided in it too, so two retries of one key
        # store one steer and two racing senders each get one outcome.
        with self._errors("add a steer", session_id), self._transaction() as db:
            now = _now()
            run_state, expires, holder, token = _hold(db, sid)
            state = _state(run_state, expires, now, session_id)
            if steer_key is None or _new_key(db, sid, session_id, steer_key, text):
                after = policies.after_token(if_busy, state, token, session_id, values.text(holder), _datetime(expires))
                db.execute(_NEXT_STEER)
                db.execute(_INSERT_STEER, (sid, encode_text(text), after))
                if policies.interrupts(if_busy, after):
                    db.execute(_INTERRUPT, (sid,))
        return state

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first; each goes to exactly one caller."""
        key = encode_text(check_session_id(session_id))
        with self._errors("take steers", session_id):
            rows = self._connection().execute(_TAKE_STEERS, (key,)).fetchall()
        return [decode_text(text) for _, text in sorted(rows)]

    # --- Records: info, listing, delete, cancel ---------------------------------------------

    def info(self, session_id: str) -> SessionInfo:
        """The session's record, in one query; an unknown id is ``IDLE`` with length 0."""
        key = encode_text(check_session_id(session_id))
        with self._errors("read the record", session_id):
            now = _now()
            row = self._connection().execute(_INFO, (key,)).fetchone()
        return SessionInfo(session_id) if row is None else _info(row, now)

    def set_metadata(self, session_id: str, metadata: Mapping[str, str]) -> None:
        """Make ``metadata`` the session's whole metadata, in one transaction; makes the record if there is none."""
        key = encode_text(check_session_id(session_id))
        pairs = check_metadata(metadata)
        with self._errors("set the metadata", session_id), self._transaction() as db:
            db.execute(_CREATE_RECORD, (key, new_revision()))
            db.execute(_DELETE_METADATA, (key,))
            db.executemany(_INSERT_METADATA, [(key, name, value) for name, value in pairs.items()])

    def sessions(
        self,
        *,
        state: RunState | Collection[RunState] | None = None,
        updated_before: datetime.datetime | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Iterator[SessionInfo]:
        """Every session (holding each pair of ``metadata``), newest update first (never saved last), in pages."""
        states, before, pairs = state_filter(state), check_updated_before(updated_before), metadata_filter(metadata)
        where, params = _where(states), dict[str, Any]()
        for n, (name, value) in enumerate(sorted((pairs or {}).items())):
            where += _HOLDS_PAIR.format(n=n)
            params |= {f"k{n}": name, f"v{n}": value}
        return self._listing(where, params, _LATEST if before is None else values.micros(before), before is None)

    def delete(self, session_id: str) -> bool:
        """Remove transcript, steers and record in one transaction; ``True`` if the session existed."""
        key = encode_text(check_session_id(session_id))
        with self._errors("delete", session_id), self._transaction() as db:
            removed = sum(db.execute(sql, (key,)).rowcount for sql in _DELETE_SESSION)
            db.execute(_DELETE_APPROVALS, (key,))  # not counted: a session with approvals has its record
        self._known.forget(session_id)
        return removed > 0

    def prune(
        self,
        *,
        updated_before: datetime.datetime,
        state: RunState | Collection[RunState] | None = None,
        metadata: Mapping[str, str] | None = None,
        batch: int = 500,
    ) -> int:
        """Delete the sessions last updated before ``updated_before`` (ended ones by default), a transaction a batch."""
        wanted = check_prune(updated_before, state, metadata, batch)
        return prune_listed(self.sessions, wanted, functools.partial(self._prune_batch, wanted=wanted))

    def _prune_batch(self, ids: list[str], wanted: PruneFilter) -> int:
        # Each record is read again in the transaction that deletes it: a claim that came first keeps it.
        with self._errors("prune the sessions"), self._transaction() as db:
            now, gone = _now(), []
            for session_id in ids:
                row = db.execute(_INFO, (encode_text(session_id),)).fetchone()
                if row is not None and wanted.matches(_info(row, now)):
                    gone.append(session_id)
            for key in map(encode_text, gone):  # what delete removes
                for sql in (*_DELETE_SESSION, _DELETE_APPROVALS):
                    db.execute(sql, (key,))
        for session_id in gone:
            self._known.forget(session_id)
        return len(gone)

    def cancel(self, session_id: str) -> bool:
        """Ask the live run holding the session to stop; ``False``, writing nothing, when none holds it."""
        key = encode_text(check_session_id(session_id))
        with self._errors("cancel the run", session_id):
            return self._connection().execute(_CANCEL, (key, _now())).rowcount > 0

    def fork(self, session_id: str, new_id: str, *, at: int | None = None) -> None:
        """Copy the first ``at`` messages into a new, idle session with no steers, in one transaction."""
        key, new_key = encode_text(check_session_id(session_id)), encode_text(check_session_id(new_id))
        with self._errors("fork", session_id), self._transaction() as db:
            row = db.execute(_SELECT_SESSION, (key,)).fetchone()
            length = check_fork_at(at, row[1] if row else 0)
            try:
                db.execute(_FORK_RECORD, (new_key, new_revision(), length, _now(), _forked_preview(db, key, length)))
            except sqlite3.IntegrityError:
                raise ConflictError(f"cannot fork into session {new_id!r:.80}: it exists") from None
            db.execute(_COPY_MESSAGES, (new_key, key, length))

    # --- Holding a run ---------------------------------------------------------------------

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Hold the session for a run, taking over a stalled one; busy while another lease is live."""
        session_id, replica, lease = arguments.claim(session_id, replica, lease)
        key = encode_text(session_id)
        with self._errors("claim", session_id), self._transaction() as db:
            now = _now()
            run_state, expires, holder, _ = _hold(db, key)
            state = _state(run_state, expires, now, session_id)
            if state is RunState.RUNNING:
                raise busy(session_id, values.text(holder), _datetime(expires))
            if run_state == RunState.WAITING and (pending := db.execute(_PENDING, (key,)).fetchone()) and pending[0]:
                raise pending_error(session_id, pending[0])
            [(token,)] = db.execute(_NEXT_TOKEN).fetchall()
            db.execute(_CLAIM, (token, encode_text(replica), lease, now + values.span(lease), key))
        return Claim(session_id, token, replica, lease, took_over=state is RunState.STALLED)

    def peek_steers(self, session_id: str) -> list[Steer]:
        """The waiting steers, oldest first, left in place."""
        key = encode_text(check_session_id(session_id))
        with self._errors("read the steers", session_id):
            rows = self._connection().execute(_PEEK_STEERS, (key,)).fetchall()
        return [Steer(seq, decode_text(text), after) for seq, text, after in rows]

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

        With ``usage`` (the run's tokens so far) the record's usage takes it in the same transaction.
        """
        call = arguments.save_run(claim, taken, end, unless_steered, usage)
        plan, ending = plan_save(self._known, claim.session_id, messages, claim), call.end
        revision, key = new_revision(), encode_text(claim.session_id)
        with self._errors("save the run", claim.session_id), self._transaction() as db:
            row = db.execute(_SELECT_RUN, (key,)).fetchone()
            if row is None or row[2] != claim.token or row[3] != RunState.RUNNING:
                raise superseded(claim)
            db.executemany(_DELETE_STEER, [(key, seq) for seq in call.taken])
            _write_messages(db, key, plan, row[:2])
            pending = db.execute(_PEEK_STEERS, (key,)).fetchall() if ending and call.unless_steered else []
            release, now = None if pending else ending, _now()
            state, cancel = (RunState.RUNNING.value, row[5]) if release is None else (release.value, 0)
            used = row[6] if call.usage is None else fold_usage(row[6], claim.token, call.usage)
            shown = _preview(plan.messages)
            lease = now + values.span(row[4])
            db.execute(_SAVE_RUN, (revision, len(plan.messages), now, lease, state, cancel, shown, used, key))
        self._known.remember(claim.session_id, revision, plan.messages, claim if release is None else None)
        if release is not None:
            return Progress()
        return Progress(bool(cancel), tuple(Steer(seq, decode_text(text), after) for seq, text, after in pending))

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        """Extend each claim's lease, all in one transaction; report the claims lost and those asked to cancel."""
        claims = arguments.renew(claims)
        if not claims:
            return Renewal()
        lost, cancelling = set(), set()
        with self._errors("renew the leases"), self._transaction() as db:
            now = _now()
            for claim in claims:
                rows = db.execute(_RENEW, (now, encode_text(claim.session_id), claim.token)).fetchall()
                if not rows:
                    lost.add(claim)
                elif rows[0][0]:
                    cancelling.add(claim)
        return Renewal(frozenset(lost), frozenset(cancelling))

    # --- Approvals --------------------------------------------------------------------------

    def wait(self, claim: Claim, approvals: Sequence[Approval]) -> None:
        """Release the session held by ``claim`` as ``WAITING`` for ``approvals``, in one transaction."""
        calls = check_wait(claim, approvals)
        key = encode_text(claim.session_id)
        with self._errors("wait for approval", claim.session_id), self._transaction() as db:
            if db.execute(_WAIT, (key, claim.token)).rowcount == 0:
                raise superseded(claim)
            db.execute(_PUT_APPROVALS, (key, encode(calls), pending_count(calls)))

    def approvals(self, session_id: str) -> list[Approval]:
        """The calls of the session's latest wait, decided or not."""
        key = encode_text(check_session_id(session_id))
        with self._errors("read the approvals", session_id):
            row = self._connection().execute(_SELECT_APPROVALS, (key,)).fetchone()
        return decode(row[0] if row else None, session_id)

    def decide(
        self, session_id: str, decisions: Mapping[str, Decision], *, rewrite: kit_approvals.Rewrite | None = None
    ) -> RunState:
        """Record ``decisions`` on the waiting calls, all or none, in one conditional write; the state after.

        An edited input rewrites the wait's ``tool_use`` block (the last message) and renews
        the session's revision in the same transaction.
        """
        key = encode_text(check_session_id(session_id))

        def read() -> tuple[str | None, datetime.datetime | None, str | None, datetime.datetime]:
            now = _now()
            row = self._connection().execute(_SELECT_DECIDING, (key,)).fetchone()
            run_state, expires, body = row if row else (None, None, None)
            return run_state, _datetime(expires), body, values.moment(now)

        def swap(old: str | None, new: str, pending: int) -> bool:
            return self._connection().execute(_SWAP_APPROVALS, (new, pending, key, old, key)).rowcount > 0

        def edit(old: str | None, new: str, pending: int, inputs: Mapping[str, str]) -> bool:
            with self._transaction() as db:
                if db.execute(_SWAP_APPROVALS, (new, pending, key, old, key)).rowcount == 0:
                    return False
                _rewrite_last(db, key, session_id, lambda at, m: kit_approvals.rewritten(rewrite, at, m, inputs))
                return True

        with self._errors("record the decisions", session_id):
            return kit_approvals.decide(session_id, decisions, read=read, swap=swap, edit=edit)

    # --- Connections and transactions ------------------------------------------------------

    def close(self) -> None:
        """Close the calling thread's connection (others close when their threads end)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    def _listing(self, where: str, params: dict[str, Any], before: int, never_saved: bool) -> Iterator[SessionInfo]:
        name, saved = f"SQLite store {self.path!r}", _SAVED_BELOW + where
        first = {**params, "updated": before, "id": b""}
        yield from pages(functools.partial(self._page, saved, saved, params, first), _after, name, PAGE_SIZE)
        if never_saved:  # updated_before excludes the never-saved records
            never = functools.partial(self._page, _NEVER_SAVED + where, _NEVER_SAVED_BELOW + where, params, params)
            yield from pages(never, _after, name, PAGE_SIZE)

    def _page(
        self, first: str, then: str, params: dict[str, Any], start: dict[str, Any], bound: dict[str, Any] | None
    ) -> Page[Any]:
        where, bound = (first, start) if bound is None else (then, {**params, **bound})
        # A page's `now` decides both the state filter and the states reported, so they agree.
        now = _now()
        with self._errors("list the sessions"):
            rows = self._connection().execute(_PAGE.format(where=where), {**bound, "now": now}).fetchall()
        return rows, functools.partial(_info, now=now)

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None or self._pid != os.getpid():
            # A connection must not cross a fork; the child opens its own.
            self._pid = os.getpid()
            connection = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
            # 8 KiB pages hold kilobyte messages with little left over (1.23x the message text;
            # 16 KiB 1.21x, 4 KiB 1.38x) while a small file's seven tables and indexes take a
            # page each. It only takes on a new file.
            connection.execute("PRAGMA page_size = 8192")
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute(f"PRAGMA synchronous = {'FULL' if self.durable else 'NORMAL'}")
            self._local.connection = connection
        return connection

    @contextmanager
    def _transaction(self, begin: str = "BEGIN IMMEDIATE") -> Iterator[sqlite3.Connection]:
        db = self._connection()
        db.execute(begin)
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            # Also when COMMIT itself failed (SQLITE_BUSY waiting for readers to leave a file in
            # rollback-journal mode, say): the transaction is still open then, and the thread's
            # next BEGIN would fail with "cannot start a transaction within a transaction".
            self._roll_back(db)
            raise

    def _roll_back(self, db: sqlite3.Connection) -> None:
        if not db.in_transaction:  # some errors (SQLITE_FULL, SQLITE_IOERR) roll back by themselves
            return
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            # A connection that cannot get out of its transaction is of no more use: the
            # thread's next call opens a new one.
            with suppress(sqlite3.Error):
                db.close()
            self._local.connection = None

    def _errors(self, action: str, session_id: str = "") -> AbstractContextManager[None]:
        return translated(sqlite3.Error, f"SQLite store {self.path!r}", action, session_id, known=self._known)


def _write_messages(db: sqlite3.Connection, key: bytes, plan: SavePlan, stored: Sequence[int] | None) -> None:
    """Write the rows of ``plan`` after those already right; ``stored`` is the record's (revision, length).

    A session this store object did not see last has its rows read first, in the same
    transaction, so that only rows that differ are written.
    """
    revision, length = (stored[0], stored[1]) if stored else (None, 0)
    bodies = None
    if plan.needs_bodies(revision, length):
        bodies = [body for (body,) in db.execute(_SELECT_MESSAGES, (key,))]
    keep = plan.rows_to_keep(revision, bodies)
    if length > keep:
        db.execute(_DELETE_MESSAGES_FROM, (key, keep))
    db.executemany(_INSERT_MESSAGE, plan.rows(key, keep))


def _rewrite_last(
    db: sqlite3.Connection, key: bytes, session_id: str, change: Callable[[int, Message], Message]
) -> None:
    """Rewrite the transcript's last message through ``change``, and renew the revision (stores' memories lapse)."""
    row = db.execute(_SELECT_SESSION, (key,)).fetchone()
    last = (row[1] if row else 0) - 1
    body = db.execute(_SELECT_MESSAGE_AT, (key, last)).fetchone() if last >= 0 else None
    if body is None:
        raise ConflictError(f"session {session_id!r:.80} has no transcript holding its wait")
    db.execute(_UPDATE_MESSAGE_AT, (dump_message(change(last, load_message(body[0]))), key, last))
    db.execute(_RENEW_REVISION, (new_revision(), key))


def _where(states: frozenset[RunState] | None) -> str:
    """The listing's state filter as SQL; sorted, so one filter is one SQL text and its statement is reused."""
    if states is None:
        return ""
    return " AND (" + (" OR ".join(sorted(_STATE_SQL[state] for state in states)) or "0") + ")"


def _new_key(db: sqlite3.Connection, key: bytes, session_id: str, steer_key: str, text: str) -> bool:
    """Keep ``steer_key`` for the session unless it holds it; ``False`` for a retry (see ``steerkeys.fresh``)."""
    encoded = encode_text(steer_key)
    row = db.execute(_SELECT_KEY, (key, encoded)).fetchone()
    if not steerkeys.fresh(row[0] if row else None, text, session_id, steer_key):
        return False
    db.execute(_INSERT_KEY, (key, encoded, steerkeys.digest(text)))
    return True


def _hold(db: sqlite3.Connection, key: bytes) -> tuple[str | None, int | None, bytes | None, int]:
    """The record's run_state, lease_expires_at, holder and token, making the record if it has none."""
    db.execute(_CREATE_RECORD, (key, new_revision()))
    run_state, expires, holder, token = db.execute(_SELECT_HOLD, (key,)).fetchone()
    return run_state, expires, holder, token


def _preview(messages: Sequence[Message]) -> bytes:
    return encode_text(preview(messages))


def _forked_preview(db: sqlite3.Connection, key: bytes, length: int) -> bytes:
    """The preview of the session's first ``length`` messages, read from the last until one has text."""
    for (body,) in db.execute(_MESSAGES_BACK, (key, length)):
        shown = preview([load_message(body)])
        if shown:
            return encode_text(shown)
    return b""


def _info(row: Sequence[Any], now: int) -> SessionInfo:
    key, length, updated, run_state, holder, expires, cancel, pending, undecided, metadata, waiting, shown, usage = row
    session_id = decode_text(key)
    state = _state(run_state, expires, now, session_id)
    return SessionInfo(
        session_id,
        length,
        _datetime(updated),
        state,
        values.text(holder),
        _datetime(expires),
        pending,
        bool(cancel),
        (undecided or 0) if run_state == RunState.WAITING else 0,
        load_metadata(metadata),
        deadline_of(waiting, state is RunState.WAITING, session_id),
        stored_usage(usage),
        values.text(shown) or "",
    )


def _after(row: Sequence[Any]) -> dict[str, Any]:
    return {"updated": row[2], "id": row[0]}


def _state(run_state: str | None, expires: int | None, now: int, session_id: str = "") -> RunState:
    return derive_state(run_state, _datetime(expires), values.moment(now), session_id)


def _now() -> int:
    return values.micros(utcnow())


def _datetime(stored: int | None) -> datetime.datetime | None:
    return None if stored is None else values.moment(stored)


def open(path: str | os.PathLike[str] | Path, *, timeout: float = 10.0, durable: bool = False) -> SQLiteStore:
    """Open (creating if needed) the SQLite store at ``path``; ``durable=True`` fsyncs each commit (see SQLiteStore)."""
    return SQLiteStore(path, timeout=timeout, durable=durable)
