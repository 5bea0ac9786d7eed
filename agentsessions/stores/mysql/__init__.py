"""A store in MySQL or MariaDB (InnoDB) through PyMySQL connections that the caller provides.

The library never runs :data:`SCHEMA`: run each statement once per database, in your own
migrations, and commit (``for stmt in mysql.SCHEMA: cur.execute(stmt)``, then
``conn.commit()``). Until then every call raises :class:`~agentsessions.errors.SchemaMissingError`.
The schema's version is recorded in the table ``agentsessions_schema``; the store reads it
at its first call and refuses an older one by name: ``agentsessions migrate --store
mysql://...`` applies :data:`MIGRATIONS` under ``GET_LOCK`` (see ``_schema``).

Each call asks ``connect()`` for a connection, uses it for one transaction and closes it,
also on errors (a pooled one goes back to its pool), so one store object serves any
number of threads. Timestamps and lease comparisons use the server's clock
(``UTC_TIMESTAMP(6)``), so replicas whose clocks disagree agree on who holds a session.

Time limits are the connections': PyMySQL waits forever unless told not to, so every
connection ``connect()`` returns must carry ``read_timeout``, ``write_timeout`` and
``connect_timeout``, e.g. ``PooledDB(pymysql, ..., connect_timeout=5, read_timeout=30,
write_timeout=30, init_command="SET SESSION innodb_lock_wait_timeout = 10")``. Keep
``read_timeout`` above ``innodb_lock_wait_timeout`` (50 s unless set, hence that
``init_command``): a call waiting for a lock then gets the server's lock-wait error, not a
client timeout after which the server keeps the abandoned transaction's locks until its
own wait ends. PyMySQL's timeouts bound each read and write, not a call: a call whose
server stops answering, at any stage, fails with a :class:`StoreError` saying so within one
``read_timeout`` over a new connection per call, two through the DBUtils pool that
docs/stores/postgresql-mysql.md sets up (``ping=0, reset=False``: the statement's read,
then DBUtils' one reconnect; ``stores.from_url`` makes that pool), up to four through a
PooledDB with its defaults (a ping, a reconnect, the statement, the ROLLBACK on return).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import attrs

try:
    import pymysql
    import pymysql.cursors
except ImportError as error:  # pragma: no cover - depends on what is installed
    raise ImportError("agentsessions.stores.mysql needs PyMySQL: pip install agentsessions[mysql]") from error

from agentsessions import runs
from agentsessions.approvals import Approval, Decision, pending_error
from agentsessions.codec import decode_text, dump_message, encode_text, load_message
from agentsessions.errors import ConflictError, SchemaMissingError, StoreError
from agentsessions.messages import Message
from agentsessions.metadata import check_metadata, load_metadata, metadata_filter
from agentsessions.runs import UTC, Claim, Progress, Renewal, RunState, SessionInfo, Steer
from agentsessions.session import check_fork_at, check_session_id
from agentsessions.stores.kit import approvals as kit_approvals
from agentsessions.stores.kit import arguments, steerkeys, values
from agentsessions.stores.kit import busy as policies
from agentsessions.stores.kit.approvals import check_wait, deadline_of, decode, encode, pending_count
from agentsessions.stores.kit.failures import could_not, translated
from agentsessions.stores.kit.incremental import KnownSessions, SavePlan, new_revision, plan_save
from agentsessions.stores.kit.listing import Page, pages
from agentsessions.stores.kit.prune import PruneFilter, check_prune, prune_listed
from agentsessions.stores.kit.summary import fold_usage, preview, stored_usage
from agentsessions.stores.mysql._errors import describe, duplicate_key, explain, lost, schema_missing
from agentsessions.stores.mysql._schema import (
    APPROVALS,
    FIRST_VERSION,
    METADATA,
    MIGRATIONS,
    SCHEMA_VERSION,
    STEER_KEYS,
    VERSIONS,
    MySQLMigrator,
    checked_version,
)
from agentsessions.usage import Usage

__all__ = ["MIGRATIONS", "SCHEMA", "SCHEMA_VERSION", "MySQLMigrator", "MySQLStore", "migrator"]

# Every stored value is binary, so nothing depends on the connection's character set or
# on a collation. Ids (and holders) are the text's UTF-8 (surrogates passed through, 4 bytes
# a character at most): binary strings compare every byte, where a PAD SPACE collation
# (MariaDB's utf8mb4_bin) makes `a` equal `a `, and a case-insensitive one `a` equal `A`.
# Message bodies are codec JSON as LONGBLOB, never JSON, which would reorder and drop
# duplicate keys of a tool call's raw arguments. Times are UTC; updated_at is NULL until
# the first save. No delete resets the token counter, so no session id sees a token twice.
# Steers are clustered by session: a locking read that scanned other sessions' rows would
# wait for, and deadlock with, takers of those sessions.
SCHEMA = [
    VERSIONS,
    FIRST_VERSION,
    """CREATE TABLE IF NOT EXISTS agentsessions_sessions (
    id               VARBINARY(1020) NOT NULL PRIMARY KEY,
    revision         BIGINT          NOT NULL,
    length           INT             NOT NULL,
    updated_at       DATETIME(6)     NULL,
    run_state        VARBINARY(16)   NULL,
    token            BIGINT          NOT NULL DEFAULT 0,
    holder           BLOB            NULL,
    lease            DOUBLE          NOT NULL DEFAULT 0,
    lease_expires_at DATETIME(6)     NULL,
    cancel_requested BOOLEAN         NOT NULL DEFAULT FALSE,
    preview          BLOB            NULL,
    `usage`          BLOB            NULL,
    KEY agentsessions_sessions_by_update (updated_at, id)
) ENGINE = InnoDB""",
    """CREATE TABLE IF NOT EXISTS agentsessions_messages (
    session_id  VARBINARY(1020) NOT NULL,
    position    INT             NOT NULL,
    body        LONGBLOB        NOT NULL,
    PRIMARY KEY (session_id, position)
) ENGINE = InnoDB""",
    """CREATE TABLE IF NOT EXISTS agentsessions_steers (
    session_id  VARBINARY(1020) NOT NULL,
    seq         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    text        LONGBLOB        NOT NULL,
    after_token BIGINT UNSIGNED NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, seq),
    KEY agentsessions_steers_by_seq (seq)
) ENGINE = InnoDB""",
    """CREATE TABLE IF NOT EXISTS agentsessions_tokens (
    id          TINYINT         NOT NULL PRIMARY KEY,
    value       BIGINT          NOT NULL
) ENGINE = InnoDB""",
    "INSERT IGNORE INTO agentsessions_tokens (id, value) VALUES (1, 0)",
    STEER_KEYS,
    APPROVALS,
    METADATA,
]

"""This version's whole schema, from nothing, its version row first: run each statement once per database."""

