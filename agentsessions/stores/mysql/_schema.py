"""The MySQL/MariaDB store's schema version, its migrations, and the migrator ``agentsessions migrate`` drives.

The library runs none of this on its own: the store's ``SCHEMA`` creates this version from
nothing, its version row included, and :data:`MIGRATIONS` bring an older database forward,
through ``agentsessions migrate`` or your own migration tool. The store reads the version
once, at its first call (:func:`checked_version`), and refuses an older schema by name.

A migration runs under ``GET_LOCK`` (:func:`lock`, one name per database), so replicas that
start ``agentsessions migrate`` at once apply each step once. MySQL commits DDL implicitly,
so a step cannot be one transaction: each statement is idempotent on its own (``CREATE TABLE
IF NOT EXISTS``, a version row inserted only when no row at that version or above exists),
and the version row comes last. A migration killed half-way is simply run again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pymysql

from agentsessions.errors import StoreError
from agentsessions.stores.kit.schema import VERSION_TABLE, Applied, Step, check_version, plan
from agentsessions.stores.mysql._errors import describe, explain

__all__ = [
    "LOCK",
    "METADATA",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "MySQLMigrator",
    "checked_version",
    "lock",
    "read_version",
    "unlock",
]

SCHEMA_VERSION = 6
"""The version of the schema this release creates and needs (2: steer keys; 3: approvals; 4: session metadata;
5: steers queued for the next run; 6: each session's preview and usage)."""

LOCK = "agentsessions migrate "
"""The start of the ``GET_LOCK`` name every migration takes; the rest is the SHA-1 of the database's name
(``GET_LOCK`` names are the server's, not a database's, and at most 64 characters)."""

# One row per version applied. A database that has the session table and no row is version 1.
VERSIONS = f"""CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
    version     INT             NOT NULL PRIMARY KEY,
    applied_at  DATETIME(6)     NOT NULL,
    applied_by  VARCHAR(288)    NOT NULL
) ENGINE = InnoDB"""

# Version 2: a steer's key and the digest of its text, kept while the session lives (taking
# the steer leaves it; delete removes it), so a retried steer is stored once.
STEER_KEYS = """CREATE TABLE IF NOT EXISTS agentsessions_steer_keys (
    session_id  VARBINARY(1020) NOT NULL,
    steer_key   VARBINARY(1020) NOT NULL,
    digest      BINARY(32)      NOT NULL,
    PRIMARY KEY (session_id, steer_key)
) ENGINE = InnoDB"""

# Version 3: the calls of a session's latest wait for approval (agentsessions.approvals), as one
# JSON text, and how many are undecided; run_state 'waiting' while the session waits.
APPROVALS = """CREATE TABLE IF NOT EXISTS agentsessions_approvals (
    session_id  VARBINARY(1020) NOT NULL PRIMARY KEY,
    body        LONGBLOB        NOT NULL,
    pending     INT             NOT NULL
) ENGINE = InnoDB"""

# Version 4: each session's metadata, a row per pair (UTF-8, binary), and an index from a
# pair to its sessions, so listing one user's sessions reads that user's rows, not every
# session. The index's key (256 + 1024 + 1020 bytes) fits InnoDB's 3072.
METADATA = """CREATE TABLE IF NOT EXISTS agentsessions_metadata (
    session_id  VARBINARY(1020) NOT NULL,
    mkey        VARBINARY(256)  NOT NULL,
    mvalue      VARBINARY(1024) NOT NULL,
    PRIMARY KEY (session_id, mkey),
    KEY agentsessions_metadata_by_pair (mkey, mvalue, session_id)
) ENGINE = InnoDB"""

_SESSIONS_EXIST = (
    "SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'agentsessions_sessions'"
)

# SCHEMA's version row: first, and only into a database with no session table yet, so one
# made by an older release keeps its version until it is migrated.
FIRST_VERSION = f"""INSERT INTO {VERSION_TABLE} (version, applied_at, applied_by)
SELECT {SCHEMA_VERSION}, UTC_TIMESTAMP(6), CURRENT_USER() FROM DUAL
WHERE NOT EXISTS ({_SESSIONS_EXIST}) AND NOT EXISTS (SELECT 1 FROM {VERSION_TABLE})"""


def _record(version: int) -> str:
    """The statement recording ``version``, once however often it runs."""
    return (
        f"INSERT INTO {VERSION_TABLE} (version, applied_at, applied_by)\n"
        f"SELECT {version}, UTC_TIMESTAMP(6), CURRENT_USER() FROM DUAL\n"
        f"WHERE NOT EXISTS (SELECT 1 FROM {VERSION_TABLE} WHERE version >= {version})"
    )


def _add_column(table: str, column: str, definition: str) -> list[str]:
    """The statements adding ``column`` to ``table`` unless it is there: four, idempotent together.

    MySQL has no ADD COLUMN IF NOT EXISTS (MariaDB has), so the statement is chosen by whether
    the column is there, and run as a prepared statement.
    """
    return [
        "SET @agentsessions_step = IF((SELECT COUNT(*) FROM information_schema.columns "
        f"WHERE table_schema = DATABASE() AND table_name = '{table}' AND column_name = '{column}') = 0, "
        f"'ALTER TABLE {table} ADD COLUMN `{column}` {definition}', 'DO 0')",
        "PREPARE agentsessions_step FROM @agentsessions_step",
        "EXECUTE agentsessions_step",
        "DEALLOCATE PREPARE agentsessions_step",
    ]


# Version 5: a steer sent with if_busy="queue" or "interrupt" while a run held the session
# carries that run's token: only a claim with a greater one takes it (0: any run).
_QUEUED = _add_column("agentsessions_steers", "after_token", "BIGINT UNSIGNED NOT NULL DEFAULT 0")

# Version 6: what a listing shows of a session's transcript, written by each save: the preview
# of its last text (binary, as every text that may hold a lone surrogate) and the runs' usage
# (kit.summary's ASCII JSON; `usage` is a reserved word, hence the quotes). NULL in a session
# saved before: an empty preview and no usage until its next save. A nullable column added
# last is an instant ALTER on MySQL 8.0 and MariaDB 10.3 and later: no table copy.
_SUMMARY = [
    *_add_column("agentsessions_sessions", "preview", "BLOB NULL"),
    *_add_column("agentsessions_sessions", "usage", "BLOB NULL"),
]

MIGRATIONS: dict[int, list[str]] = {
    1: [VERSIONS, STEER_KEYS, _record(2)],
    2: [APPROVALS, _record(3)],
    3: [METADATA, _record(4)],
    4: [*_QUEUED, _record(5)],
    5: [*_SUMMARY, _record(6)],
}
"""From a version to the statements that bring it to the next, each idempotent on its own (MySQL commits
DDL implicitly); never run by the library on its own."""

_SUMMARIES = {
    1: "steer keys (table agentsessions_steer_keys) and the schema version table",
    2: "approvals (table agentsessions_approvals)",
    3: "session metadata (table agentsessions_metadata, indexed by pair)",
    4: "steers queued for the next run (column agentsessions_steers.after_token)",
    5: "each session's preview and usage (columns agentsessions_sessions.preview and usage)",
}
_CREATE = "create every table (agentsessions.stores.mysql.SCHEMA)"
_NO_TABLE = 1146  # ER_NO_SUCH_TABLE
_LOCK_SLICE = 5.0  # GET_LOCK waits in slices, each well inside the connection's read_timeout


def read_version(cur: Any) -> int | None:
    """The version the database records: ``None`` with none of the tables, 1 with no version row.

    One query when the version table has a row, two otherwise.
    """
    return _read(cur)[0]


def checked_version(cur: Any, what: str = "MySQL store") -> int:
    """:func:`read_version`, if this release works with it; else the error saying what to run, after ``what``.

    With none of the tables, the :class:`~agentsessions.errors.SchemaMissingError` is chained
    from the driver's error that said so.
    """
    version, missing = _read(cur)
    create = "run each statement of agentsessions.stores.mysql.SCHEMA once in this database"
    return check_version(version, SCHEMA_VERSION, store=what, create=create, url="mysql://...", missing=missing)


def _read(cur: Any) -> tuple[int | None, pymysql.err.Error | None]:
    missing: pymysql.err.Error | None = None
    try:
        cur.execute(f"SELECT MAX(version) FROM {VERSION_TABLE}")
        row = cur.fetchone()
    except pymysql.err.ProgrammingError as error:
        if not error.args or error.args[0] != _NO_TABLE:
            raise
        row, missing = None, error
    if row is not None and row[0] is not None:
        return int(row[0]), None
    cur.execute(_SESSIONS_EXIST)
    return (1 if cur.fetchone() is not None else None), missing


def lock(cur: Any, wait: float) -> bool:
    """Take the migration lock of the connection's database within ``wait`` seconds; ``False`` if another held it.

    Waits in slices, so no single statement outlasts the connection's ``read_timeout``.
    """
    deadline = time.monotonic() + wait
    while True:
        left = max(0.0, deadline - time.monotonic())
        cur.execute("SELECT GET_LOCK(CONCAT(%s, SHA1(DATABASE())), %s)", (LOCK, min(left, _LOCK_SLICE)))
        row = cur.fetchone()
        if row is not None and row[0] == 1:
            return True
        if left <= _LOCK_SLICE:
            return False


def unlock(cur: Any) -> None:
    """Release what :func:`lock` took (the server also releases it when the connection ends)."""
    cur.execute("SELECT RELEASE_LOCK(CONCAT(%s, SHA1(DATABASE())))", (LOCK,))


class MySQLMigrator:
    """What ``agentsessions migrate`` drives for a MySQL or MariaDB database, over connections from ``connect()``."""

    store = "MySQL store"
    version = SCHEMA_VERSION
    language = "SQL"
    comment = "--"

    def __init__(self, connect: Callable[[], Any], schema: list[str]) -> None:
        self.connect = connect
        self.schema = schema

    def found(self) -> int | None:
        """The version the database records; ``None`` when it has none of the tables."""
        with self._cursor() as cur:
            return read_version(cur)

    def plan(self, found: int | None) -> list[Step]:
        """The steps from ``found`` to this release's version."""
        create = Step(SCHEMA_VERSION, _CREATE, tuple(s if s.endswith(";") else s + ";" for s in self.schema))
        return plan(found, SCHEMA_VERSION, create=create, migrations=MIGRATIONS, summaries=_SUMMARIES)

    def apply(self, *, wait: float, ran: Callable[[Step, int], None] | None = None) -> Applied:
        """Under ``GET_LOCK``: read the version again, run each missing statement (each commits on its own)."""
        with self._cursor() as cur:
            if not lock(cur, wait):
                raise StoreError(f"{self.store}: another migration held the lock for {wait:g} s")
            try:
                found = read_version(cur)
                steps = self.plan(found)
                for step in steps:
                    for index, statement in enumerate(step.statements):
                        cur.execute(statement.rstrip(";"))
                        if ran is not None:
                            ran(step, index)
                return Applied(found, tuple(steps))
            finally:
                unlock(cur)

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        """A cursor in autocommit: every statement (DDL commits anyway) stands on its own."""
        try:
            conn = self.connect()
        except pymysql.err.Error as error:
            raise StoreError(f"{self.store} could not migrate: {explain(error, connecting=True)}") from error
        try:
            # The session variable, not conn.autocommit(): a pool's connection (DBUtils) has no
            # such method. Set back before the connection returns to its pool.
            with conn.cursor(pymysql.cursors.Cursor) as cur:
                cur.execute("SELECT @@autocommit")
                (was,) = cur.fetchone()
                cur.execute("SET autocommit = 1")
                try:
                    yield cur
                finally:
                    cur.execute(f"SET autocommit = {int(was)}")
        except pymysql.err.Error as error:
            raise StoreError(f"{self.store} could not migrate: {describe(error)}") from error
        finally:
            with suppress(pymysql.err.Error):
                conn.close()
