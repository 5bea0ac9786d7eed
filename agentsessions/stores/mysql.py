"""A store in MySQL or MariaDB (InnoDB) through PyMySQL connections that the caller provides.

The library never runs :data:`SCHEMA`: run each statement once per database, as part of
your own migrations (``for stmt in mysql.SCHEMA: cur.execute(stmt)``). Until then every
call raises :class:`~agentsessions.errors.SchemaMissingError`.

Each call asks ``connect()`` for a connection, uses it for one transaction and closes it,
also on errors: with a pool's ``connection`` method, closing returns it to the pool. No
connection is shared between calls, so one store object serves any number of threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

try:
    import pymysql
    import pymysql.cursors
except ImportError as error:  # pragma: no cover - depends on what is installed
    raise ImportError("agentsessions.stores.mysql needs PyMySQL: pip install agentsessions[mysql]") from error

from agentsessions.codec import decode_text, encode_text, load_message
from agentsessions.errors import SchemaMissingError, StoreError
from agentsessions.messages import Message
from agentsessions.session import check_session_id, check_steer
from agentsessions.stores._incremental import KnownSessions, new_revision, plan_save

# Every stored value is binary, so nothing depends on the connection's character set or
# on a collation. Ids are the id's UTF-8 (surrogates passed through, 4 bytes a character
# at most): binary strings compare every byte, where a PAD SPACE collation (MariaDB's
# utf8mb4_bin) makes `a` equal `a `, and a case-insensitive one `a` equal `A`. Message
# bodies are codec JSON as LONGBLOB, never JSON, which would reorder and drop duplicate
# keys of a tool call's raw arguments. updated_at (UTC) is there for listing sessions.
# Steers are clustered by session: a locking read that scanned other sessions' rows would
# wait for, and deadlock with, takers of those sessions.
SCHEMA = [
    """CREATE TABLE IF NOT EXISTS agentsessions_sessions (
    id          VARBINARY(1020) NOT NULL PRIMARY KEY,
    revision    BIGINT          NOT NULL,
    length      INT             NOT NULL,
    updated_at  DATETIME(6)     NOT NULL
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
    PRIMARY KEY (session_id, seq),
    KEY agentsessions_steers_by_seq (seq)
) ENGINE = InnoDB""",
]

_ER_NO_SUCH_TABLE = 1146
# For the next transaction only. InnoDB's default REPEATABLE READ also locks the gaps
# between rows, so saves of neighbouring sessions would wait for, even deadlock, each other.
_READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
# Creates the record or locks the existing one, so two first saves of a session queue up
# too. A fresh record carries this save's own revision, which no store object knows, and
# length 0, so the save replaces everything and deletes nothing.
_CREATE_SESSION = """
INSERT INTO agentsessions_sessions (id, revision, length, updated_at) VALUES (%s, %s, 0, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE id = id
"""
_LOCK_SESSION = "SELECT revision, length FROM agentsessions_sessions WHERE id = %s FOR UPDATE"
# Locking statements name the primary key: on a small table the optimizer may pick a scan,
# which would lock, and wait for, other sessions' rows. A single-table DELETE takes no
# index hint; this form of DELETE does.
_DELETE_MESSAGES_FROM = """
DELETE m FROM agentsessions_messages AS m FORCE INDEX (PRIMARY) WHERE m.session_id = %s AND m.position >= %s
"""
# PyMySQL's executemany turns this into multi-row INSERTs of about 1 MB each.
_INSERT_MESSAGE = "INSERT INTO agentsessions_messages (session_id, position, body) VALUES (%s, %s, %s)"
_UPDATE_SESSION = """
UPDATE agentsessions_sessions SET revision = %s, length = %s, updated_at = UTC_TIMESTAMP(6) WHERE id = %s
"""
# One statement reads record and rows from one snapshot. A record with no messages gives
# one row whose body is NULL; no record gives no rows.
_SELECT_TRANSCRIPT = """
SELECT s.revision, m.body FROM agentsessions_sessions AS s
LEFT JOIN agentsessions_messages AS m ON m.session_id = s.id
WHERE s.id = %s ORDER BY m.position
"""
_INSERT_STEER = "INSERT INTO agentsessions_steers (session_id, text) VALUES (%s, %s)"
# A taker waits for another's locked rows and then finds them deleted, so each steer has
# one taker. The delete names the rows it read: a range could catch a steer added since.
_LOCK_STEERS = """
SELECT seq, text FROM agentsessions_steers FORCE INDEX (PRIMARY) WHERE session_id = %s ORDER BY seq FOR UPDATE
"""
_DELETE_STEERS = """
DELETE s FROM agentsessions_steers AS s FORCE INDEX (PRIMARY) WHERE s.session_id = %s AND s.seq IN ({placeholders})
"""

_Connect = Callable[[], Any]


class MySQLStore:
    """Sessions in MariaDB or MySQL (InnoDB), over connections from ``connect()``.

    ``connect`` takes no argument and returns a PyMySQL connection: a pool's
    ``connection`` method, or ``functools.partial(pymysql.connect, host=..., ...)``
    (which pays for a new connection on every call). The store closes each connection
    when its call is done. A single connection object is refused: threads cannot share
    one, and PyMySQL cannot bring one back once the server has dropped it. Lock waits end
    after the server's ``innodb_lock_wait_timeout`` (50 s by default).
    """

    def __init__(self, connect: _Connect) -> None:
        if not callable(connect):
            raise TypeError(
                "MySQLStore takes a zero-argument callable returning a PyMySQL connection, such as "
                f"functools.partial(pymysql.connect, ...) or a pool's connection method; got {connect!r:.80}"
            )
        self.connect = connect
        self._known = KnownSessions()

    def __repr__(self) -> str:
        return f"MySQLStore({self.connect!r:.120})"

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Make ``messages`` the transcript; writes only what is new since this store last saw it."""
        plan = plan_save(self._known, session_id, messages)
        revision = new_revision()
        key = encode_text(session_id)
        with self._transaction("save the transcript", session_id) as cur:
            cur.execute(_CREATE_SESSION, (key, revision))
            cur.execute(_LOCK_SESSION, (key,))
            stored_revision, stored_length = cur.fetchone()
            keep = plan.rows_to_keep(stored_revision)
            if stored_length > keep:
                cur.execute(_DELETE_MESSAGES_FROM, (key, keep))
            if len(plan.messages) > keep:
                cur.executemany(_INSERT_MESSAGE, [(k, p, body.encode()) for k, p, body in plan.rows(key, keep)])
            cur.execute(_UPDATE_SESSION, (revision, len(plan.messages), key))
        self._known.remember(session_id, revision, plan.messages)

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none."""
        check_session_id(session_id)
        with self._transaction("read the transcript", session_id, locking=False) as cur:
            cur.execute(_SELECT_TRANSCRIPT, (encode_text(session_id),))
            rows = cur.fetchall()
        loaded = [load_message(body) for _, body in rows if body is not None]
        if rows:
            self._known.remember(session_id, rows[0][0], loaded)
        return loaded

    def add_steer(self, session_id: str, text: str) -> None:
        """Leave a steer for the session's next run."""
        check_session_id(session_id)
        check_steer(text)
        with self._transaction("add a steer", session_id, locking=False) as cur:
            cur.execute(_INSERT_STEER, (encode_text(session_id), encode_text(text)))

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first; each goes to exactly one caller."""
        key = encode_text(check_session_id(session_id))
        with self._transaction("take steers", session_id) as cur:
            cur.execute(_LOCK_STEERS, (key,))
            rows = cur.fetchall()
            if rows:
                placeholders = ", ".join(["%s"] * len(rows))
                cur.execute(_DELETE_STEERS.format(placeholders=placeholders), [key, *(seq for seq, _ in rows)])
        return [decode_text(text) for _, text in rows]

    @contextmanager
    def _transaction(self, action: str, session_id: str, *, locking: bool = True) -> Iterator[Any]:
        # Without locking, one statement is atomic on its own; the commit still ends the
        # transaction a connection without autocommit opened, so no snapshot outlives the call.
        with self._errors(action, session_id), self._connection() as conn, conn.cursor(pymysql.cursors.Cursor) as cur:
            if locking:
                cur.execute(_READ_COMMITTED)
                conn.begin()
            try:
                yield cur
            except BaseException:
                with suppress(pymysql.err.Error):  # a dropped connection was rolled back by the server
                    conn.rollback()
                raise
            conn.commit()

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        conn = self.connect()
        try:
            yield conn
        finally:
            with suppress(pymysql.err.Error):  # already closed, or dropped by the server
                conn.close()

    @contextmanager
    def _errors(self, action: str, session_id: str) -> Iterator[None]:
        try:
            yield
        except pymysql.err.Error as error:
            self._known.forget(session_id)
            what = f"MySQL store could not {action} for session {session_id!r:.80}"
            if error.args and error.args[0] == _ER_NO_SUCH_TABLE:
                raise SchemaMissingError(
                    f"{what}: its tables are missing ({_describe(error)}); "
                    "run each statement of agentsessions.stores.mysql.SCHEMA once in this database"
                ) from error
            raise StoreError(f"{what}: {_describe(error)}") from error


def _describe(error: BaseException) -> str:
    if len(error.args) == 2:  # PyMySQL's (code, message)
        return f"({error.args[0]}) {error.args[1]}"
    return str(error) or type(error).__name__
