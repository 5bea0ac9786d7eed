"""A store in one SQLite file (stdlib ``sqlite3``), shared by threads and by processes.

It creates its tables on open: one file has nothing to coordinate a migration with.
WAL lets readers run beside the one writer; the busy timeout makes writers from other
threads and processes wait their turn instead of failing.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from agentsessions.codec import decode_text, encode_text, load_message
from agentsessions.errors import StoreError
from agentsessions.messages import Message
from agentsessions.session import check_session_id, check_steer
from agentsessions.stores._incremental import KnownSessions, new_revision, plan_save

# Ids and steers are BLOBs of their UTF-8 with surrogates passed through, so any str
# round-trips and ids compare byte for byte. Message bodies are codec JSON text, in a
# rowid table with a separate key: WITHOUT ROWID would store kilobyte rows in half-empty
# pages, doubling the file. Steers are small, so they sit in their key's own B-tree.
SCHEMA = """
CREATE TABLE IF NOT EXISTS agentsessions_sessions (
    id          BLOB    PRIMARY KEY,
    revision    INTEGER NOT NULL,
    length      INTEGER NOT NULL,
    updated_at  REAL    NOT NULL
) WITHOUT ROWID;
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
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"""

_SELECT_SESSION = "SELECT revision, length FROM agentsessions_sessions WHERE id = ?"
_SELECT_MESSAGES = "SELECT body FROM agentsessions_messages WHERE session_id = ? ORDER BY position"
_DELETE_MESSAGES_FROM = "DELETE FROM agentsessions_messages WHERE session_id = ? AND position >= ?"
_INSERT_MESSAGE = "INSERT INTO agentsessions_messages (session_id, position, body) VALUES (?, ?, ?)"
_UPSERT_SESSION = """
INSERT INTO agentsessions_sessions (id, revision, length, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET revision = excluded.revision, length = excluded.length,
                               updated_at = excluded.updated_at
"""
# SQLite runs one write at a time, so the next number in the session cannot be taken twice.
_INSERT_STEER = """
INSERT INTO agentsessions_steers (session_id, seq, text)
SELECT ?1, coalesce(max(seq), 0) + 1, ?2 FROM agentsessions_steers WHERE session_id = ?1
"""
# RETURNING gives rows in no promised order, so each carries its seq to sort by.
_TAKE_STEERS = "DELETE FROM agentsessions_steers WHERE session_id = ? RETURNING seq, text"


class SQLiteStore:
    """Sessions in one SQLite file.

    Each thread gets its own connection (sqlite3 connections belong to one thread), so
    one store object is safe to share between threads; several processes may open the
    same file. ``timeout`` is how long a writer waits for another to finish, in seconds.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
        self.path = os.fspath(path)
        self._timeout = timeout
        self._local = threading.local()
        self._pid = os.getpid()
        self._known = KnownSessions()
        with self._errors("create the tables"):
            self._connection().executescript(SCHEMA)

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Make ``messages`` the transcript; writes only what is new since this store last saw it."""
        plan = plan_save(self._known, session_id, messages)
        revision, key = new_revision(), encode_text(session_id)
        with self._errors("save the transcript", session_id), self._transaction("BEGIN IMMEDIATE") as db:
            row = db.execute(_SELECT_SESSION, (key,)).fetchone()
            keep = plan.rows_to_keep(row[0] if row else None)
            if row and row[1] > keep:
                db.execute(_DELETE_MESSAGES_FROM, (key, keep))
            db.executemany(_INSERT_MESSAGE, plan.rows(key, keep))
            db.execute(_UPSERT_SESSION, (key, revision, len(plan.messages), time.time()))
        self._known.remember(session_id, revision, plan.messages)

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none."""
        key = encode_text(check_session_id(session_id))
        with self._errors("read the transcript", session_id), self._transaction("BEGIN") as db:
            row = db.execute(_SELECT_SESSION, (key,)).fetchone()
            bodies = db.execute(_SELECT_MESSAGES, (key,)).fetchall()
        loaded = [load_message(body) for (body,) in bodies]
        if row:
            self._known.remember(session_id, row[0], loaded)
        return loaded

    def add_steer(self, session_id: str, text: str) -> None:
        """Leave a steer for the session's next run."""
        key = encode_text(check_session_id(session_id))
        check_steer(text)
        with self._errors("add a steer", session_id):
            self._connection().execute(_INSERT_STEER, (key, encode_text(text)))

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first; each goes to exactly one caller."""
        key = encode_text(check_session_id(session_id))
        with self._errors("take steers", session_id):
            rows = self._connection().execute(_TAKE_STEERS, (key,)).fetchall()
        return [decode_text(text) for _, text in sorted(rows)]

    def close(self) -> None:
        """Close the calling thread's connection (others close when their threads end)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None or self._pid != os.getpid():
            # A connection must not cross a fork; the child opens its own.
            self._pid = os.getpid()
            connection = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
            # 16 KiB pages hold kilobyte messages with little left over; it only takes on a new file.
            connection.execute("PRAGMA page_size = 16384")
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = NORMAL")
            self._local.connection = connection
        return connection

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        db.execute(begin)
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @contextmanager
    def _errors(self, action: str, session_id: str = "") -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as error:
            if session_id:
                self._known.forget(session_id)
            where = f" of session {session_id!r:.80}" if session_id else ""
            raise StoreError(f"SQLite store {self.path!r} could not {action}{where}: {error}") from error


def open(path: str | os.PathLike[str] | Path, *, timeout: float = 10.0) -> SQLiteStore:
    """Open (creating if needed) the SQLite store at ``path``."""
    return SQLiteStore(path, timeout=timeout)
