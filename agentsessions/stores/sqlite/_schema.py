"""The SQLite store's schema, its versions, and the migration a store runs on open.

A SQLite file has no server to coordinate a migration with, and needs none: opening the
store reads the version (one query), and when the file is older it migrates it in one
``BEGIN IMMEDIATE`` transaction, which takes the file's write lock before it reads the
version again. Processes that open a file at once queue on that lock, and the second finds
the work done; a process holding a read transaction keeps reading its snapshot (WAL), and
its statements see the new tables after it. Every step only adds, so a process still
running the previous release keeps working on the migrated file.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager

from agentsessions.errors import StoreError
from agentsessions.stores.kit.schema import VERSION_TABLE, Applied, Step, check_version, plan, sql_statements

__all__ = ["MIGRATIONS", "SCHEMA", "SCHEMA_VERSION", "SQLiteMigrator", "migrator", "prepare"]

SCHEMA_VERSION = 6
"""The version of the schema this release creates and needs (2: steer keys; 3: approvals; 4: session metadata;
5: steers queued for the next run; 6: each session's preview and usage)."""

# One row per version applied. A file that has the session table and no row is version 1.
_VERSIONS = f"""
CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
    version     INTEGER NOT NULL,
    applied_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    applied_by  TEXT    NOT NULL
);
"""


def _record(version: int) -> str:
    """The statement recording ``version``, once however often it runs."""
    return f"""
INSERT INTO {VERSION_TABLE} (version, applied_by)
SELECT {version}, 'agentsessions' WHERE NOT EXISTS (SELECT 1 FROM {VERSION_TABLE} WHERE version >= {version});
"""


# Version 2: a steer's key and the digest of its text, kept while the session lives (taking
# the steer leaves it; delete removes it), so a retried steer is stored once.
_STEER_KEYS = """
CREATE TABLE IF NOT EXISTS agentsessions_steer_keys (
    session_id  BLOB    NOT NULL,
    steer_key   BLOB    NOT NULL,
    digest      BLOB    NOT NULL,
    PRIMARY KEY (session_id, steer_key)
) WITHOUT ROWID;
"""

# Version 3: the calls of a session's latest wait for approval (agentsessions.approvals), as
# one JSON text, and how many are undecided; run_state 'waiting' while the session waits.
_APPROVALS = """
CREATE TABLE IF NOT EXISTS agentsessions_approvals (
    session_id  BLOB    PRIMARY KEY,
    body        TEXT    NOT NULL,
    pending     INTEGER NOT NULL
) WITHOUT ROWID;
"""

# Version 4: each session's metadata, a row per pair, and an index from a pair to its
# sessions, so listing one user's sessions reads that user's rows, not every session.
# Keys and values are TEXT (the library refuses NUL and lone surrogates in them), compared
# with the BINARY collation: exact, as ids are.
_METADATA = """
CREATE TABLE IF NOT EXISTS agentsessions_metadata (
    session_id  BLOB    NOT NULL,
    mkey        TEXT    NOT NULL,
    mvalue      TEXT    NOT NULL,
    PRIMARY KEY (session_id, mkey)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS agentsessions_metadata_by_pair ON agentsessions_metadata (mkey, mvalue, session_id);
"""

# Version 5: a steer sent with if_busy="queue" or "interrupt" while a run held the session
# carries that run's token: only a claim with a greater one takes it (0: any run). SQLite's
# ADD COLUMN has no IF NOT EXISTS: prepare() takes a "duplicate column name" from it as the
# step already done, so running it again (a file whose version rows were lost) is harmless.
_QUEUED = """
ALTER TABLE agentsessions_steers ADD COLUMN after_token INTEGER NOT NULL DEFAULT 0;
"""

# Version 6: what a listing shows of a session's transcript, written by each save: the preview
# of its last text (a BLOB like every text that may hold a lone surrogate) and the runs' usage
# (kit.summary's JSON). NULL in a session saved before: an empty preview and no usage until
# its next save. Each statement is harmless run again, as version 5's.
_SUMMARY = """
ALTER TABLE agentsessions_sessions ADD COLUMN preview BLOB;
ALTER TABLE agentsessions_sessions ADD COLUMN usage TEXT;
"""

# Ids, holders and steers are BLOBs of their UTF-8 with surrogates passed through, so any
# str round-trips and ids compare byte for byte. Message bodies are codec JSON text, in a
# rowid table with a separate key: WITHOUT ROWID would store kilobyte rows in half-empty
# pages, doubling the file. Steers are small, so they sit in their key's own B-tree.
# Times are INTEGER microseconds since the epoch: REAL seconds lose the microsecond.
# updated_at is NULL until the first save (a steer or a claim can make the record first);
# run_state is NULL until the first claim, and 'running' while held (STALLED is derived).
# Tokens and steer numbers come from one counter row, which delete never resets. The
# version row goes in first, and only into a file that has no session table yet: a file
# made by an older release keeps its version until it is migrated.
SCHEMA = (
    _VERSIONS
    + f"""
INSERT INTO {VERSION_TABLE} (version, applied_by)
SELECT {SCHEMA_VERSION}, 'agentsessions'
WHERE NOT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agentsessions_sessions')
  AND NOT EXISTS (SELECT 1 FROM {VERSION_TABLE});
CREATE TABLE IF NOT EXISTS agentsessions_sessions (
    id                BLOB    PRIMARY KEY,
    revision          INTEGER NOT NULL,
    length            INTEGER NOT NULL,
    updated_at        INTEGER,
    run_state         TEXT,
    token             INTEGER NOT NULL DEFAULT 0,
    holder            BLOB,
    lease             REAL    NOT NULL DEFAULT 0,
    lease_expires_at  INTEGER,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    preview           BLOB,
    usage             TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS agentsessions_sessions_by_update ON agentsessions_sessions (updated_at, id);
CREATE TABLE IF NOT EXISTS agentsessions_messages (
    session_id  BLOB    NOT NULL,
    position    INTEGER NOT NULL,
    body        TEXT    NOT NULL,
    UNIQUE (session_id, position)
);
CREATE TABLE IF NOT EXISTS agentsessions_steers (
    session_id  BLOB    NOT NULL,
    seq         INTEGER NOT NULL,
    text        BLOB    NOT NULL,
    after_token INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS agentsessions_counters (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    tokens  INTEGER NOT NULL,
    steers  INTEGER NOT NULL
);
INSERT OR IGNORE INTO agentsessions_counters (one, tokens, steers) VALUES (1, 0, 0);
"""
    + _STEER_KEYS
    + _APPROVALS
    + _METADATA
)
"""The whole schema of this version, from nothing; the store runs it on a new file."""

MIGRATIONS: dict[int, list[str]] = {
    1: sql_statements(_VERSIONS + _STEER_KEYS + _record(2), sqlite3.complete_statement),
    2: sql_statements(_APPROVALS + _record(3), sqlite3.complete_statement),
    3: sql_statements(_METADATA + _record(4), sqlite3.complete_statement),
    4: sql_statements(_QUEUED + _record(5), sqlite3.complete_statement),
    5: sql_statements(_SUMMARY + _record(6), sqlite3.complete_statement),
}
"""From a version to the statements that bring it to the next; the store runs them on open."""

_SUMMARIES = {
    1: "steer keys (table agentsessions_steer_keys) and the schema version table",
    2: "approvals (table agentsessions_approvals)",
    3: "session metadata (table agentsessions_metadata, indexed by pair)",
    4: "steers queued for the next run (column agentsessions_steers.after_token)",
    5: "each session's preview and usage (columns agentsessions_sessions.preview and usage)",
}

_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('agentsessions_sessions', ?)"
_VERSION = f"SELECT max(version) FROM {VERSION_TABLE}"
_COLUMNS = "SELECT name FROM pragma_table_info('agentsessions_sessions')"


def found(db: sqlite3.Connection, path: str) -> int | None:
    """The version the file records: ``None`` for a file with none of the tables, 1 for one with no version row."""
    tables = {name for (name,) in db.execute(_TABLES, (VERSION_TABLE,))}
    if "agentsessions_sessions" in tables and "run_state" not in {name for (name,) in db.execute(_COLUMNS)}:
        raise StoreError(
            f"SQLite store {path!r} was made by an older version of agentsessions (its session table has no "
            "run columns); open it with that version, or start a new file"
        )
    version = db.execute(_VERSION).fetchone()[0] if VERSION_TABLE in tables else None
    if version is not None:
        return int(version)
    return 1 if "agentsessions_sessions" in tables else None


def _steps(version: int | None) -> list[Step]:
    create = Step(SCHEMA_VERSION, "create every table", tuple(sql_statements(SCHEMA, sqlite3.complete_statement)))
    return plan(version, SCHEMA_VERSION, create=create, migrations=MIGRATIONS, summaries=_SUMMARIES)


def _where(path: str) -> str:
    return f"SQLite store {path!r}"


def _check(version: int | None, path: str) -> int:
    return check_version(
        version, SCHEMA_VERSION, store=_where(path), create="open it with agentsessions.stores.sqlite.open"
    )


def prepare(db: sqlite3.Connection, path: str, ran: Callable[[Step, int], None] | None = None) -> Applied:
    """Bring the file to this version if it is older: what opening a store does. One read when it is not.

    ``db`` is in autocommit (``isolation_level=None``). Raises
    :class:`~agentsessions.errors.SchemaTooNewError` for a file two or more versions newer.
    """
    version = found(db, path)
    if version is not None and version >= SCHEMA_VERSION:
        _check(version, path)
        return Applied(version, ())
    db.execute("BEGIN IMMEDIATE")  # the write lock first, then the version again: one process migrates
    try:
        version = found(db, path)
        steps = _steps(version)
        for step in steps:
            for index, statement in enumerate(step.statements):
                _execute(db, statement)
                if ran is not None:
                    ran(step, index)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    applied = Applied(version, tuple(steps))
    _check(applied.version, path)
    return applied


def _execute(db: sqlite3.Connection, statement: str) -> None:
    """Run one statement of a step; an ``ADD COLUMN`` whose column exists is that statement already done."""
    try:
        db.execute(statement)
    except sqlite3.OperationalError as error:
        # A failed statement rolls back only itself: the migration's transaction goes on.
        if not ("ADD COLUMN" in statement.upper() and "duplicate column name" in str(error)):
            raise


class SQLiteMigrator:
    """What ``agentsessions migrate`` drives for a SQLite file (opening a store does the same on its own).

    Its lock is the file's write lock (``BEGIN IMMEDIATE``), which waits up to ``wait`` seconds.
    """

    store = "SQLite store"
    version = SCHEMA_VERSION
    language = "SQL"
    comment = "--"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def found(self) -> int | None:
        """The version the file records; ``None`` when it has none of the tables."""
        with _errors(_where(self.path)), closing(self._connect(5.0)) as db:
            return found(db, self.path)

    def plan(self, found: int | None) -> list[Step]:
        """The steps from ``found`` to this release's version."""
        return _steps(found)

    def apply(self, *, wait: float, ran: Callable[[Step, int], None] | None = None) -> Applied:
        """Migrate in one write transaction, as opening the store would."""
        with _errors(_where(self.path)), closing(self._connect(wait)) as db:
            db.execute("PRAGMA journal_mode = WAL")
            return prepare(db, self.path, ran)

    def _connect(self, wait: float) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=wait, isolation_level=None)


@contextmanager
def _errors(store: str) -> Iterator[None]:
    """sqlite3's errors as StoreErrors naming the file."""
    try:
        yield
    except sqlite3.Error as error:
        raise StoreError(f"{store} could not migrate: {error}") from error


def migrator(path: str | os.PathLike[str]) -> SQLiteMigrator:
    """The :class:`~agentsessions.stores.kit.schema.Migrator` of the SQLite file at ``path``."""
    return SQLiteMigrator(path)
