"""A store in PostgreSQL through a psycopg 3 connection pool that the caller owns.

The library never runs :data:`SCHEMA`: run it once per database, as part of your own
migrations (``with pool.connection() as conn: conn.execute(postgres.SCHEMA)``). Until
then every call raises :class:`~agentsessions.errors.SchemaMissingError`.

Each call borrows one connection from the pool for one transaction and gives it back,
also on errors, so one store object serves any number of threads; each process makes its
own pool and its own store.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

try:
    import psycopg
    from psycopg.rows import tuple_row
    from psycopg_pool import ConnectionPool
except ImportError as error:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "agentsessions.stores.postgres needs psycopg 3 and psycopg_pool: pip install agentsessions[postgres]"
    ) from error

from agentsessions.codec import decode_text, encode_text, load_message
from agentsessions.errors import SchemaMissingError, StoreError
from agentsessions.messages import Message
from agentsessions.session import check_session_id, check_steer
from agentsessions.stores._incremental import KnownSessions, new_revision, plan_save

# Ids are bytea of the id's UTF-8 (surrogates passed through): text cannot hold NUL, and
# bytes compare exactly, so no collation can make `a` equal `A` or `a `. Message bodies
# are codec JSON in text, never jsonb, which would reorder keys, respace and drop
# duplicate keys of a tool call's raw arguments; JSON already writes NUL as \u0000.
# Steers are bytea for the same reason as ids. updated_at is there for listing sessions.
SCHEMA = """
CREATE TABLE IF NOT EXISTS agentsessions_sessions (
    id          bytea       PRIMARY KEY CHECK (octet_length(id) BETWEEN 1 AND 1020),
    revision    bigint      NOT NULL,
    length      integer     NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS agentsessions_messages (
    session_id  bytea       NOT NULL,
    position    integer     NOT NULL,
    body        text        NOT NULL,
    PRIMARY KEY (session_id, position)
);
CREATE TABLE IF NOT EXISTS agentsessions_steers (
    seq         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id  bytea       NOT NULL,
    text        bytea       NOT NULL
);
CREATE INDEX IF NOT EXISTS agentsessions_steers_by_session ON agentsessions_steers (session_id, seq);
"""

# The pool's connections may be set to another isolation level; these statements rely on
# READ COMMITTED re-reading a row once its lock is released.
_READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
_LOCK_TIMEOUT = "SET LOCAL lock_timeout = {milliseconds}"
# Creates the record or locks the existing one, so two first saves of a session queue up
# too. A fresh record carries this save's own revision, which no store object knows, and
# length 0, so the save replaces everything and deletes nothing.
_LOCK_SESSION = """
INSERT INTO agentsessions_sessions (id, revision, length, updated_at) VALUES (%s, %s, 0, now())
ON CONFLICT (id) DO UPDATE SET id = excluded.id
RETURNING revision, length
"""
_DELETE_MESSAGES_FROM = "DELETE FROM agentsessions_messages WHERE session_id = %s AND position >= %s"
_INSERT_MESSAGE = "INSERT INTO agentsessions_messages (session_id, position, body) VALUES (%s, %s, %s)"
_UPDATE_SESSION = "UPDATE agentsessions_sessions SET revision = %s, length = %s, updated_at = now() WHERE id = %s"
# One statement reads record and rows from one snapshot. A record with no messages gives
# one row whose body is NULL; no record gives no rows.
_SELECT_TRANSCRIPT = """
SELECT s.revision, m.body FROM agentsessions_sessions AS s
LEFT JOIN agentsessions_messages AS m ON m.session_id = s.id
WHERE s.id = %s ORDER BY m.position
"""
_INSERT_STEER = "INSERT INTO agentsessions_steers (session_id, text) VALUES (%s, %s)"
# A row deleted by one transaction is skipped by every other, so each steer has one taker.
# RETURNING gives rows in no promised order, so each carries its seq to sort by.
_TAKE_STEERS = "DELETE FROM agentsessions_steers WHERE session_id = %s RETURNING seq, text"

_Cursor = psycopg.Cursor[tuple[Any, ...]]


class PostgresStore:
    """Sessions in PostgreSQL, over a ``psycopg_pool.ConnectionPool`` the caller made.

    The store opens no connection of its own and never closes the pool. ``timeout`` is how
    long a save or a take waits for another writer's lock on the same session, in seconds.
    A save takes two round trips (lock the session record, then write what is new), the
    statements of each sent together in psycopg's pipeline mode.
    """

    def __init__(self, pool: ConnectionPool[Any], *, timeout: float = 10.0) -> None:
        if not isinstance(pool, ConnectionPool):
            raise TypeError(
                "PostgresStore takes a psycopg_pool.ConnectionPool (psycopg 3), "
                f"got {type(pool).__name__}: {pool!r:.80}"
            )
        self.pool = pool
        self._lock_timeout = _LOCK_TIMEOUT.format(milliseconds=max(1, round(timeout * 1000)))
        self._known = KnownSessions()

    def __repr__(self) -> str:
        return f"PostgresStore({self.pool.name!r})"

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Make ``messages`` the transcript; writes only what is new since this store last saw it."""
        plan = plan_save(self._known, session_id, messages)
        revision = new_revision()
        key = encode_text(session_id)
        with self._transaction("save the transcript", session_id) as cur:
            stored = cur.execute(_LOCK_SESSION, (key, revision)).fetchone()
            assert stored is not None  # RETURNING always gives the one record
            stored_revision, stored_length = stored
            keep = plan.rows_to_keep(stored_revision)
            if stored_length > keep:
                cur.execute(_DELETE_MESSAGES_FROM, (key, keep))
            if len(plan.messages) > keep:
                cur.executemany(_INSERT_MESSAGE, plan.rows(key, keep))
            cur.execute(_UPDATE_SESSION, (revision, len(plan.messages), key))
        self._known.remember(session_id, revision, plan.messages)

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none."""
        check_session_id(session_id)
        with self._errors("read the transcript", session_id), self.pool.connection() as conn:
            rows = conn.cursor(row_factory=tuple_row).execute(_SELECT_TRANSCRIPT, (encode_text(session_id),)).fetchall()
        loaded = [load_message(body) for _, body in rows if body is not None]
        if rows:
            self._known.remember(session_id, rows[0][0], loaded)
        return loaded

    def add_steer(self, session_id: str, text: str) -> None:
        """Leave a steer for the session's next run."""
        check_session_id(session_id)
        check_steer(text)
        with self._errors("add a steer", session_id), self.pool.connection() as conn:
            conn.execute(_INSERT_STEER, (encode_text(session_id), encode_text(text)))

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first; each goes to exactly one caller."""
        check_session_id(session_id)
        with self._transaction("take steers", session_id) as cur:
            rows = cur.execute(_TAKE_STEERS, (encode_text(session_id),)).fetchall()
        return [decode_text(text) for _, text in sorted(rows)]

    @contextmanager
    def _transaction(self, action: str, session_id: str) -> Iterator[_Cursor]:
        # conn.transaction() also works on autocommit connections; the pipeline sends the
        # settings with the first statement instead of a round trip each.
        with self._errors(action, session_id), self.pool.connection() as conn, _pipeline(conn), conn.transaction():
            conn.execute(_READ_COMMITTED)
            conn.execute(self._lock_timeout)
            yield conn.cursor(row_factory=tuple_row)

    @contextmanager
    def _errors(self, action: str, session_id: str) -> Iterator[None]:
        try:
            yield
        except psycopg.Error as error:
            self._known.forget(session_id)
            what = f"PostgreSQL store could not {action} for session {session_id!r:.80}"
            if isinstance(error, psycopg.errors.UndefinedTable):
                raise SchemaMissingError(
                    f"{what}: its tables are missing ({_first_line(error)}); "
                    "run agentsessions.stores.postgres.SCHEMA once in this database"
                ) from error
            raise StoreError(f"{what}: {_first_line(error)}") from error


def _pipeline(conn: psycopg.Connection[Any]) -> AbstractContextManager[object]:
    # Pipeline mode needs libpq 14 or newer; without it the same statements go one by one.
    return conn.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()


def _first_line(error: BaseException) -> str:
    return str(error).strip().split("\n", 1)[0] or type(error).__name__