PAGE = 500
"""How many sessions :meth:`MySQLStore.sessions` fetches in one query."""

# For the next transaction only. InnoDB's default REPEATABLE READ also locks the gaps
# between rows, so saves of neighbouring sessions would wait for, even deadlock, each other.
_READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
# Creates the record or locks the existing one, so two first writes of a session queue up
# too. A fresh record carries this call's own revision, which no store object knows, and
# length 0, so a save replaces everything and deletes nothing.
_CREATE_SESSION = """
INSERT INTO agentsessions_sessions (id, revision, length) VALUES (%s, %s, 0) ON DUPLICATE KEY UPDATE id = id
"""
_LOCK_SESSION = """
SELECT revision, length, token, run_state, cancel_requested, holder, lease_expires_at, UTC_TIMESTAMP(6), `usage`
FROM agentsessions_sessions WHERE id = %s FOR UPDATE
"""
# Locking statements name the primary key: on a small table the optimizer may pick a scan,
# which would lock, and wait for, other sessions' rows. A single-table DELETE takes no
# index hint; this form of DELETE does.
_DELETE_MESSAGES_FROM = """
DELETE m FROM agentsessions_messages AS m FORCE INDEX (PRIMARY) WHERE m.session_id = %s AND m.position >= %s
"""
# PyMySQL's executemany turns this into multi-row INSERTs of about 1 MB each.
_INSERT_MESSAGE = "INSERT INTO agentsessions_messages (session_id, position, body) VALUES (%s, %s, %s)"
_SELECT_BODIES = """
SELECT body FROM agentsessions_messages FORCE INDEX (PRIMARY) WHERE session_id = %s ORDER BY position
"""
_UPDATE_SESSION = """
UPDATE agentsessions_sessions SET revision = %s, length = %s, updated_at = UTC_TIMESTAMP(6), preview = %s WHERE id = %s
"""
# A save by the store object that saw the session last: one statement locks the record
# and, only if the revision it knows is still stored (so are the rows it knows), sets the
# new one; no other statement need come first. Its UTC_TIMESTAMP(6) may be read before a
# lock wait, but only for a holder that changed no revision (a save would have): it still
# follows the save that stored the known revision, which was done before this call began.
_UPDATE_KNOWN = """
UPDATE agentsessions_sessions SET revision = %s, length = %s, updated_at = UTC_TIMESTAMP(6), preview = %s
WHERE id = %s AND revision = %s
"""
_LEASE_END = "UTC_TIMESTAMP(6) + INTERVAL ROUND({lease} * 1000000) MICROSECOND"
# A run's save renews its lease; with an end (not NULL) it also releases the session. The
# usage is the one read under the record's lock, folded with the run's in Python.
_UPDATE_RUN = f"""
UPDATE agentsessions_sessions SET revision = %s, length = %s, updated_at = UTC_TIMESTAMP(6),
    preview = %s, `usage` = %s, lease_expires_at = {_LEASE_END.format(lease="lease")},
    run_state = COALESCE(%s, run_state), cancel_requested = cancel_requested AND %s IS NULL
WHERE id = %s
"""
# One statement reads record and rows from one snapshot. A record with no messages gives
# one row whose body is NULL; no record gives no rows.
_SELECT_TRANSCRIPT = """
SELECT s.revision, m.body FROM agentsessions_sessions AS s
LEFT JOIN agentsessions_messages AS m ON m.session_id = s.id
WHERE s.id = %s ORDER BY m.position
"""
_INSERT_STEER = "INSERT INTO agentsessions_steers (session_id, text, after_token) VALUES (%s, %s, %s)"
_INTERRUPT = "UPDATE agentsessions_sessions SET cancel_requested = TRUE WHERE id = %s"
_SELECT_STEERS = "SELECT seq, text, after_token FROM agentsessions_steers WHERE session_id = %s ORDER BY seq"
# Read and kept under the record's lock, so two retries of one key queue up and store one steer.
_SELECT_KEY = "SELECT digest FROM agentsessions_steer_keys WHERE session_id = %s AND steer_key = %s"
_INSERT_KEY = "INSERT INTO agentsessions_steer_keys (session_id, steer_key, digest) VALUES (%s, %s, %s)"
# A taker waits for another's locked rows and then finds them deleted, so each steer has
# one taker. The delete names the rows it read: a range could catch a steer added since.
_LOCK_STEERS = """
SELECT seq, text FROM agentsessions_steers FORCE INDEX (PRIMARY) WHERE session_id = %s ORDER BY seq FOR UPDATE
"""
_DELETE_STEERS = """
DELETE s FROM agentsessions_steers AS s FORCE INDEX (PRIMARY) WHERE s.session_id = %s AND s.seq IN ({placeholders})
"""
# The counter row is bumped in a transaction of its own, committed before the claim locks
# its session: waiting for a session while holding it would make every claim queue up.
# It also creates the row, which SCHEMA's INSERT leaves out when a migration forgets to commit.
_NEXT_TOKEN = """
INSERT INTO agentsessions_tokens (id, value) VALUES (1, LAST_INSERT_ID(1))
ON DUPLICATE KEY UPDATE value = LAST_INSERT_ID(value + 1)
"""
_CLAIM = f"""
UPDATE agentsessions_sessions SET run_state = 'running', token = %s, holder = %s, lease = %s,
    lease_expires_at = {_LEASE_END.format(lease="%s")}, cancel_requested = FALSE
WHERE id = %s
"""
_CANCEL = "UPDATE agentsessions_sessions SET cancel_requested = TRUE WHERE id = %s"
# What delete removes, for one session or a prune's whole batch: one statement a table, each
# finding its rows by the primary key. Record first, then what hangs off it: the order saves
# lock in, so the two never deadlock. The first four count towards "the session existed"; a
# session with steer keys or approvals has its record.
_DELETE_SESSIONS = (
    "DELETE s FROM agentsessions_sessions AS s FORCE INDEX (PRIMARY) WHERE s.id IN ({ids})",
    "DELETE s FROM agentsessions_steers AS s FORCE INDEX (PRIMARY) WHERE s.session_id IN ({ids})",
    "DELETE m FROM agentsessions_messages AS m FORCE INDEX (PRIMARY) WHERE m.session_id IN ({ids})",
    "DELETE x FROM agentsessions_metadata AS x FORCE INDEX (PRIMARY) WHERE x.session_id IN ({ids})",
    "DELETE k FROM agentsessions_steer_keys AS k FORCE INDEX (PRIMARY) WHERE k.session_id IN ({ids})",
    "DELETE a FROM agentsessions_approvals AS a FORCE INDEX (PRIMARY) WHERE a.session_id IN ({ids})",
)
_COUNTED = 4
# Under the record's lock (_LOCK_SESSION), as every write of the session: a claim, a wait and
# a decision queue up, so each decision reads the approvals the one before it left.
_WAIT = "UPDATE agentsessions_sessions SET run_state = 'waiting', cancel_requested = FALSE WHERE id = %s"
_PUT_APPROVALS = """
INSERT INTO agentsessions_approvals (session_id, body, pending) VALUES (%s, %s, %s)
ON DUPLICATE KEY UPDATE body = VALUES(body), pending = VALUES(pending)
"""
_SELECT_APPROVALS = "SELECT body, pending FROM agentsessions_approvals WHERE session_id = %s"
_UPDATE_APPROVALS = "UPDATE agentsessions_approvals SET body = %s, pending = %s WHERE session_id = %s"
# An edited input's rewrite of the wait's message: the last one, under the record's lock.
_SELECT_LAST_MESSAGE = """
SELECT m.position, m.body FROM agentsessions_sessions AS s
JOIN agentsessions_messages AS m ON m.session_id = s.id AND m.position = s.length - 1 WHERE s.id = %s
"""
_UPDATE_MESSAGE_AT = "UPDATE agentsessions_messages SET body = %s WHERE session_id = %s AND position = %s"
_RENEW_REVISION = "UPDATE agentsessions_sessions SET revision = %s WHERE id = %s"
# A fork reads the source's length under a shared lock, which every writer of a transcript
# waits for (save, save_run and delete lock the record first), so the rows it copies are the
# ones that length counts. The copy's SELECT is a consistent read under READ COMMITTED: it
# locks no message rows, and the server copies them without sending any to Python.
_LOCK_SOURCE = "SELECT length, preview FROM agentsessions_sessions WHERE id = %s LOCK IN SHARE MODE"
_FORK_SESSION = """
INSERT INTO agentsessions_sessions (id, revision, length, updated_at, preview) VALUES (%s, %s, %s, UTC_TIMESTAMP(6), %s)
"""
# A fork of a prefix (or of a session saved before schema version 6) computes its preview from
# the copied messages, read from the last in pages that double, from one, until one has text:
# most often the first page, one message, ends it.
_MESSAGES_BACK = """
SELECT position, body FROM agentsessions_messages FORCE INDEX (PRIMARY)
WHERE session_id = %s AND position < %s ORDER BY position DESC LIMIT %s
"""
_COPY_MESSAGES = """
INSERT INTO agentsessions_messages (session_id, position, body)
SELECT %s, position, body FROM agentsessions_messages FORCE INDEX (PRIMARY) WHERE session_id = %s AND position < %s
"""
# The id list lets the primary key find the rows, in key order, so two renewals of
# overlapping claims lock them in the same order; the pairs then check each token.
# LAST_INSERT_ID(1) is called only for a row asked to cancel, and the server then sends 1
# back with the count (PyMySQL's lastrowid; else 0): when every claim was renewed and none
# is asked to cancel, there is nothing to read.
_RENEW = f"""
UPDATE agentsessions_sessions FORCE INDEX (PRIMARY) SET lease_expires_at = {_LEASE_END.format(lease="lease")},
    cancel_requested = IF(cancel_requested, LAST_INSERT_ID(1), FALSE)
WHERE id IN ({{ids}}) AND (id, token) IN ({{pairs}}) AND run_state = 'running'
"""
# Which claims are held, when one was not renewed; when all were but one is asked to
# cancel, only those asked to cancel.
_HELD = """
SELECT id, token, cancel_requested FROM agentsessions_sessions FORCE INDEX (PRIMARY)
WHERE id IN ({ids}) AND (id, token) IN ({pairs}) AND run_state = 'running'
"""
# The metadata comes as one JSON object in UTF-8 bytes, whatever the connection's character set.
_INFO_COLUMNS = """s.id, s.length, s.updated_at, s.run_state, s.holder, s.lease_expires_at,
    (SELECT COUNT(*) FROM agentsessions_steers AS t WHERE t.session_id = s.id), s.cancel_requested, UTC_TIMESTAMP(6),
    (SELECT a.pending FROM agentsessions_approvals AS a WHERE a.session_id = s.id),
    (SELECT CAST(JSON_OBJECTAGG(CONVERT(x.mkey USING utf8mb4), CONVERT(x.mvalue USING utf8mb4)) AS BINARY)
     FROM agentsessions_metadata AS x WHERE x.session_id = s.id),
    (SELECT a.body FROM agentsessions_approvals AS a WHERE a.session_id = s.id AND a.pending > 0),
    s.preview, s.`usage`"""
