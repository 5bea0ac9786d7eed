"""A store in PostgreSQL through a psycopg 3 connection pool that the caller owns.

The library never runs :data:`SCHEMA`: run it once per database, as part of your own
migrations (``with pool.connection() as conn: conn.execute(postgres.SCHEMA)``). Until
then every call raises :class:`~agentsessions.errors.SchemaMissingError`. The schema's
version is recorded in the table ``agentsessions_schema``; the store reads it at its first
call and refuses an older one by name: ``agentsessions migrate --store postgresql://...``
applies :data:`MIGRATIONS` under a lock (see ``_schema``).

Each call borrows one connection from the pool for one transaction and gives it back,
also on errors, so one store object serves any number of threads; each process makes its
own pool and its own store. Each write first locks the session's record, so writes to one
session queue up, and sessions never wait for each other.

Clock: ``updated_at``, leases and every comparison with a lease use the server's clock,
so replicas whose clocks disagree still agree on who holds a session.

Time: every call raises :class:`~agentsessions.errors.StoreError` within the store's
``timeout`` (and 0.25 s), whatever stage it is at when the server stops answering. The
wait for a connection from the pool gets what is left of the timeout. The server ends a
lock wait or a statement that runs past about nine tenths of what is left then
(``lock_timeout``, ``statement_timeout``, set per transaction), and the connection stays
usable. For a server that stops answering (a hung host, a proxy that stops forwarding),
psycopg has no read timeout: a watchdog thread shuts the connection's socket down when
the timeout is up, and the pool discards it.

Dropped connections: a connection that the server closed while it sat in the pool (a
restart, ``pg_terminate_backend``) is found before the store uses it, without a round
trip (the kernel already holds the server's goodbye: see ``_borrow``), closed, and
another borrowed, so no call fails for it. Give the pool no ``check``: it would cost a
round trip on every call, and psycopg_pool waits a second after two failed checks in a
row. Make the pool so::

    pool = ConnectionPool(
        conninfo,
        kwargs={
            "connect_timeout": 5,  # bounds the pool's reconnects
            # The kernel's limits for a host or network that is gone, in what no watchdog
            # watches: the pool's own reconnects, closes and background checks.
            "tcp_user_timeout": 10_000,
            "keepalives_idle": 30, "keepalives_interval": 5, "keepalives_count": 3,
        },
        open=True,
    )
"""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Any

try:
    import psycopg
    from psycopg.pq import TransactionStatus
    from psycopg.rows import tuple_row
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as error:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "agentsessions.stores.postgres needs psycopg 3 and psycopg_pool: pip install agentsessions[postgres]"
    ) from error

from agentsessions.approvals import Approval, Decision, pending_error
from agentsessions.codec import decode_text, dump_message, encode_text, load_message
from agentsessions.errors import ConflictError, SchemaMissingError, StoreError
from agentsessions.messages import Message
from agentsessions.metadata import check_metadata, metadata_filter
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
from agentsessions.stores.kit.failures import could_not, first_line, translated
from agentsessions.stores.kit.incremental import KnownSessions, SavePlan, new_revision, plan_save
from agentsessions.stores.kit.listing import Page, pages
from agentsessions.stores.kit.prune import PruneFilter, check_prune, prune_listed
from agentsessions.stores.kit.summary import fold_usage, preview, stored_usage
from agentsessions.stores.postgres._borrow import borrowed
from agentsessions.stores.postgres._schema import (
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    PostgresMigrator,
    checked_version,
    migrator,
)
from agentsessions.stores.postgres._watchdog import Watch, Watchdog, borrowing, checked
from agentsessions.usage import Usage

__all__ = [
    "CHECK_TIMEOUT",
    "MIGRATIONS",
    "PAGE_SIZE",
    "SCHEMA",
    "SCHEMA_VERSION",
    "PostgresStore",
    "check_connection",
    "migrator",
]

PAGE_SIZE = 500
"""How many sessions :meth:`PostgresStore.sessions` fetches per query."""

CHECK_TIMEOUT = 5.0
"""Seconds :func:`check_connection` waits for an answer when no store call's deadline comes first."""

_BACK = 16  # messages a fork reads back at a time for its preview: the last one has text, most often

