"""A save writes what is new whatever the number of sessions a store object served since (issue 33 build 1).

The rows a save writes and deletes are counted by the server itself: triggers on the
message table (SQLite, PostgreSQL, MariaDB), the message documents' ids before and after
(MongoDB), the commands MONITOR shows on the session's list (Redis). A session grows by
one message after the store object saved :data:`OTHERS` other sessions, more than it
remembers for plain saves: the save must insert one row and delete none, through a run's
claim, through a plain save (one extra read allowed), through a session handle the
application kept (no extra read: the handle carries what it saved), and through a store
object that never saw the session.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

import agentsessions as agent
from agentsessions.runs import Claim, RunState
from tests.support.backends import Opener, open_mongodb, open_mysql, open_postgres, open_redis, open_sqlite

OTHERS = 300
"""Sessions saved between two saves of the one measured: more than the 256 a store object remembers."""

SESSION = "grows-by-one"  # no space: MONITOR shows commands space-separated


@attrs.frozen
class Written:
    """What the server saw written to the measured session's messages."""

    inserted: int
    deleted: int
    updated: int = 0


Counter = Callable[[], contextlib.AbstractContextManager[list[Written]]]


# --- Counting on the server ------------------------------------------------------------

_SQLITE_LOG = (
    "CREATE TABLE IF NOT EXISTS row_log (op TEXT NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS log_insert AFTER INSERT ON agentsessions_messages BEGIN"
    " INSERT INTO row_log VALUES ('insert'); END",
    "CREATE TRIGGER IF NOT EXISTS log_delete AFTER DELETE ON agentsessions_messages BEGIN"
    " INSERT INTO row_log VALUES ('delete'); END",
    "CREATE TRIGGER IF NOT EXISTS log_update AFTER UPDATE ON agentsessions_messages BEGIN"
    " INSERT INTO row_log VALUES ('update'); END",
)
_POSTGRES_LOG = """
CREATE TABLE row_log (op text NOT NULL);
CREATE FUNCTION log_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO row_log VALUES (lower(TG_OP)); RETURN NULL; END $$;
CREATE TRIGGER log_rows AFTER INSERT OR DELETE OR UPDATE ON agentsessions_messages
FOR EACH ROW EXECUTE FUNCTION log_row();
"""
_MYSQL_LOG = (
    "CREATE TABLE row_log (op VARCHAR(10) NOT NULL) ENGINE = InnoDB",
    *(
        f"CREATE TRIGGER log_{op} AFTER {op.upper()} ON agentsessions_messages FOR EACH ROW"
        f" INSERT INTO row_log VALUES ('{op}')"
        for op in ("insert", "delete", "update")
    ),
)


def _logged(execute: Callable[[str], list[tuple[str]]]) -> Counter:
    """Counting by the triggers' log table, through ``execute`` (a statement's rows)."""

    @contextlib.contextmanager
    def counting() -> Iterator[list[Written]]:
        execute("DELETE FROM row_log")
        found: list[Written] = []
        yield found
        ops = [op for (op,) in execute("SELECT op FROM row_log")]
        found.append(Written(ops.count("insert"), ops.count("delete"), ops.count("update")))

    return counting


@contextlib.contextmanager
def _sqlite_counter(path: str) -> Iterator[Counter]:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        for statement in _SQLITE_LOG:
            db.execute(statement)
        yield _logged(lambda sql: db.execute(sql).fetchall())


@contextlib.contextmanager
def _postgres_counter(dsn: str, schema: str) -> Iterator[Counter]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as conn:
        conn.execute(_POSTGRES_LOG)

        def execute(sql: str) -> list[tuple[str]]:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []

        yield _logged(execute)


@contextlib.contextmanager
def _mysql_counter(host: str, port: int, user: str, password: str, database: str) -> Iterator[Counter]:
    import pymysql

    conn = pymysql.connect(host=host, port=port, user=user, password=password, database=database, autocommit=True)
    with contextlib.closing(conn), conn.cursor() as cur:
        for statement in _MYSQL_LOG:
            cur.execute(statement)

        def execute(sql: str) -> list[tuple[str]]:
            cur.execute(sql)
            return list(cur.fetchall())

        yield _logged(execute)


@contextlib.contextmanager
def _mongodb_counter(uri: str, database: str) -> Iterator[Counter]:
    import pymongo

    from agentsessions.stores import mongodb

    client: pymongo.MongoClient[dict[str, Any]]
    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000) as client:
        messages: pymongo.collection.Collection[dict[str, Any]] = client[database][mongodb.MESSAGES]

        def ids() -> set[Any]:
            return {doc["_id"] for doc in messages.find({"session_id": SESSION}, {"_id": 1})}

        @contextlib.contextmanager
        def counting() -> Iterator[list[Written]]:
            before: set[Any] = ids()
            found: list[Written] = []
            yield found
            after = ids()
            found.append(Written(len(after - before), len(before - after)))

        yield counting