_INFO = f"SELECT {_INFO_COLUMNS} FROM agentsessions_sessions AS s WHERE s.id = %s"
# A prune's batch read again, its records locked in id order (two prunes never deadlock).
_LOCK_BATCH = f"""
SELECT {_INFO_COLUMNS} FROM agentsessions_sessions AS s WHERE s.id IN ({{ids}}) ORDER BY s.id FOR UPDATE
"""
# Keyset pages along the (updated_at, id) index, walked backwards: newest first, never-saved
# (NULL) last, ties by id. A page starts after the last row of the one before, so a session
# is listed once however many share one updated_at, and no page rescans what came before.
_PAGE = f"""
SELECT {_INFO_COLUMNS} FROM {{source}}
WHERE {{where}} ORDER BY s.updated_at DESC, s.id DESC LIMIT {PAGE}
"""
_EVERY_SESSION = "agentsessions_sessions AS s FORCE INDEX (agentsessions_sessions_by_update)"
# Listing by metadata starts from the first pair's rows in its index and sorts those: the
# cost follows how many sessions hold the pair, not how many there are. Other pairs are
# primary-key lookups.
_HOLDING_PAIR = """agentsessions_metadata AS m FORCE INDEX (agentsessions_metadata_by_pair)
    STRAIGHT_JOIN agentsessions_sessions AS s ON s.id = m.session_id"""