# Explicit BEGIN and COMMIT on an autocommit connection let a whole transaction travel in
# one pipeline; psycopg's own transactions wait for BEGIN and COMMIT a round trip each.
# READ COMMITTED because these statements rely on re-reading a row once its lock is released.
_BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"
_LIMITS = "SELECT set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true)"
# Creates the record or locks the existing one, so two first writes of a session queue
# up too. A fresh record carries a revision no store object knows, and length 0, so a
# save replaces everything and deletes nothing. clock_timestamp(): after the lock wait.
_LOCK_SESSION = """
INSERT INTO agentsessions_sessions AS s (id, revision, length) VALUES (%s, %s, 0)
ON CONFLICT (id) DO UPDATE SET id = excluded.id
RETURNING s.revision, s.length, s.run_state, s.lease_expires_at, clock_timestamp(), s.token, s.holder
"""
_LOCK_EXISTING = "SELECT 1 FROM agentsessions_sessions WHERE id = %s FOR UPDATE"
_LOCK_RUN = "SELECT revision, length, token, run_state, usage FROM agentsessions_sessions WHERE id = %s FOR UPDATE"
_DELETE_MESSAGES_FROM = "DELETE FROM agentsessions_messages WHERE session_id = %s AND position >= %s"
_INSERT_MESSAGE = "INSERT INTO agentsessions_messages (session_id, position, body) VALUES (%s, %s, %s)"
_SELECT_BODIES = "SELECT body FROM agentsessions_messages WHERE session_id = %s ORDER BY position"
# statement_timestamp() is read once per statement, after the record's lock was taken. Each
# save writes the preview of the transcript it makes (kit.summary), in the same statement.
_SAVED = """
UPDATE agentsessions_sessions SET revision = %s, length = %s, updated_at = statement_timestamp(), preview = %s
WHERE id = %s
"""
# A save by the store object that saw the session last needs no answer before it writes:
# these statements follow _LOCK_EXISTING in the same round trip, and write only if the
# revision it knows is still stored (then the stored rows are the messages it knows). Each
# is a statement of its own after the lock, so it reads the record as the lock left it;
# one statement with a CTE for them all takes the server longer to plan than to run.
_KNOWN = "EXISTS (SELECT 1 FROM agentsessions_sessions WHERE id = %(id)s AND revision = %(known)s)"
_DELETE_KNOWN_FROM = f"""
DELETE FROM agentsessions_messages WHERE session_id = %(id)s AND position >= %(keep)s AND {_KNOWN}
"""
_INSERT_KNOWN = f"""
INSERT INTO agentsessions_messages (session_id, position, body) SELECT %(id)s, %(position)s, %(body)s WHERE {_KNOWN}
"""
_SAVED_KNOWN = """
UPDATE agentsessions_sessions
SET revision = %(revision)s, length = %(length)s, updated_at = statement_timestamp(), preview = %(preview)s
WHERE id = %(id)s AND revision = %(known)s
"""
# One statement decides the release and reports the steers still waiting from one
# snapshot; add_steer and take_steers lock the record first, so none can slip in between.
# The usage is the one _LOCK_RUN read, folded with the run's (or left as read).
_SAVED_RUN = """
UPDATE agentsessions_sessions AS s
SET revision = %(revision)s, length = %(length)s, updated_at = statement_timestamp(),
    preview = %(preview)s, usage = %(usage)s,
    lease_expires_at = statement_timestamp() + s.lease * interval '1 second',
    run_state = CASE WHEN r.release THEN %(end)s ELSE s.run_state END,
    cancel_requested = s.cancel_requested AND NOT r.release
FROM (SELECT %(end)s::text IS NOT NULL AND NOT (%(unless)s AND EXISTS (
          SELECT 1 FROM agentsessions_steers WHERE session_id = %(id)s)) AS release) AS r
WHERE s.id = %(id)s
RETURNING r.release, s.cancel_requested,
    CASE WHEN %(unless)s THEN ARRAY(SELECT seq FROM agentsessions_steers WHERE session_id = s.id ORDER BY seq) END,
    CASE WHEN %(unless)s THEN ARRAY(SELECT text FROM agentsessions_steers WHERE session_id = s.id ORDER BY seq) END,
    CASE WHEN %(unless)s THEN ARRAY(SELECT after_token FROM agentsessions_steers WHERE session_id = s.id ORDER BY seq)
    END
"""
# One statement reads record and rows from one snapshot. A record with no messages gives
# one row whose body is NULL; no record gives no rows.
_SELECT_TRANSCRIPT = """
SELECT s.revision, m.body FROM agentsessions_sessions AS s
LEFT JOIN agentsessions_messages AS m ON m.session_id = s.id
WHERE s.id = %s ORDER BY m.position
"""
_INSERT_STEER = "INSERT INTO agentsessions_steers (session_id, text, after_token) VALUES (%s, %s, %s)"
_INTERRUPT = "UPDATE agentsessions_sessions SET cancel_requested = true WHERE id = %s"
# A keyed steer: the key is kept, and the steer added, only if the session did not hold the
# key yet; the next statement reads the digest now kept (this one's, or the earlier one's).
# Both follow the record's lock, so two retries of one key queue up and store one steer.
_INSERT_KEYED_STEER = """
WITH kept AS (
    INSERT INTO agentsessions_steer_keys (session_id, steer_key, digest) VALUES (%(id)s, %(key)s, %(digest)s)
    ON CONFLICT (session_id, steer_key) DO NOTHING RETURNING 1
)
INSERT INTO agentsessions_steers (session_id, text, after_token)
SELECT %(id)s, %(text)s, %(after)s WHERE EXISTS (SELECT 1 FROM kept)
"""
_SELECT_KEY = "SELECT digest FROM agentsessions_steer_keys WHERE session_id = %s AND steer_key = %s"
# A row deleted by one transaction is skipped by every other, so each steer has one taker.
# RETURNING gives rows in no promised order, so each carries its seq to sort by.
_TAKE_STEERS = "DELETE FROM agentsessions_steers WHERE session_id = %s RETURNING seq, text"
_PEEK_STEERS = "SELECT seq, text, after_token FROM agentsessions_steers WHERE session_id = %s ORDER BY seq"
_DELETE_TAKEN = "DELETE FROM agentsessions_steers WHERE session_id = %s AND seq = ANY(%s::bigint[])"
_DELETE_METADATA = "DELETE FROM agentsessions_metadata WHERE session_id = %s"
_INSERT_METADATA = "INSERT INTO agentsessions_metadata (session_id, mkey, mvalue) VALUES (%s, %s, %s)"
# The record first: that waits for a save holding it, which then leaves no row behind.
_DELETE_SESSION = (
    "DELETE FROM agentsessions_sessions WHERE id = %s",
    _DELETE_METADATA,
    "DELETE FROM agentsessions_messages WHERE session_id = %s",
    "DELETE FROM agentsessions_steers WHERE session_id = %s",
    "DELETE FROM agentsessions_steer_keys WHERE session_id = %s",
    "DELETE FROM agentsessions_approvals WHERE session_id = %s",
)
# What delete removes, for a prune's batch of ids.
_DELETE_SESSIONS = tuple(
    sql.replace("WHERE id = %s", "WHERE id = ANY(%s)").replace("WHERE session_id = %s", "WHERE session_id = ANY(%s)")
    for sql in _DELETE_SESSION
)
# A wait is released by the run holding the session: its token must still be the record's.
_WAIT = """
UPDATE agentsessions_sessions SET run_state = 'waiting', cancel_requested = false
WHERE id = %s AND token = %s AND run_state = 'running'
"""
# In the same pipelined transaction, after _WAIT: it writes only if _WAIT did.
_PUT_APPROVALS = """
INSERT INTO agentsessions_approvals (session_id, body, pending)
SELECT %(id)s, %(body)s, %(pending)s WHERE EXISTS (
    SELECT 1 FROM agentsessions_sessions WHERE id = %(id)s AND token = %(token)s AND run_state = 'waiting')
ON CONFLICT (session_id) DO UPDATE SET body = excluded.body, pending = excluded.pending
"""
_SELECT_APPROVALS = "SELECT body FROM agentsessions_approvals WHERE session_id = %s"
_SELECT_DECIDING = """
SELECT s.run_state, s.lease_expires_at, a.body, statement_timestamp() FROM agentsessions_sessions AS s
LEFT JOIN agentsessions_approvals AS a ON a.session_id = s.id WHERE s.id = %s
"""
# The swap of kit.approvals.decide: only over the text read, and only while the session waits.
# The record's lock first, as every write of the session takes it, so a claim and a decision queue.
_SWAP_APPROVALS = """
UPDATE agentsessions_approvals AS a SET body = %(new)s, pending = %(pending)s
FROM (SELECT id FROM agentsessions_sessions WHERE id = %(id)s AND run_state = 'waiting' FOR UPDATE) AS s
WHERE a.session_id = s.id AND a.body = %(old)s
"""
# An edited input's rewrite of the wait's message: the last one, read under the record's lock.
_SELECT_LAST_MESSAGE = """
SELECT m.position, m.body FROM agentsessions_sessions AS s
JOIN agentsessions_messages AS m ON m.session_id = s.id AND m.position = s.length - 1 WHERE s.id = %s
"""
_UPDATE_MESSAGE_AT = "UPDATE agentsessions_messages SET body = %s WHERE session_id = %s AND position = %s"
_RENEW_REVISION = "UPDATE agentsessions_sessions SET revision = %s WHERE id = %s"
_CANCEL = """
UPDATE agentsessions_sessions SET cancel_requested = true
WHERE id = %s AND run_state = 'running' AND lease_expires_at > clock_timestamp()
"""
# Takes the record unless a live lease holds it; then it updates nothing and returns no
# row (the row is locked all the same), and the next statement reads who holds it.
_CLAIM = """
INSERT INTO agentsessions_sessions AS s
    (id, revision, length, run_state, token, holder, lease, lease_expires_at, cancel_requested)
VALUES (%(id)s, %(revision)s, 0, 'running', nextval('agentsessions_tokens'), %(holder)s, %(lease)s,
        clock_timestamp() + %(lease)s * interval '1 second', false)
ON CONFLICT (id) DO UPDATE
SET run_state = 'running', token = excluded.token, holder = excluded.holder, lease = excluded.lease,
    lease_expires_at = clock_timestamp() + excluded.lease * interval '1 second', cancel_requested = false
-- Free: never held, ended, or stalled; never a state a newer version wrote (the refusal reads it).
WHERE s.run_state IS NULL OR s.run_state IN ('finished', 'cancelled', 'failed')
   OR (s.run_state = 'waiting' AND NOT EXISTS (
       SELECT 1 FROM agentsessions_approvals AS a WHERE a.session_id = s.id AND a.pending > 0))
   OR (s.run_state = 'running' AND (s.lease_expires_at IS NULL OR s.lease_expires_at <= clock_timestamp()))
RETURNING s.token
"""
# One statement, so one snapshot: the length read and the rows copied agree whatever saves
# commit meanwhile. The rows are copied by the server, never through Python, and only if
# the new record went in: not when `at` is past the end, nor when the id is taken (ON
# CONFLICT waits for a transaction creating it, then does nothing: nothing to roll back).
# least() skips a NULL `at` and, unlike coalesce(), is not folded into a constant that an
# `at` past any integer would overflow while planning. A fork of the whole transcript takes
# the source's preview (NULL for a session not saved since version 6: as the source shows
# it); a prefix's is computed in Python from the last few rows copied, which come back
# newest first, and is written before the same transaction commits.
_FORK = f"""
WITH source AS (
    SELECT coalesce(s.length, 0) AS length, s.preview
    FROM (VALUES (1)) AS one LEFT JOIN agentsessions_sessions AS s ON s.id = %(id)s
),
fork AS (
    INSERT INTO agentsessions_sessions (id, revision, length, updated_at, preview)
    SELECT %(new)s, %(revision)s, least(%(at)s::numeric, source.length), statement_timestamp(),
           CASE WHEN %(at)s::numeric IS NULL OR %(at)s::numeric = source.length THEN source.preview END
    FROM source
    WHERE %(at)s::numeric IS NULL OR %(at)s::numeric BETWEEN 0 AND source.length
    ON CONFLICT (id) DO NOTHING
    RETURNING length, preview
),
copied AS (
    INSERT INTO agentsessions_messages (session_id, position, body)
    SELECT %(new)s, m.position, m.body FROM fork, agentsessions_messages AS m
    WHERE m.session_id = %(id)s AND m.position < fork.length
    RETURNING position, body
)
SELECT source.length, (SELECT length FROM fork), ARRAY(
    SELECT body FROM copied WHERE %(at)s::numeric IS NOT NULL AND (SELECT preview FROM fork) IS NULL
    ORDER BY position DESC LIMIT {_BACK}
) FROM source
"""
# Further back, for a prefix whose last rows copied held no text: the rows before a position, newest first.
_BODIES_BACK = f"""
SELECT body FROM agentsessions_messages WHERE session_id = %s AND position < %s
ORDER BY position DESC LIMIT {_BACK}
"""
_SET_PREVIEW = "UPDATE agentsessions_sessions SET preview = %s WHERE id = %s"
# The record the claim is about to change, locked until it has: a claim that succeeds where
# it found 'running' ended a lapsed lease (RETURNING sees only the new row).
_PRIOR = "SELECT run_state FROM agentsessions_sessions WHERE id = %s FOR UPDATE"
_HOLDER = """
SELECT holder, lease_expires_at, run_state, clock_timestamp(),
       (SELECT pending FROM agentsessions_approvals WHERE session_id = s.id)
FROM agentsessions_sessions AS s WHERE id = %s
"""
_RENEW = """
UPDATE agentsessions_sessions AS s SET lease_expires_at = clock_timestamp() + s.lease * interval '1 second'
FROM unnest(%s::bytea[], %s::bigint[]) AS c(id, token)
WHERE s.id = c.id AND s.token = c.token AND s.run_state = 'running'
RETURNING s.id, s.token, s.cancel_requested
"""
# The same for one claim, the usual case: the server plans the join with unnest() afresh on
# every call, which takes longer than the update itself.
_RENEW_ONE = """
UPDATE agentsessions_sessions AS s SET lease_expires_at = clock_timestamp() + s.lease * interval '1 second'
WHERE s.id = %s AND s.token = %s AND s.run_state = 'running'
RETURNING s.id, s.token, s.cancel_requested
"""
_RECORD = """s.id, s.length, s.updated_at, s.run_state, s.holder, s.lease_expires_at, s.cancel_requested,
       (SELECT count(*) FROM agentsessions_steers AS t WHERE t.session_id = s.id), statement_timestamp(),
       (SELECT a.pending FROM agentsessions_approvals AS a WHERE a.session_id = s.id),
       (SELECT json_object_agg(m.mkey, m.mvalue) FROM agentsessions_metadata AS m WHERE m.session_id = s.id),
       (SELECT a.body FROM agentsessions_approvals AS a WHERE a.session_id = s.id AND a.pending > 0),
       s.preview, s.usage"""