@contextlib.contextmanager
def _redis_counter(url: str, prefix: str) -> Iterator[Counter]:
    import redis

    from agentsessions.codec import encode_text

    key = (prefix + "m:").encode() + encode_text(SESSION)
    shown = key.decode()  # MONITOR shows the ASCII key as it is
    with redis.Redis.from_url(url, socket_timeout=30) as client:

        @contextlib.contextmanager
        def counting() -> Iterator[list[Written]]:
            before = int(client.llen(key))
            found: list[Written] = []
            with client.monitor() as monitor:
                yield found
                sentinel = f"end of the save {secrets.token_hex(8)}"
                client.echo(sentinel)
                commands = []
                while (command := monitor.next_command()["command"]) != f"ECHO {sentinel}":
                    if command.split(" ", 2)[1:2] == [shown]:
                        commands.append(command)
            deleted = before if any(c.startswith("DEL ") for c in commands) else 0
            for command in commands:
                if command.startswith("LTRIM "):
                    deleted = before - (int(command.split(" ")[-1]) + 1)
            pushes = [c for c in commands if c.startswith("RPUSH ")]
            inserted = int(client.llen(key)) - before + deleted
            assert len(pushes) == (1 if inserted else 0), commands
            found.append(Written(inserted, deleted))

        yield counting


def _counter(opener: Opener) -> contextlib.AbstractContextManager[Counter]:
    assert isinstance(opener, functools.partial), opener
    counters: dict[Any, Callable[..., contextlib.AbstractContextManager[Counter]]] = {
        open_sqlite: _sqlite_counter,
        open_postgres: _postgres_counter,
        open_mysql: _mysql_counter,
        open_mongodb: _mongodb_counter,
        open_redis: _redis_counter,
    }
    return counters[opener.func](*opener.args)


# --- The saves ------------------------------------------------------------------------


def _transcript(n: int) -> list[agent.Message]:
    return [
        agent.Message.user(f"question {i}") if i % 2 == 0 else agent.Message.assistant(f"answer {i}") for i in range(n)
    ]


def _save_others(store: agent.RunStore) -> None:
    for i in range(OTHERS):
        store.save(f"other {i}", _transcript(3))


def _wrapped(store: agent.RunStore, wrap: str) -> agent.RunStore:
    """``store``, or it encrypted (with one key for every store object, so each reads what another wrote)."""
    if wrap == "plain":
        return store
    from agentsessions.crypto import encrypted

    return encrypted(store, _keyring())


@functools.cache
def _keyring() -> Any:
    from agentsessions.crypto import Keyring

    return Keyring({"k1": Keyring.new_key()}, "k1")


@pytest.mark.parametrize("wrap", ["plain", "encrypted"])
@pytest.mark.parametrize("via", ["run", "plain save", "kept handle", "another store object"])
def test_growing_by_one_message_inserts_one_row_and_deletes_none(opener: Opener, via: str, wrap: str) -> None:
    transcript = _transcript(20)
    with opener() as inner, _counter(opener) as counting:
        store = _wrapped(inner, wrap)
        claim: Claim | None = store.claim(SESSION, replica="counted", lease=60.0) if via == "run" else None
        handle = agent.open(SESSION, store)
        if via == "kept handle":
            handle.save(transcript)
        elif claim is None:
            store.save(SESSION, transcript)
        else:
            store.save_run(claim, transcript)
        _save_others(store)
        transcript = [*transcript, agent.Message.assistant("one message more")]
        with counting() as written, contextlib.ExitStack() as stack:
            if claim is not None:
                store.save_run(claim, transcript)
            elif via == "plain save":
                store.save(SESSION, transcript)
            elif via == "kept handle":
                handle.save(transcript)
            else:
                _wrapped(stack.enter_context(opener()), wrap).save(SESSION, transcript)
        assert written == [Written(1, 0)], f"{via}: {written}"
        if via == "kept handle":  # remembered beside the handle past the bound: the next save reads nothing
            assert store._known.get(SESSION, handle) is not None  # type: ignore[attr-defined]
        assert store.messages(SESSION) == transcript
        if claim is not None:
            store.save_run(claim, transcript, end=RunState.FINISHED)


def test_a_forgotten_session_saved_with_a_message_changed_rewrites_from_that_message_only(opener: Opener) -> None:
    transcript = _transcript(20)
    with opener() as store, _counter(opener) as counting:
        store.save(SESSION, transcript)
        _save_others(store)
        transcript = [*transcript[:15], agent.Message.user("changed"), *transcript[16:]]
        with counting() as written:
            store.save(SESSION, transcript)
        assert written[0].inserted == 5 and written[0].deleted in (0, 5), written  # MongoDB may collect later
        assert store.messages(SESSION) == transcript