_FIRST_PAIR = "m.mkey = %s AND m.mvalue = %s"
_OTHER_PAIR = """EXISTS (SELECT 1 FROM agentsessions_metadata AS o
    WHERE o.session_id = s.id AND o.mkey = %s AND o.mvalue = %s)"""
_DELETE_METADATA = "DELETE x FROM agentsessions_metadata AS x FORCE INDEX (PRIMARY) WHERE x.session_id = %s"
_INSERT_METADATA = "INSERT INTO agentsessions_metadata (session_id, mkey, mvalue) VALUES (%s, %s, %s)"
_SAVED_AFTER = "(s.updated_at < %s OR (s.updated_at = %s AND s.id < %s))"
_LIVE = "s.lease_expires_at > UTC_TIMESTAMP(6)"
_STATE_SQL = {
    RunState.IDLE: "s.run_state IS NULL",
    RunState.RUNNING: f"(s.run_state = 'running' AND {_LIVE})",
    RunState.STALLED: f"(s.run_state = 'running' AND (s.lease_expires_at IS NULL OR NOT {_LIVE}))",
    **{
        state: f"s.run_state = '{state.value}'"
        for state in (RunState.FINISHED, RunState.CANCELLED, RunState.FAILED, RunState.WAITING)
    },
}


@attrs.frozen
class _Record:
    """A session row as a locking read found it; ``state`` is derived at the server's time of that read."""

    revision: int
    length: int
    token: int
    state: RunState
    cancel_requested: bool
    holder: str | None
    lease_expires_at: datetime.datetime | None
    usage: str | None  # kit.summary's text, as save_run folds it

    @classmethod
    def of(cls, row: tuple[Any, ...], session_id: str) -> _Record:
        revision, length, token, stored, cancel, holder, expires, now, usage = row
        state = runs.derive_state(values.text(stored), values.utc(expires), values.utc(now), session_id)
        holder, expires = values.text(holder), values.utc(expires)
        return cls(revision, length, token, state, bool(cancel), holder, expires, values.text(usage))

    def holds(self, claim: Claim) -> bool:
        # A lapsed lease (STALLED) still holds until another claim takes the session over.
        return self.token == claim.token and self.state in (RunState.RUNNING, RunState.STALLED)