# One pair of sessions(metadata=...): the session ids the pair's index gives.
_HOLDS_PAIR = " AND s.id IN (SELECT session_id FROM agentsessions_metadata WHERE mkey = %(k{n})s AND mvalue = %(v{n})s)"
_INFO = f"SELECT {_RECORD} FROM agentsessions_sessions AS s WHERE s.id = %(id)s"
# A prune's batch read again, its records locked in id order (two prunes never deadlock).
_LOCK_BATCH = (
    f"SELECT {_RECORD} FROM agentsessions_sessions AS s WHERE s.id = ANY(%(ids)s) ORDER BY s.id FOR UPDATE OF s"
)
# Keyset pages over the (updated_at, id) index, newest first, never OFFSET. A row value
# with NULL compares NULL, so never-saved records are walked in a second pass.
_PAGE = f"SELECT {_RECORD} FROM agentsessions_sessions AS s WHERE {{where}} {{order}} LIMIT {PAGE_SIZE}"
_SAVED_BELOW = "(s.updated_at, s.id) < (%(updated)s, %(id)s)"
_NEVER_SAVED_BELOW = "s.updated_at IS NULL AND s.id < %(id)s"
_NEWEST_FIRST = "ORDER BY s.updated_at DESC, s.id DESC"
_BY_ID = "ORDER BY s.id DESC"
_LATEST = datetime.datetime(9999, 12, 31, tzinfo=datetime.UTC)  # with id '' the first bound excludes nothing
_ABOVE_EVERY_ID = b"\xff" * 1021  # ids are at most 1020 bytes
_STATE_SQL = {
    RunState.IDLE: "s.run_state IS NULL",
    RunState.RUNNING: "(s.run_state = 'running' AND s.lease_expires_at > statement_timestamp())",
    RunState.STALLED: (
        "(s.run_state = 'running' AND (s.lease_expires_at IS NULL OR s.lease_expires_at <= statement_timestamp()))"
    ),
    **{state: f"s.run_state = '{state.value}'" for state in (*ENDINGS, RunState.WAITING)},
}

