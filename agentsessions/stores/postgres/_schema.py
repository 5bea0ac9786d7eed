"""The PostgreSQL store's schema, its versions, and the migrator ``agentsessions migrate`` drives.

The library runs none of this on its own: :data:`SCHEMA` creates this version from nothing,
and :data:`MIGRATIONS` bring an older database forward, through ``agentsessions migrate`` or
your own migration tool. The store reads the version once, at its first call
(:func:`read_version`), and refuses an older schema by name.

A migration runs under a session-level advisory lock (:data:`LOCK`), so replicas that start
``agentsessions migrate`` at once apply each step once. The statements of a step run in one
transaction (PostgreSQL's DDL is transactional), so a migration killed half-way left nothing
behind, with two exceptions kept apart: a statement that cannot run inside a transaction
(``CREATE INDEX CONCURRENTLY``) runs on its own, and, like every statement, is idempotent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from agentsessions.errors import StoreError
from agentsessions.stores.kit.schema import VERSION_TABLE, Applied, Step, check_version, plan

__all__ = [
    "LOCK",
    "MIGRATIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "PostgresMigrator",
    "checked_version",
    "migrator",
    "read_version",
]

SCHEMA_VERSION = 6
"""The version of the schema this release creates and needs (2: steer keys; 3: approvals; 4: session metadata;
5: steers queued for the next run; 6: each session's preview and usage)."""

LOCK = 0x6167_656E_7473_6573  # "agentses": the advisory lock every migration of any schema takes

# One row per version applied. A database that has the session table and no row is version 1.
_VERSIONS = f"""
CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
    version     integer     NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    applied_by  text        NOT NULL DEFAULT current_user
);
"""

# Version 2: a steer's key and the digest of its text, kept while the session lives (taking
# the steer leaves it; delete removes it), so a retried steer is stored once.
_STEER_KEYS = """
CREATE TABLE IF NOT EXISTS agentsessions_steer_keys (
    session_id  bytea       NOT NULL,
    steer_key   bytea       NOT NULL,
    digest      bytea       NOT NULL,
    PRIMARY KEY (session_id, steer_key)
);
"""

# Version 3: the calls of a session's latest wait for approval (agentsessions.approvals), as one
# JSON text (never jsonb: a tool call's input is kept byte for byte), and how many are
# undecided; run_state 'waiting' while the session waits. The state check is widened: a
# version-2 replica never writes 'waiting', and refuses to claim a session it does not know.
_APPROVALS = """
CREATE TABLE IF NOT EXISTS agentsessions_approvals (
    session_id  bytea       PRIMARY KEY,
    body        text        NOT NULL,
    pending     integer     NOT NULL
);
"""
_STATES = "('running', 'finished', 'cancelled', 'failed', 'waiting')"
_WIDEN_STATES = (
    "ALTER TABLE agentsessions_sessions DROP CONSTRAINT IF EXISTS agentsessions_sessions_run_state_check",
    f"ALTER TABLE agentsessions_sessions ADD CONSTRAINT agentsessions_sessions_run_state_check "
    f"CHECK (run_state IN {_STATES})",
)

# Version 4: each session's metadata, a row per pair, and an index from a pair to its
# sessions, so listing one user's sessions reads that user's rows, not every session. Keys
# and values are text (the library refuses NUL and lone surrogates in them) in the "C"
# collation: compared byte for byte, as ids are.
_METADATA = """
CREATE TABLE IF NOT EXISTS agentsessions_metadata (
    session_id  bytea       NOT NULL,
    mkey        text        COLLATE "C" NOT NULL,
    mvalue      text        COLLATE "C" NOT NULL,
    PRIMARY KEY (session_id, mkey)
);
CREATE INDEX IF NOT EXISTS agentsessions_metadata_by_pair ON agentsessions_metadata (mkey, mvalue, session_id);
"""

# Version 5: a steer sent with if_busy="queue" or "interrupt" while a run held the session
# carries that run's token: only a claim with a greater one takes it (0: any run). A
# version-4 replica inserts steers without it, which the default makes steers for any run.
_QUEUED = "ALTER TABLE agentsessions_steers ADD COLUMN IF NOT EXISTS after_token bigint NOT NULL DEFAULT 0"

# Version 6: what a listing shows of a session's transcript, written by each save: the preview
# of its last text (bytea, like every text that may hold a lone surrogate) and the runs' usage
# (kit.summary's ASCII JSON, opaque here). NULL in a session saved before, or by a version-5
# replica: an empty preview and no usage until its next save. Nullable columns without a
# default: adding them rewrites no row, so the lock the ALTER takes is brief.
_SUMMARY = (
    "ALTER TABLE agentsessions_sessions ADD COLUMN IF NOT EXISTS preview bytea",
    "ALTER TABLE agentsessions_sessions ADD COLUMN IF NOT EXISTS usage text",
)

# Ids, holders and steers are bytea of their UTF-8 (surrogates passed through): text
# cannot hold NUL, and bytes compare exactly, so no collation can make `a` equal `A` or
# `a `. Message bodies are codec JSON in text, never jsonb, which would reorder keys,
# respace and drop duplicate keys of a tool call's raw arguments. updated_at is NULL
# until the first save (a steer or a claim can make the record first); run_state is NULL
# until the first claim and 'running' while held (STALLED is derived from the lease).
# Tokens come from a sequence, which deleting a session never resets. The version row goes
# in first, and only into a database that has no session table yet: one made by an older
# release keeps its version until it is migrated.
SCHEMA = (
    _VERSIONS
    + f"""INSERT INTO {VERSION_TABLE} (version)
SELECT {SCHEMA_VERSION}
WHERE to_regclass('agentsessions_sessions') IS NULL AND NOT EXISTS (SELECT 1 FROM {VERSION_TABLE});
CREATE TABLE IF NOT EXISTS agentsessions_sessions (
    id               bytea            PRIMARY KEY CHECK (octet_length(id) BETWEEN 1 AND 1020),
    revision         bigint           NOT NULL,
    length           integer          NOT NULL,
    updated_at       timestamptz,
    run_state        text             CHECK (run_state IN {_STATES}),
    token            bigint           NOT NULL DEFAULT 0,
    holder           bytea,
    lease            double precision NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    cancel_requested boolean          NOT NULL DEFAULT false,
    preview          bytea,
    usage            text
);
CREATE INDEX IF NOT EXISTS agentsessions_sessions_by_update ON agentsessions_sessions (updated_at, id);
CREATE TABLE IF NOT EXISTS agentsessions_messages (
    session_id  bytea       NOT NULL,
    position    integer     NOT NULL,
    body        text        NOT NULL,
    PRIMARY KEY (session_id, position)
);
CREATE TABLE IF NOT EXISTS agentsessions_steers (
    seq         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id  bytea       NOT NULL,
    text        bytea       NOT NULL,
    after_token bigint      NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS agentsessions_steers_by_session ON agentsessions_steers (session_id, seq);
CREATE SEQUENCE IF NOT EXISTS agentsessions_tokens;"""
    + _STEER_KEYS
    + _APPROVALS
    + _METADATA
)
"""This version's whole schema, from nothing, its version row included: run it once per database."""


def _record(version: int) -> str:
    """The statement recording ``version``, once however often it runs."""
    return (
        f"INSERT INTO {VERSION_TABLE} (version) "
        f"SELECT {version} WHERE NOT EXISTS (SELECT 1 FROM {VERSION_TABLE} WHERE version >= {version})"
    )


MIGRATIONS: dict[int, list[str]] = {
    1: [_VERSIONS.strip().rstrip(";"), _STEER_KEYS.strip().rstrip(";"), _record(2)],
    2: [_APPROVALS.strip().rstrip(";"), *_WIDEN_STATES, _record(3)],
    3: [*(statement.strip() for statement in _METADATA.split(";") if statement.strip()), _record(4)],
    4: [_QUEUED, _record(5)],
    5: [*_SUMMARY, _record(6)],
}
"""From a version to the statements that bring it to the next, each idempotent; never run by the library on its own."""

_SUMMARIES = {
    1: "steer keys (table agentsessions_steer_keys) and the schema version table",
    2: "approvals (table agentsessions_approvals, run state 'waiting')",
    3: "session metadata (table agentsessions_metadata, indexed by pair)",
    4: "steers queued for the next run (column agentsessions_steers.after_token)",
    5: "each session's preview and usage (columns agentsessions_sessions.preview and usage)",
}

_VERSION = f"SELECT max(version) FROM {VERSION_TABLE}"
_SESSIONS_TABLE = "SELECT to_regclass('agentsessions_sessions') IS NOT NULL"
_CREATE = "create every table (agentsessions.stores.postgres.SCHEMA)"


def read_version(conn: psycopg.Connection[Any]) -> int | None:
    """The version the database records: ``None`` with none of the tables, 1 with no version table.

    ``conn`` is in autocommit; one query when the version table exists, two otherwise.
    """
    return _read(conn)[0]


def checked_version(conn: psycopg.Connection[Any], what: str = "PostgreSQL store") -> int:
    """:func:`read_version`, if this release works with it; else the error saying what to run, after ``what``.

    With none of the tables, the :class:`~agentsessions.errors.SchemaMissingError` is chained
    from the driver's error that said so.
    """
    version, missing = _read(conn)
    create = "run agentsessions.stores.postgres.SCHEMA once in this database"
    return check_version(version, SCHEMA_VERSION, store=what, create=create, url="postgresql://...", missing=missing)


def _read(conn: psycopg.Connection[Any]) -> tuple[int | None, psycopg.Error | None]:
    missing: psycopg.Error | None = None
    try:
        row = conn.execute(_VERSION).fetchone()
    except psycopg.errors.UndefinedTable as error:
        row, missing = None, error
    if row is not None and row[0] is not None:
        return int(row[0]), None
    exists = conn.execute(_SESSIONS_TABLE).fetchone()
    return (1 if exists is not None and exists[0] else None), missing


class PostgresMigrator:
    """What ``agentsessions migrate`` drives for a PostgreSQL database, over the caller's pool."""

    store = "PostgreSQL store"
    version = SCHEMA_VERSION
    language = "SQL"
    comment = "--"

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        self.pool = pool

    def found(self) -> int | None:
        """The version the database records; ``None`` when it has none of the tables."""
        with self._connection() as conn:
            return read_version(conn)

    def plan(self, found: int | None) -> list[Step]:
        """The steps from ``found`` to this release's version."""
        create = Step(SCHEMA_VERSION, _CREATE, (SCHEMA.strip(),))
        return plan(found, SCHEMA_VERSION, create=create, migrations=MIGRATIONS, summaries=_SUMMARIES)

    def apply(self, *, wait: float, ran: Callable[[Step, int], None] | None = None) -> Applied:
        """Under the advisory lock: read the version again, run each missing step in its transaction."""
        with self._connection() as conn:
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{max(1, round(wait * 1000))}ms",))
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (LOCK,))
            except psycopg.errors.LockNotAvailable as error:
                raise StoreError(f"{self.store}: another migration held the lock for {wait:g} s") from error
            finally:
                conn.execute("RESET lock_timeout")
            try:
                found = read_version(conn)
                steps = self.plan(found)
                for step in steps:
                    _run(conn, step, ran)
                return Applied(found, tuple(steps))
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK,))

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self.pool.connection() as conn:
                was = conn.autocommit
                conn.autocommit = True
                try:
                    yield conn
                finally:
                    if not conn.closed:
                        conn.autocommit = was
        except psycopg.Error as error:
            first = str(error).strip().split("\n", 1)[0] or type(error).__name__
            raise StoreError(f"{self.store} could not migrate: {first}") from error


def _transactional(statement: str) -> bool:
    return "CONCURRENTLY" not in statement.upper()


def _run(conn: psycopg.Connection[Any], step: Step, ran: Callable[[Step, int], None] | None) -> None:
    """The step's statements: consecutive transactional ones in one transaction, the others alone."""
    index = 0
    while index < len(step.statements):
        if not _transactional(step.statements[index]):
            conn.execute(step.statements[index])
            if ran is not None:
                ran(step, index)
            index += 1
            continue
        with conn.transaction():
            while index < len(step.statements) and _transactional(step.statements[index]):
                conn.execute(step.statements[index])
                if ran is not None:
                    ran(step, index)
                index += 1


def migrator(pool: ConnectionPool[Any]) -> PostgresMigrator:
    """The :class:`~agentsessions.stores.kit.schema.Migrator` of the database ``pool`` connects to."""
    return PostgresMigrator(pool)