class MySQLStore:
    """Sessions and their runs in MariaDB or MySQL (InnoDB), over connections from ``connect()``.

    ``connect`` takes no argument and returns a PyMySQL connection with the timeouts the
    module docstring names: a pool's ``connection`` method, or ``functools.partial(
    pymysql.connect, host=..., ...)`` (a new connection on every call). The store closes
    each one when its call is done. A single connection object is refused: threads cannot
    share one, and PyMySQL cannot bring one back once the server has dropped it.
    """

    def __init__(self, connect: Callable[[], Any]) -> None:
        if not callable(connect):
            raise TypeError(
                "MySQLStore takes a zero-argument callable returning a PyMySQL connection, such as "
                f"functools.partial(pymysql.connect, ...) or a pool's connection method; got {connect!r:.80}"
            )
        self.connect = connect
        self._known = KnownSessions()
        self._version: int | None = None  # read at the first call

    def migrator(self) -> MySQLMigrator:
        """What migrates this store's database (``agentsessions migrate`` drives it); see :func:`migrator`."""
        return migrator(self.connect)

    def schema_version(self) -> int:
        """The version of the database's schema, read once at this store object's first call."""
        if self._version is None:
            with self._transaction("read the schema version", None, locking=False):
                pass
        assert self._version is not None  # the first transaction reads it, or raises
        return self._version

    def __repr__(self) -> str:
        # Never repr(connect): a partial's repr shows every keyword, the password among them.
        return f"MySQLStore({_where(self.connect)})"

    # --- Transcripts and steers (the seed's four) ------------------------------------------

    def save(self, session_id: str, messages: Sequence[Message], *, holder: object | None = None) -> None:
        """Make ``messages`` the transcript; writes only what is new since this store last saw it.

        What is saved is remembered beside ``holder`` (a session handle), for as long as it lives.
        """
        plan = plan_save(self._known, session_id, messages, holder)
        revision, key, shown = new_revision(), encode_text(session_id), encode_text(preview(plan.messages))
        rows = _rows(plan, key, plan.shared)
        with self._transaction("save the transcript", session_id, payload=_largest(rows)) as cur:
            if not _save_known(cur, plan, key, rows, revision, shown):  # rare: another writer came between
                cur.execute(_CREATE_SESSION, (key, revision))
                cur.execute(_LOCK_SESSION, (key,))
                record = _Record.of(cur.fetchone(), session_id)
                _write_transcript(cur, plan, key, rows, record)
                cur.execute(_UPDATE_SESSION, (revision, len(plan.messages), shown, key))
        self._known.remember(session_id, revision, plan.messages, holder)

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none."""
        check_session_id(session_id)
        with self._transaction("read the transcript", session_id, locking=False) as cur:
            cur.execute(_SELECT_TRANSCRIPT, (encode_text(session_id),))
            rows = cur.fetchall()
        # One row with a NULL body for a session without messages; none for an unknown id.
        bodies = [body for _, body in rows if body is not None]
        return self._known.read(session_id, rows[0][0] if rows else None, bodies)

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Leave a steer for the session's run; returns the session's state as it was stored.

        The session's row stays locked from reading the state to storing the steer, so a
        run releasing the session either sees this steer or is seen released. A ``key`` the
        session holds stores nothing: the state for the same text, a
        :class:`ConflictError` for another. ``if_busy`` decides what the steer does while a
        live run holds the session (:mod:`agentsessions.stores.kit.busy`), under the same lock.
        """
        session_id, text, steer_key = arguments.add_steer(session_id, text, key)
        if_busy, sid, data = policies.check(if_busy), encode_text(session_id), encode_text(text)
        with self._transaction("add a steer", session_id, payload=len(data)) as cur:
            cur.execute(_CREATE_SESSION, (sid, new_revision()))
            cur.execute(_LOCK_SESSION, (sid,))
            record = _Record.of(cur.fetchone(), session_id)
            state = record.state
            if steer_key is None or _new_key(cur, sid, session_id, steer_key, text):
                after = policies.after_token(
                    if_busy, state, record.token, session_id, record.holder, record.lease_expires_at
                )
                cur.execute(_INSERT_STEER, (sid, data, after))
                if policies.interrupts(if_busy, after):
                    cur.execute(_INTERRUPT, (sid,))
        return state

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first; each goes to exactly one caller."""
        key = encode_text(check_session_id(session_id))
        with self._transaction("take steers", session_id) as cur:
            cur.execute(_LOCK_STEERS, (key,))
            rows = cur.fetchall()
            _delete_steers(cur, key, [seq for seq, _ in rows])
        return [decode_text(text) for _, text in rows]

    # --- Records: info, listing, delete, cancel ---------------------------------------------

    def info(self, session_id: str) -> SessionInfo:
        """The session's record, in one query; an unknown id is ``IDLE`` with length 0."""
        check_session_id(session_id)
        with self._transaction("read the session's record", session_id, locking=False) as cur:
            cur.execute(_INFO, (encode_text(session_id),))
            row = cur.fetchone()
        return _info(row) if row else SessionInfo(session_id)

    def set_metadata(self, session_id: str, metadata: Mapping[str, str]) -> None:
        """Make ``metadata`` the session's whole metadata, in one transaction; makes the record if there is none."""
        key = encode_text(check_session_id(session_id))
        rows = [(key, name.encode(), value.encode()) for name, value in check_metadata(metadata).items()]
        # The record's lock orders replacements of one session's metadata: each is whole.
        with self._transaction("set the metadata", session_id) as cur:
            cur.execute(_CREATE_SESSION, (key, new_revision()))
            cur.execute(_LOCK_SESSION, (key,))
            cur.execute(_DELETE_METADATA, (key,))
            if rows:
                cur.executemany(_INSERT_METADATA, rows)

    def sessions(
        self,
        *,
        state: RunState | Collection[RunState] | None = None,
        updated_before: datetime.datetime | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Iterator[SessionInfo]:
        """Every session (holding each pair of ``metadata``), newest update first (never saved last), each once.

        Fetched lazily, :data:`PAGE` at a time, each page a query of its own, so no
        connection is held between pages. The arguments are checked at once.
        """
        states, before = runs.state_filter(state), runs.check_updated_before(updated_before)
        pairs = sorted((metadata_filter(metadata) or {}).items())
        filters: list[str] = [_FIRST_PAIR if n == 0 else _OTHER_PAIR for n in range(len(pairs))]
        args: list[Any] = [part.encode() for pair in pairs for part in pair]
        if before is not None:
            filters.append("s.updated_at < %s")
            args.append(before.astimezone(UTC).replace(tzinfo=None))
        if states is not None:
            filters.append(f"({' OR '.join(_STATE_SQL[s] for s in sorted(states)) or 'FALSE'})")
        source = _HOLDING_PAIR if pairs else _EVERY_SESSION
        return self._pages(source, filters, args, saved_only=before is not None)

    def _pages(self, source: str, filters: list[str], args: list[Any], *, saved_only: bool) -> Iterator[SessionInfo]:
        # Saved sessions, then (unless updated_before leaves them out) the never saved: two ranges.
        for saved in (True,) if saved_only else (True, False):
            page = functools.partial(self._page, source, filters, args, saved)
            yield from pages(page, _after_saved if saved else _after_never_saved, "MySQL store", PAGE)

    def _page(
        self, source: str, filters: list[str], args: list[Any], saved: bool, after: list[Any] | None
    ) -> Page[Any]:
        # `after` is where the last page ended: (updated_at, updated_at, id), or (id,).
        where = [*filters, "s.updated_at IS NOT NULL" if saved else "s.updated_at IS NULL"]
        if after:
            where.append(_SAVED_AFTER if saved else "s.id < %s")
        with self._transaction("list sessions", None, locking=False) as cur:
            cur.execute(_PAGE.format(source=source, where=" AND ".join(where)), [*args, *(after or [])])
            rows = cur.fetchall()
        return rows, _info

    def delete(self, session_id: str) -> bool:
        """Remove record, steers and transcript in one transaction; ``True`` if the session existed."""
        key = encode_text(check_session_id(session_id))
        with self._transaction("delete the session", session_id) as cur:
            found = _delete(cur, [key])
        self._known.forget(session_id)
        return found

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
        # came first keeps its session, one that comes later waits and finds none. What still
        # matches goes with one statement a table, its rows already locked.
        with self._transaction("prune the sessions", None) as cur:
            cur.execute(_LOCK_BATCH.format(ids=", ".join(["%s"] * len(ids))), [encode_text(i) for i in ids])
            gone = [info.id for info in map(_info, cur.fetchall()) if wanted.matches(info)]
            if gone:
                _delete(cur, [encode_text(session_id) for session_id in gone])
        for session_id in gone:
            self._known.forget(session_id)
        return len(gone)

    def cancel(self, session_id: str) -> bool:
        """Ask the live run holding the session to stop; ``False`` (nothing written) when none holds it."""
        key = encode_text(check_session_id(session_id))
        with self._transaction("cancel the run", session_id) as cur:
            cur.execute(_LOCK_SESSION, (key,))
            row = cur.fetchone()
            if row is None or _Record.of(row, session_id).state is not RunState.RUNNING:
                return False
            cur.execute(_CANCEL, (key,))
        return True

    def fork(self, session_id: str, new_id: str, *, at: int | None = None) -> None:
        """Copy the first ``at`` messages into a new, idle session with no steers, in one transaction.

        The server copies the rows. A ``new_id`` that has a record is a :class:`ConflictError`,
        and an ``at`` outside ``0..length`` a ``ValueError``; either way nothing is written.
        """
        key, new_key = encode_text(check_session_id(session_id)), encode_text(check_session_id(new_id))
        with suppress(ValueError):
            check_fork_at(at, 0)  # a TypeError before any I/O; the range once the length is read
        with self._transaction(f"fork into session {new_id!r:.80}", session_id) as cur:
            cur.execute(_LOCK_SOURCE, (key,))
            length, shown = cur.fetchone() or (0, None)
            whole, length = length, check_fork_at(at, length)
            # A fork of the whole transcript has its source's preview: no message leaves the server.
            if length < whole or shown is None:
                shown = _forked_preview(cur, key, length)
            try:
                cur.execute(_FORK_SESSION, (new_key, new_revision(), length, shown))
            except pymysql.err.IntegrityError as error:
                if not duplicate_key(error):
                    raise
                raise ConflictError(f"cannot fork into session {new_id!r:.80}: it exists") from error
            if length:
                cur.execute(_COPY_MESSAGES, (new_key, key, length))

    # --- Holding a run ---------------------------------------------------------------------

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Hold the session for a run, taking over a stalled one; busy while another lease is live."""
        session_id, replica, lease = arguments.claim(session_id, replica, lease)
        key, holder = encode_text(session_id), encode_text(replica)
        with self._transaction("take a new token", session_id, locking=False) as cur:
            cur.execute(_NEXT_TOKEN)  # committed before the session is locked
            token = int(cur.lastrowid)
        with self._transaction("claim the session", session_id) as cur:
            cur.execute(_CREATE_SESSION, (key, new_revision()))
            cur.execute(_LOCK_SESSION, (key,))
            record = _Record.of(cur.fetchone(), session_id)
            if record.state is RunState.RUNNING:
                raise runs.busy(session_id, record.holder, record.lease_expires_at)
            if record.state is RunState.WAITING and (undecided := _approvals(cur, key)[1]):
                raise pending_error(session_id, undecided)
            cur.execute(_CLAIM, (token, holder, lease, lease, key))
        return Claim(session_id, token, replica, lease, took_over=record.state is RunState.STALLED)

    def peek_steers(self, session_id: str) -> list[Steer]:
        """The waiting steers, oldest first, left in place."""
        check_session_id(session_id)
        with self._transaction("read the steers", session_id, locking=False) as cur:
            cur.execute(_SELECT_STEERS, (encode_text(session_id),))
            rows = cur.fetchall()
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
        """Save as the holder of ``claim`` in one transaction, deleting the ``taken`` steers; release with ``end``.

        With ``usage`` (the run's tokens so far) the record's usage, read under its lock, takes it.
        """
        call = arguments.save_run(claim, taken, end, unless_steered, usage)
        plan, end = plan_save(self._known, claim.session_id, messages, claim), call.end
        revision, key, shown = new_revision(), encode_text(claim.session_id), encode_text(preview(plan.messages))
        rows = _rows(plan, key, plan.shared)
        with self._transaction("save the run", claim.session_id, payload=_largest(rows)) as cur:
            cur.execute(_LOCK_SESSION, (key,))
            row = cur.fetchone()
            record = _Record.of(row, claim.session_id) if row else None
            if record is None or not record.holds(claim):
                raise runs.superseded(claim)
            _delete_steers(cur, key, call.taken)
            _write_transcript(cur, plan, key, rows, record)
            pending: tuple[Steer, ...] = ()
            if end is not None and call.unless_steered:
                cur.execute(_SELECT_STEERS, (key,))
                pending = tuple(Steer(seq, decode_text(text), after) for seq, text, after in cur.fetchall())
            release = None if end is None or pending else end.value
            used = record.usage if call.usage is None else fold_usage(record.usage, claim.token, call.usage)
            written = None if used is None else used.encode("ascii")
            cur.execute(_UPDATE_RUN, (revision, len(plan.messages), shown, written, release, release, key))
        self._known.remember(claim.session_id, revision, plan.messages, None if release else claim)
        return Progress() if release else Progress(record.cancel_requested, pending)

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        """Extend each claim's lease in one UPDATE; a SELECT reads which are held if one lost or is asked to cancel."""
        claims = arguments.renew(claims)
        if not claims:
            return Renewal()
        pairs = sorted({(encode_text(claim.session_id), claim.token) for claim in claims})
        keys = sorted({key for key, _ in pairs})
        where = {"ids": ", ".join(["%s"] * len(keys)), "pairs": ", ".join(["(%s, %s)"] * len(pairs))}
        args = [*keys, *(value for pair in pairs for value in pair)]
        held: dict[tuple[str, int], bool] = {}
        with self._transaction(f"renew the leases of {len(claims)} claim(s)", None) as cur:
            renewed = cur.execute(_RENEW.format(**where), args)
            # Rows whose lease did not change (renewed twice in one microsecond) count as not
            # renewed: the full read then tells them apart.
            every = renewed == len(pairs)
            if not every or cur.lastrowid:
                cur.execute(_HELD.format(**where) + (" AND cancel_requested" if every else ""), args)
                held = {(decode_text(key), token): bool(cancel) for key, token, cancel in cur.fetchall()}
        lost = set() if every else {c for c in claims if (c.session_id, c.token) not in held}
        cancelling = {c for c in claims if held.get((c.session_id, c.token))}
        return Renewal(frozenset(lost), frozenset(cancelling))

    # --- Connections, transactions and errors ------------------------------------------------

    # --- Approvals --------------------------------------------------------------------------

    def wait(self, claim: Claim, approvals: Sequence[Approval]) -> None:
        """Release the session held by ``claim`` as ``WAITING`` for ``approvals``, in one transaction."""
        calls = check_wait(claim, approvals)
        key, body = encode_text(claim.session_id), encode(calls).encode("utf-8")
        with self._transaction("wait for approval", claim.session_id, payload=len(body)) as cur:
            cur.execute(_LOCK_SESSION, (key,))
            row = cur.fetchone()
            if row is None or not _Record.of(row, claim.session_id).holds(claim):
                raise runs.superseded(claim)
            cur.execute(_WAIT, (key,))
            cur.execute(_PUT_APPROVALS, (key, body, pending_count(calls)))

    def approvals(self, session_id: str) -> list[Approval]:
        """The calls of the session's latest wait, decided or not."""
        key = encode_text(check_session_id(session_id))
        with self._transaction("read the approvals", session_id, locking=False) as cur:
            body, _ = _approvals(cur, key)
        return decode(body, session_id)

    def decide(
        self, session_id: str, decisions: Mapping[str, Decision], *, rewrite: kit_approvals.Rewrite | None = None
    ) -> RunState:
        """Record ``decisions`` on the waiting calls, all or none, under the record's lock; the state after.

        An edited input rewrites the wait's ``tool_use`` block (the last message) and renews
        the session's revision in the same transaction.
        """
        key = encode_text(check_session_id(session_id))
        with self._transaction("record the decisions", session_id) as cur:

            def read() -> tuple[str | None, datetime.datetime | None, str | None, datetime.datetime]:
                cur.execute(_LOCK_SESSION, (key,))
                row = cur.fetchone()
                if row is None:
                    return None, None, None, runs.utcnow()
                _, _, _, stored, _, _, expires, now, _ = row
                return values.text(stored), values.utc(expires), _approvals(cur, key)[0], values.utc(now)

            def swap(old: str | None, new: str, pending: int) -> bool:
                cur.execute(_UPDATE_APPROVALS, (new.encode("utf-8"), pending, key))
                return True  # the record's lock held since read(): nothing came between

            def edit(old: str | None, new: str, pending: int, inputs: Mapping[str, str]) -> bool:
                swap(old, new, pending)
                cur.execute(_SELECT_LAST_MESSAGE, (key,))
                row = cur.fetchone()
                if row is None:
                    raise ConflictError(f"session {session_id!r:.80} has no transcript holding its wait")
                message = kit_approvals.rewritten(rewrite, row[0], load_message(row[1]), inputs)
                cur.execute(_UPDATE_MESSAGE_AT, (dump_message(message).encode(), key, row[0]))
                cur.execute(_RENEW_REVISION, (new_revision(), key))
                return True

            return kit_approvals.decide(session_id, decisions, read=read, swap=swap, edit=edit)

    @contextmanager
    def _transaction(
        self, action: str, session_id: str | None, *, locking: bool = True, payload: int = 0
    ) -> Iterator[Any]:
        # Without locking, one statement is atomic on its own; the commit still ends the
        # transaction a connection without autocommit opened, so no snapshot outlives the call.
        # begin() also tells a DBUtils pool that a transaction is open, so it never replays
        # a failed statement on another connection in the middle of one.
        failure = functools.partial(_failure, payload=payload)
        with (
            translated(pymysql.err.Error, "MySQL store", action, session_id, known=self._known, failure=failure),
            self._connection(could_not("MySQL store", action, session_id)) as conn,
            conn.cursor(pymysql.cursors.Cursor) as cur,
        ):
            if self._version is None:  # once per store object; a race only reads it twice
                self._version = checked_version(cur, could_not("MySQL store", action, session_id))
                conn.commit()  # ends the read's implicit transaction, so the next can set its isolation
            if locking:
                cur.execute(_READ_COMMITTED)
                conn.begin()
            try:
                yield cur
            except BaseException as error:
                if not lost(error):  # the server rolls a lost connection back; trying would wait once more
                    with suppress(pymysql.err.Error):
                        conn.rollback()
                raise
            conn.commit()

    @contextmanager
    def _connection(self, what: str) -> Iterator[Any]:
        try:
            conn = self.connect()
        except pymysql.err.Error as error:
            raise StoreError(f"{what}: {explain(error, connecting=True)}") from error
        except (TypeError, ValueError, AttributeError):  # a mistake in connect() itself: no store error
            raise
        except Exception as error:  # a pool's own errors, such as having none to lend
            raise StoreError(f"{what}: connect() gave no connection ({describe(error)})") from error
        try:
            yield conn
        finally:
            with suppress(pymysql.err.Error):  # already closed, or dropped by the server
                conn.close()


def _where(connect: Callable[[], Any]) -> str:
    """What ``connect`` connects to, for a repr: ``'host:port/database'`` from a partial's keywords, or a DBUtils
    pool's (``PooledDB.connection``, what ``from_url`` makes), else its name."""
    func, keywords = (connect.func, connect.keywords) if isinstance(connect, functools.partial) else (connect, {})
    pooled = getattr(getattr(connect, "__self__", None), "_kwargs", None)  # PooledDB keeps pymysql.connect's
    if isinstance(pooled, dict):
        keywords = pooled
    if keywords.keys() & {"host", "port", "unix_socket", "database", "db"}:
        where = keywords.get("unix_socket") or f"{keywords.get('host') or 'localhost'}:{keywords.get('port') or 3306}"
        return repr(f"{where}/{keywords.get('database') or keywords.get('db') or ''}")
    return f"<{getattr(func, '__qualname__', type(func).__qualname__)}>"


def _failure(what: str, error: BaseException, *, payload: int) -> StoreError:
    if schema_missing(error):
        return SchemaMissingError(
            f"{what}: its tables are missing or older than this version ({describe(error)}); "
            "run each statement of agentsessions.stores.mysql.SCHEMA once in this database"
        )
    return StoreError(f"{what}: {explain(error, payload=payload)}")


def _after_saved(row: tuple[Any, ...]) -> list[Any]:
    return [row[2], row[2], row[0]]


def _after_never_saved(row: tuple[Any, ...]) -> list[Any]:
    return [row[0]]


def _rows(plan: SavePlan, key: bytes, start: int) -> list[tuple[bytes, int, bytes]]:
    return [(k, position, body.encode()) for k, position, body in plan.rows(key, start)]


def _largest(rows: list[tuple[bytes, int, bytes]]) -> int:
    return max((len(body) for _, _, body in rows), default=0)


def _save_known(
    cur: Any, plan: SavePlan, key: bytes, rows: list[tuple[bytes, int, bytes]], revision: int, shown: bytes
) -> bool:
    """Save as the store object that saw the session last; ``False``, writing nothing, if it never saw it or another
    writer came since."""
    known = plan.known
    if known is None or not cur.execute(_UPDATE_KNOWN, (revision, len(plan.messages), shown, key, known.revision)):
        return False
    if len(known.messages) > plan.shared:  # rows it knows past the shared prefix
        cur.execute(_DELETE_MESSAGES_FROM, (key, plan.shared))
    if rows:
        cur.executemany(_INSERT_MESSAGE, rows)
    return True


def _write_transcript(
    cur: Any, plan: SavePlan, key: bytes, rows: list[tuple[bytes, int, bytes]], stored: _Record
) -> None:
    # ``rows`` follow the prefix this store object saw stored: all there is to write when the
    # stored revision is still the one it saw. Else the stored rows are read first, under the
    # record's lock, and only those that differ are written.
    bodies = None
    if plan.needs_bodies(stored.revision, stored.length):
        cur.execute(_SELECT_BODIES, (key,))
        bodies = [body for (body,) in cur.fetchall()]
    keep = plan.rows_to_keep(stored.revision, bodies)
    if stored.length > keep:
        cur.execute(_DELETE_MESSAGES_FROM, (key, keep))
    if keep != plan.shared:
        rows = _rows(plan, key, keep)
    if rows:
        cur.executemany(_INSERT_MESSAGE, rows)


def _forked_preview(cur: Any, key: bytes, length: int) -> bytes:
    """The preview of the session's first ``length`` messages, read from the last until one has text."""
    page = 1
    while True:
        cur.execute(_MESSAGES_BACK, (key, length, page))
        rows = cur.fetchall()
        for position, body in rows:
            shown = preview([load_message(body)])
            if shown:
                return encode_text(shown)
            length = position
        if len(rows) < page:
            return b""
        page *= 2


def _new_key(cur: Any, key: bytes, session_id: str, steer_key: str, text: str) -> bool:
    """Keep ``steer_key`` for the session unless it holds it; ``False`` for a retry (see ``steerkeys.fresh``)."""
    encoded = encode_text(steer_key)
    cur.execute(_SELECT_KEY, (key, encoded))
    row = cur.fetchone()
    if not steerkeys.fresh(row[0] if row else None, text, session_id, steer_key):
        return False
    cur.execute(_INSERT_KEY, (key, encoded, steerkeys.digest(text)))
    return True


def _delete_steers(cur: Any, key: bytes, seqs: list[int]) -> None:
    if seqs:
        cur.execute(_DELETE_STEERS.format(placeholders=", ".join(["%s"] * len(seqs))), [key, *seqs])


def _delete(cur: Any, keys: list[bytes]) -> bool:
    """What delete removes of the sessions ``keys``, on ``cur``'s transaction; whether any of them existed."""
    ids = ", ".join(["%s"] * len(keys))
    counts: list[int] = [cur.execute(sql.format(ids=ids), keys) for sql in _DELETE_SESSIONS]
    return sum(counts[:_COUNTED]) > 0


def _info(row: tuple[Any, ...]) -> SessionInfo:
    key, length, updated_at, stored, holder, expires, pending, cancel, now, undecided, metadata, waiting = row[:12]
    shown, used = row[12:]  # schema version 6: the preview and the usage text
    session_id = decode_text(key)
    state = runs.derive_state(values.text(stored), values.utc(expires), values.utc(now), session_id)
    holder, expires, updated_at = values.text(holder), values.utc(expires), values.utc(updated_at)
    waits = (undecided or 0) if state is RunState.WAITING else 0
    # BOOLEAN is TINYINT: the driver gives 0 or 1.
    deadline = deadline_of(None if waiting is None else bytes(waiting), state is RunState.WAITING, session_id)
    return SessionInfo(
        session_id,
        length,
        updated_at,
        state,
        holder,
        expires,
        pending,
        bool(cancel),
        waits,
        load_metadata(metadata),
        deadline,
        stored_usage(values.text(used)),
        values.text(shown) or "",
    )


def _approvals(cur: Any, key: bytes) -> tuple[str | None, int]:
    """The session's approvals text and undecided count (``None``, 0 without a wait)."""
    cur.execute(_SELECT_APPROVALS, (key,))
    row = cur.fetchone()
    return (None, 0) if row is None else (bytes(row[0]).decode("utf-8"), int(row[1]))


def migrator(connect: Callable[[], Any]) -> MySQLMigrator:
    """The :class:`~agentsessions.stores.kit.schema.Migrator` of the database ``connect()``'s connections use."""
    return MySQLMigrator(connect, SCHEMA)