_Connection = psycopg.Connection[Any]


class PostgresStore:
    """Sessions and their runs in PostgreSQL, over a ``psycopg_pool.ConnectionPool`` the caller made.

    The store opens no connection of its own and never closes the pool. ``timeout`` bounds
    every call, in seconds: waiting for a connection, for another writer's lock on the
    same session, and for the server to answer. Each call is one pipelined transaction:
    one round trip, two when a write must first read the record it locked (a save_run, a
    fork of a prefix, or a save of a session this store object never saw; three if another
    writer saved it since this store object last saw it). A save of stored messages this store object does
    not remember reads them under the lock, one round trip more, and writes only the rows
    that differ.
    """

    def __init__(self, pool: ConnectionPool[Any], *, timeout: float = 10.0) -> None:
        if not isinstance(pool, ConnectionPool):
            raise TypeError(
                "PostgresStore takes a psycopg_pool.ConnectionPool (psycopg 3), "
                f"got {type(pool).__name__}: {pool!r:.80}"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < 10**6:
            raise ValueError(f"timeout is a number of seconds above 0, got {timeout!r:.80}")
        self.pool = pool
        self.timeout = float(timeout)
        self._known = KnownSessions()
        self._watchdog = Watchdog()
        self._version: int | None = None  # read at the first call

    def __repr__(self) -> str:
        return f"PostgresStore({self.pool.name!r})"

    def migrator(self) -> PostgresMigrator:
        """What migrates this store's database (``agentsessions migrate`` drives it); see :func:`migrator`."""
        return migrator(self.pool)

    def schema_version(self) -> int:
        """The version of the database's schema, read once at this store object's first call."""
        if self._version is None:
            with self._connection("read the schema version", None):
                pass
        assert self._version is not None  # the first connection reads it, or raises
        return self._version

    # --- Transcripts and steers (the seed's four) ------------------------------------------

    def save(self, session_id: str, messages: Sequence[Message], *, holder: object | None = None) -> None:
        """Make ``messages`` the transcript; writes only what is new since this store last saw it.

        What is saved is remembered beside ``holder`` (a session handle), for as long as it lives.
        """
        plan = plan_save(self._known, session_id, messages, holder)
        revision, key, shown = new_revision(), encode_text(session_id), encode_text(preview(plan.messages))
        with self._connection("save the transcript", session_id) as (conn, watch):
            # Another writer coming between is rare: then the first transaction wrote
            # nothing, and a second one, as for a session this store never saw, writes all.
            if not _save_known(conn, watch, key, plan, revision, shown):
                with _pipelined(conn, watch):
                    stored = _cursor(conn).execute(_LOCK_SESSION, (key, revision)).fetchone()
                    assert stored is not None  # RETURNING always gives the one record
                    _write_messages(conn, key, plan, stored[0], stored[1])
                    conn.execute(_SAVED, (revision, len(plan.messages), shown, key))
        self._known.remember(session_id, revision, plan.messages, holder)

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none."""
        key = encode_text(check_session_id(session_id))
        with self._transaction("read the transcript", session_id) as conn:
            cur = _cursor(conn).execute(_SELECT_TRANSCRIPT, (key,))
        rows = cur.fetchall()
        # One row with a NULL body for a session without messages; none for an unknown id.
        bodies = [body for _, body in rows if body is not None]
        return self._known.read(session_id, rows[0][0] if rows else None, bodies)

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Leave a steer for the session's run; returns the session's state as it was stored.

        A ``key`` the session holds stores nothing: the state for the same text, a
        :class:`ConflictError` for another (nothing written: a key is only kept with its record).
        ``if_busy`` decides what the steer does while a live run holds the session
        (:mod:`agentsessions.stores.kit.busy`), under the same lock.
        """
        session_id, text, steer_key = arguments.add_steer(session_id, text, key)
        if_busy, sid = policies.check(if_busy), encode_text(session_id)
        # The record's lock is held until the steer is in: a run releasing the session
        # either sees this steer or has released before it, and the state returned says which.
        digest = steerkeys.digest(text) if steer_key is not None else b""
        kept = None
        with self._transaction("add a steer", session_id) as conn:
            _, _, run_state, expires, now, token, holder = _one(
                _cursor(conn).execute(_LOCK_SESSION, (sid, new_revision()))
            )
            state = derive_state(run_state, expires, now)
            if steer_key is not None and if_busy == "reject" and state is RunState.RUNNING:
                retried = _cursor(conn).execute(_SELECT_KEY, (sid, encode_text(steer_key))).fetchone()
                if retried is not None:  # a retry: its text is stored, or the key is another text's
                    steerkeys.fresh(retried[0], text, session_id, steer_key)
                    return state
            after = policies.after_token(if_busy, state, token, session_id, values.text(holder), expires)
            if steer_key is None:
                added = conn.execute(_INSERT_STEER, (sid, encode_text(text), after)).rowcount
            else:
                keyed = {"id": sid, "key": encode_text(steer_key), "digest": digest, "text": encode_text(text)}
                added = conn.execute(_INSERT_KEYED_STEER, {**keyed, "after": after}).rowcount
                kept = _cursor(conn).execute(_SELECT_KEY, (sid, keyed["key"]))
            if added and policies.interrupts(if_busy, after):
                conn.execute(_INTERRUPT, (sid,))
        if steer_key is not None and kept is not None:
            steerkeys.fresh(_one(kept)[0], text, session_id, steer_key)  # raises for a key kept for another text
        return state

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first; each goes to exactly one caller."""
        key = encode_text(check_session_id(session_id))
        # The record's lock keeps a releasing run's view of the waiting steers true until it commits.
        with self._transaction("take steers", session_id) as conn:
            conn.execute(_LOCK_EXISTING, (key,))
            cur = _cursor(conn).execute(_TAKE_STEERS, (key,))
        return [decode_text(text) for _, text in sorted(cur.fetchall())]

    # --- Records: info, listing, delete, cancel ---------------------------------------------

    def info(self, session_id: str) -> SessionInfo:
        """The session's record, in one round trip; an unknown id is ``IDLE`` with length 0."""
        key = encode_text(check_session_id(session_id))
        with self._transaction("read the record", session_id) as conn:
            cur = _cursor(conn).execute(_INFO, {"id": key})
        row = cur.fetchone()
        return SessionInfo(session_id) if row is None else _info(row)

    def set_metadata(self, session_id: str, metadata: Mapping[str, str]) -> None:
        """Make ``metadata`` the session's whole metadata, in one transaction; makes the record if there is none."""
        key = encode_text(check_session_id(session_id))
        pairs = check_metadata(metadata)
        # The record's lock orders replacements of one session's metadata: each is whole.
        with self._transaction("set the metadata", session_id) as conn:
            conn.execute(_LOCK_SESSION, (key, new_revision()))
            conn.execute(_DELETE_METADATA, (key,))
            if pairs:
                conn.cursor().executemany(_INSERT_METADATA, [(key, name, value) for name, value in pairs.items()])

    def sessions(
        self,
        *,
        state: RunState | Collection[RunState] | None = None,
        updated_before: datetime.datetime | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Iterator[SessionInfo]:
        """Every session (holding each pair of ``metadata``), newest update first (never saved last), in pages."""
        states, before, pairs = state_filter(state), check_updated_before(updated_before), metadata_filter(metadata)
        where = "" if states is None else " AND (" + " OR ".join(_STATE_SQL[s] for s in sorted(states)) + ")"
        params: dict[str, Any] = {}
        for n, (name, value) in enumerate(sorted((pairs or {}).items())):
            where += _HOLDS_PAIR.format(n=n)
            params |= {f"k{n}": name, f"v{n}": value}
        return self._listing(where, params, before)

    def delete(self, session_id: str) -> bool:
        """Remove transcript, steers and record in one transaction; ``True`` if the session existed."""
        key = encode_text(check_session_id(session_id))
        with self._transaction("delete", session_id) as conn:
            cursors = [_cursor(conn).execute(sql, (key,)) for sql in _DELETE_SESSION]
        self._known.forget(session_id)
        return any(cur.rowcount > 0 for cur in cursors)

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
        # Each record is locked and read again in the transaction that deletes it: a claim that
        # came first keeps its session, one that comes later waits and finds none.
        keys = [encode_text(session_id) for session_id in ids]
        with self._transaction("prune the sessions") as conn:
            rows = _cursor(conn).execute(_LOCK_BATCH, {"ids": keys}).fetchall()
            gone = [info.id for info in map(_info, rows) if wanted.matches(info)]
            if gone:
                doomed = [encode_text(session_id) for session_id in gone]
                for sql in _DELETE_SESSIONS:
                    conn.execute(sql, (doomed,))
        for session_id in gone:
            self._known.forget(session_id)
        return len(gone)

    def cancel(self, session_id: str) -> bool:
        """Ask the live run holding the session to stop; ``False``, writing nothing, when none holds it."""
        key = encode_text(check_session_id(session_id))
        with self._transaction("cancel the run", session_id) as conn:
            cur = _cursor(conn).execute(_CANCEL, (key,))
        return cur.rowcount > 0

    def fork(self, session_id: str, new_id: str, *, at: int | None = None) -> None:
        """Copy the first ``at`` messages into a new, idle session with no steers, in one transaction.

        One statement copies the rows: one round trip for the whole transcript, which takes the
        source's preview. A prefix's preview is computed from its last few rows, which the
        statement returns, and written with the commit: two round trips (more only for a
        prefix whose last messages hold no text).
        """
        key, new_key = encode_text(check_session_id(session_id)), encode_text(check_session_id(new_id))
        with suppress(ValueError):
            check_fork_at(at, 0)  # a TypeError before any I/O; the range once the length is read
        params = {"id": key, "new": new_key, "revision": new_revision(), "at": at}
        with self._transaction("fork", session_id) as conn:
            cur = _cursor(conn).execute(_FORK, params)
            row = None if at is None else _one(cur)  # a whole copy took the source's preview: nothing to wait for
            if row is not None and row[1] is not None:
                shown = _forked_preview(conn, new_key, row[1], row[2])
                if shown:
                    conn.execute(_SET_PREVIEW, (encode_text(shown), new_key))
        length, copied, _ = row or _one(cur)
        if copied is None:
            check_fork_at(at, length)  # the ValueError for an `at` past the end, nothing written
            raise ConflictError(f"cannot fork into session {new_id!r:.80}: it exists")

    # --- Holding a run ---------------------------------------------------------------------

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Hold the session for a run, taking over a stalled one; busy while another lease is live."""
        session_id, replica, lease = arguments.claim(session_id, replica, lease)
        key = encode_text(session_id)
        params = {"id": key, "revision": new_revision(), "holder": encode_text(replica), "lease": lease}
        with self._transaction("claim", session_id) as conn:
            prior = _cursor(conn).execute(_PRIOR, (key,))
            claimed = _cursor(conn).execute(_CLAIM, params)
            holder = _cursor(conn).execute(_HOLDER, (key,))
        token = claimed.fetchone()
        if token is None:
            held_by, expires, run_state, now, undecided = _one(holder)
            if derive_state(run_state, expires, now, session_id) is RunState.WAITING:  # a newer state: FormatError
                raise pending_error(session_id, undecided or 0)
            raise busy(session_id, values.text(held_by), values.utc(expires))
        found = prior.fetchone()
        return Claim(session_id, token[0], replica, lease, took_over=found is not None and found[0] == "running")

    def peek_steers(self, session_id: str) -> list[Steer]:
        """The waiting steers, oldest first, left in place."""
        key = encode_text(check_session_id(session_id))
        with self._transaction("read the steers", session_id) as conn:
            cur = _cursor(conn).execute(_PEEK_STEERS, (key,))
        return [Steer(seq, decode_text(text), after) for seq, text, after in cur.fetchall()]

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

        With ``usage`` (the tokens the run has used so far) the record's usage takes it, read
        and written under the record's lock in the same transaction.
        """
        call = arguments.save_run(claim, taken, end, unless_steered, usage)
        plan = plan_save(self._known, claim.session_id, messages, claim)
        ending, gone = call.end, call.taken
        revision, key = new_revision(), encode_text(claim.session_id)
        params = {"revision": revision, "length": len(plan.messages), "id": key, "unless": call.unless_steered}
        params |= {"end": None if ending is None else ending.value, "preview": encode_text(preview(plan.messages))}
        with self._transaction("save the run", claim.session_id) as conn:
            row = _cursor(conn).execute(_LOCK_RUN, (key,)).fetchone()
            if row is None or row[2] != claim.token or row[3] != RunState.RUNNING:
                raise superseded(claim)
            if gone:
                conn.execute(_DELETE_TAKEN, (key, gone))
            _write_messages(conn, key, plan, row[0], row[1])
            used = row[4] if call.usage is None else fold_usage(row[4], claim.token, call.usage)
            saved = _cursor(conn).execute(_SAVED_RUN, {**params, "usage": used})
        released, cancel_requested, seqs, texts, afters = _one(saved)
        self._known.remember(claim.session_id, revision, plan.messages, None if released else claim)
        if released:
            return Progress()
        pending = zip(seqs, texts, afters, strict=True) if ending is not None and call.unless_steered else ()
        return Progress(cancel_requested, tuple(Steer(seq, decode_text(text), after) for seq, text, after in pending))

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        """Extend each claim's lease in one statement for them all; report the claims lost and those asked to cancel."""
        claims = arguments.renew(claims)
        if not claims:
            return Renewal()
        keys = [encode_text(claim.session_id) for claim in claims]
        tokens = [claim.token for claim in claims]
        query, args = (_RENEW_ONE, (keys[0], tokens[0])) if len(claims) == 1 else (_RENEW, (keys, tokens))
        with self._transaction("renew the leases") as conn:
            cur = _cursor(conn).execute(query, args)
        held = {(bytes(key), token): cancel for key, token, cancel in cur.fetchall()}
        found = [(claim, held.get((key, claim.token))) for key, claim in zip(keys, claims, strict=True)]
        return Renewal(
            frozenset(claim for claim, cancel in found if cancel is None),
            frozenset(claim for claim, cancel in found if cancel),
        )

    # --- Connections and transactions ------------------------------------------------------

    def _listing(self, where: str, params: dict[str, Any], before: datetime.datetime | None) -> Iterator[SessionInfo]:
        saved = _PAGE.format(where=_SAVED_BELOW + where, order=_NEWEST_FIRST)
        first = {"updated": before or _LATEST, "id": b""}
        page = functools.partial(self._page, saved, params, first)
        yield from pages(page, _after, "PostgreSQL store", PAGE_SIZE)
        if before is None:  # updated_before excludes the never-saved records
            never_saved = _PAGE.format(where=_NEVER_SAVED_BELOW + where, order=_BY_ID)
            page = functools.partial(self._page, never_saved, params, {"id": _ABOVE_EVERY_ID})
            yield from pages(page, _after, "PostgreSQL store", PAGE_SIZE)

    def _page(
        self, query: str, params: dict[str, Any], first: dict[str, Any], bound: dict[str, Any] | None
    ) -> Page[tuple[Any, ...]]:
        with self._transaction("list the sessions") as conn:
            cur = _cursor(conn).execute(query, {**params, **(bound or first)})
        return cur.fetchall(), _info

    # --- Approvals --------------------------------------------------------------------------

    def wait(self, claim: Claim, approvals: Sequence[Approval]) -> None:
        """Release the session held by ``claim`` as ``WAITING`` for ``approvals``, in one transaction."""
        calls = check_wait(claim, approvals)
        key = encode_text(claim.session_id)
        params = {"id": key, "token": claim.token, "body": encode(calls), "pending": pending_count(calls)}
        with self._transaction("wait for approval", claim.session_id) as conn:
            waited = _cursor(conn).execute(_WAIT, (key, claim.token))
            conn.execute(_PUT_APPROVALS, params)
        if waited.rowcount == 0:
            raise superseded(claim)

    def approvals(self, session_id: str) -> list[Approval]:
        """The calls of the session's latest wait, decided or not."""
        key = encode_text(check_session_id(session_id))
        with self._transaction("read the approvals", session_id) as conn:
            cur = _cursor(conn).execute(_SELECT_APPROVALS, (key,))
        row = cur.fetchone()
        return decode(row[0] if row else None, session_id)

    def decide(
        self, session_id: str, decisions: Mapping[str, Decision], *, rewrite: kit_approvals.Rewrite | None = None
    ) -> RunState:
        """Record ``decisions`` on the waiting calls, all or none, in one conditional write; the state after.

        An edited input rewrites the wait's ``tool_use`` block (the last message) and renews
        the session's revision in the same transaction, under the record's lock the swap took.
        """
        key = encode_text(check_session_id(session_id))

        def read() -> tuple[str | None, datetime.datetime | None, str | None, datetime.datetime]:
            with self._transaction("read the approvals", session_id) as conn:
                cur = _cursor(conn).execute(_SELECT_DECIDING, (key,))
            row = cur.fetchone()
            return (row[0], row[1], row[2], row[3]) if row else (None, None, None, utcnow())

        def swap(old: str | None, new: str, pending: int) -> bool:
            params = {"new": new, "pending": pending, "id": key, "old": old}
            with self._transaction("record the decisions", session_id) as conn:
                cur = _cursor(conn).execute(_SWAP_APPROVALS, params)
            return cur.rowcount > 0

        def edit(old: str | None, new: str, pending: int, inputs: Mapping[str, str]) -> bool:
            params = {"new": new, "pending": pending, "id": key, "old": old}
            with self._transaction("record the decisions", session_id) as conn:
                # Reading a result ends the pipeline's batch: the swap's outcome, before the rewrite.
                if _cursor(conn).execute(_SWAP_APPROVALS + " RETURNING a.session_id", params).fetchone() is None:
                    return False
                row = _cursor(conn).execute(_SELECT_LAST_MESSAGE, (key,)).fetchone()
                if row is None:
                    raise ConflictError(f"session {session_id!r:.80} has no transcript holding its wait")
                body = dump_message(kit_approvals.rewritten(rewrite, row[0], load_message(row[1]), inputs))
                conn.execute(_UPDATE_MESSAGE_AT, (body, key, row[0]))
                conn.execute(_RENEW_REVISION, (new_revision(), key))
            return True

        return kit_approvals.decide(session_id, decisions, read=read, swap=swap, edit=edit)

    @contextmanager
    def _transaction(self, action: str, session_id: str | None = None) -> Iterator[_Connection]:
        """One pipelined transaction on a connection of its own."""
        with self._connection(action, session_id) as (conn, watch), _pipelined(conn, watch):
            yield conn

    @contextmanager
    def _connection(self, action: str, session_id: str | None) -> Iterator[tuple[_Connection, Watch]]:
        with self._watchdog.watch(time.monotonic() + self.timeout) as watch:
            failure = functools.partial(self._failure, watch=watch)
            with (
                translated(psycopg.Error, "PostgreSQL store", action, session_id, known=self._known, failure=failure),
                borrowing(watch),
                borrowed(self.pool, watch) as conn,
            ):
                watch.attach(conn)
                try:
                    with _autocommit(conn):
                        if self._version is None:  # once per store object; a race only reads it twice
                            self._version = checked_version(conn, could_not("PostgreSQL store", action, session_id))
                        yield conn, watch
                finally:
                    watch.detach()

    def _failure(self, what: str, error: BaseException, *, watch: Watch) -> StoreError:
        if watch.cut:
            late = f"no answer from PostgreSQL within the store's timeout of {self.timeout:g} s"
            return StoreError(f"{what}: {late}; the connection was closed")
        if isinstance(error, PoolTimeout):
            busy = f"the pool lent no connection within the store's timeout of {self.timeout:g} s"
            return StoreError(f"{what}: {busy} (all {self.pool.max_size} busy, or none could connect)")
        if isinstance(error, psycopg.errors.UndefinedTable):
            return SchemaMissingError(
                f"{what}: its tables are missing ({first_line(error)}); "
                "run agentsessions.stores.postgres.SCHEMA once in this database"
            )
        return StoreError(f"{what}: {first_line(error)}")


def check_connection(conn: psycopg.Connection[Any], *, timeout: float = CHECK_TIMEOUT) -> None:
    """A pool's ``check``: ``ConnectionPool.check_connection``, bounded in time.

    :class:`PostgresStore` does not need it: it finds a connection the server dropped
    without a round trip, and a check costs one on every borrow. For a pool other code
    shares too: it sends the same empty query; if no answer comes within ``timeout``
    seconds, or by the deadline of the store call waiting for the connection if that comes
    first, it shuts the connection's socket down and raises ``psycopg.OperationalError``;
    the pool then drops the connection and lends another. Pass
    ``check=postgres.check_connection`` (or a ``functools.partial`` of it with another
    ``timeout``) to ``ConnectionPool``.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < 10**6:
        raise ValueError(f"timeout is a number of seconds above 0, got {timeout!r:.80}")
    checked(conn, timeout)


@contextmanager
def _autocommit(conn: _Connection) -> Iterator[None]:
    """The connection in autocommit for the call (the store sends BEGIN and COMMIT itself), then as it was."""
    was = conn.autocommit
    if not was:
        conn.autocommit = True  # a client-side flag: no round trip
    try:
        yield
    finally:
        if not conn.closed:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                conn.execute("ROLLBACK")  # a failed statement left the transaction open
            conn.autocommit = was


@contextmanager
def _pipelined(conn: _Connection, watch: Watch) -> Iterator[None]:
    """One pipelined transaction: statements travel together until the body reads a result."""
    with _pipeline(conn):
        conn.execute(_BEGIN)
        # The server's own error, on a connection that stays usable, comes before the watchdog
        # has to cut it; a lock wait ends first, so its error says that it was a lock.
        left = (watch.deadline - time.monotonic()) * 1000
        conn.execute(_LIMITS, (str(max(1, round(left * 0.9))), str(max(1, round(left * 0.85)))))
        try:
            yield
        except psycopg.Error:
            raise
        except BaseException:
            conn.execute("ROLLBACK")  # this call's own refusal (a superseded claim): nothing to keep
            raise
        conn.execute("COMMIT")


def _pipeline(conn: _Connection) -> AbstractContextManager[object]:
    # Pipeline mode needs libpq 14 or newer; without it the same statements go one by one.
    return conn.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()


def _cursor(conn: _Connection) -> psycopg.Cursor[tuple[Any, ...]]:
    # The pool's connections may have another row factory; rows here are tuples.
    return conn.cursor(row_factory=tuple_row)


def _save_known(conn: _Connection, watch: Watch, key: bytes, plan: SavePlan, revision: int, shown: bytes) -> bool:
    """Save in one round trip as the store object that saw the session last; ``False``, writing nothing, if it never
    saw it (no round trip then) or another writer came since."""
    if plan.known is None:
        return False
    known = {"id": key, "known": plan.known.revision}
    with _pipelined(conn, watch):
        conn.execute(_LOCK_EXISTING, (key,))
        if len(plan.known.messages) > plan.shared:  # rows it knows past the shared prefix
            conn.execute(_DELETE_KNOWN_FROM, {**known, "keep": plan.shared})
        rows = [{**known, "position": position, "body": body} for _, position, body in plan.rows(key, plan.shared)]
        if rows:
            conn.cursor().executemany(_INSERT_KNOWN, rows)
        saved = conn.execute(
            _SAVED_KNOWN, {**known, "revision": revision, "length": len(plan.messages), "preview": shown}
        )
    return saved.rowcount > 0


def _write_messages(conn: _Connection, key: bytes, plan: SavePlan, revision: int, length: int) -> None:
    """Delete the stored rows past what is still right, and insert the new ones.

    A session this store object did not see last has its rows read first, under the
    record's lock, so that only rows that differ are written.
    """
    bodies = None
    if plan.needs_bodies(revision, length):
        bodies = [body for (body,) in _cursor(conn).execute(_SELECT_BODIES, (key,)).fetchall()]
    keep = plan.rows_to_keep(revision, bodies)
    if length > keep:
        conn.execute(_DELETE_MESSAGES_FROM, (key, keep))
    if len(plan.messages) > keep:
        conn.cursor().executemany(_INSERT_MESSAGE, plan.rows(key, keep))


def _forked_preview(conn: _Connection, key: bytes, length: int, bodies: list[str]) -> str:
    """The preview of a fork of ``length`` messages, its last ``bodies`` (newest first) at hand; reads further back
    while none has text."""
    while True:
        shown = next(filter(None, (preview([load_message(body)]) for body in bodies)), "")
        length -= len(bodies)
        if shown or not bodies or length <= 0:
            return shown
        bodies = [body for (body,) in _cursor(conn).execute(_BODIES_BACK, (key, length)).fetchall()]


def _one(cur: psycopg.Cursor[tuple[Any, ...]]) -> tuple[Any, ...]:
    row = cur.fetchone()
    assert row is not None  # RETURNING or reading a record this transaction holds locked
    return row


def _info(row: tuple[Any, ...]) -> SessionInfo:
    *record, shown, usage = row
    key, length, updated, run_state, holder, expires, cancel, pending, now, undecided, metadata, waiting = record
    session_id = decode_text(key)
    state = derive_state(run_state, expires, now, session_id)
    waits = (undecided or 0) if state is RunState.WAITING else 0
    holder, expires = values.text(holder), values.utc(expires)
    return SessionInfo(
        session_id,
        length,
        values.utc(updated),
        state,
        holder,
        expires,
        pending,
        cancel,
        waits,
        metadata or {},
        deadline_of(waiting, state is RunState.WAITING, session_id),
        stored_usage(usage),
        values.text(shown) or "",
    )


def _after(row: tuple[Any, ...]) -> dict[str, Any]:
    return {"updated": row[2], "id": row[0]}
