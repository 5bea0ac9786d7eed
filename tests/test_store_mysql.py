"""The MySQL/MariaDB store: the conformance suite, a missing schema, incremental saves,
parallel sessions, a connection killed mid-save, and steers taken from several processes.

Each run works in a database of its own (``agentsessions_test_<random>``), dropped at the end.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest
from conftest import (
    MYSQL_HOST,
    MYSQL_PASSWORD,
    MYSQL_PORT,
    MYSQL_USER,
    check_replicas_notice_each_other,
    numbered_transcript,
    require_server,
    wait_for,
)
from crossprocess import check_steers_across_processes
from dbutils.pooled_db import PooledDB

import agentsessions as agent
from agentsessions.codec import encode_text
from agentsessions.stores import mysql, storetest


def connect(database: str | None = None, **options: Any) -> Any:
    """A new PyMySQL connection to the test server."""
    return pymysql.connect(
        host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER, password=MYSQL_PASSWORD, database=database, **options
    )


# Polling information_schema more often than this slows the server's new connections down.
POLL = 0.1


def new_pool(database: str) -> PooledDB:
    """A DBUtils pool, as a service would have: ``connection()`` lends one, its ``close()`` gives it back."""
    return PooledDB(
        pymysql, host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER, password=MYSQL_PASSWORD, database=database
    )


@pytest.fixture(scope="module")
def admin() -> Iterator[Any]:
    """An autocommit connection outside the store, to create databases and watch and kill threads."""
    connection = require_server("MariaDB", lambda: connect(autocommit=True, connect_timeout=5))
    _query(connection, "SET SESSION lock_wait_timeout = 30")  # a DROP behind a stuck test fails, not hangs
    yield connection
    connection.close()


def _create(admin: Any, *, tables: bool) -> str:
    name = f"agentsessions_test_{secrets.token_hex(4)}"
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    if tables:
        conn = connect(name)
        with conn.cursor() as cur:
            for stmt in mysql.SCHEMA:  # what the user's migration does
                cur.execute(stmt)
        conn.close()
    return name


def _drop(admin: Any, name: str) -> None:
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE {name}")


@pytest.fixture(scope="module")
def database(admin: Any) -> Iterator[str]:
    """A fresh database with the store's tables, dropped when the module is done."""
    name = _create(admin, tables=True)
    yield name
    _drop(admin, name)


@pytest.fixture(scope="module")
def pool(database: str) -> Iterator[PooledDB]:
    """The pool the store borrows from."""
    shared = new_pool(database)
    yield shared
    shared.close()


@pytest.fixture
def store(pool: PooledDB) -> mysql.MySQLStore:
    """A store over the module's pool."""
    return mysql.MySQLStore(pool.connection)


def _query(admin: Any, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with admin.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def _lock_waits(admin: Any, database: str, table: str) -> list[tuple[Any, ...]]:
    """The connections to ``database`` waiting for a lock to insert into ``table``."""
    return _query(
        admin,
        "SELECT t.trx_mysql_thread_id FROM information_schema.INNODB_TRX AS t "
        "JOIN information_schema.PROCESSLIST AS p ON p.ID = t.trx_mysql_thread_id "
        "WHERE t.trx_state = 'LOCK WAIT' AND p.DB = %s AND t.trx_query LIKE %s",
        (database, f"%INSERT INTO {table} %"),
    )


def test_the_mysql_store_keeps_the_contract(store: mysql.MySQLStore) -> None:
    # A new store object per call, over the same pool: the suite uses two as replicas.
    report = storetest.run(lambda: mysql.MySQLStore(store.connect))
    assert report.replicas
    print(report, dict(report.examples))


def test_an_empty_database_raises_schema_missing_naming_the_schema_to_run(admin: Any) -> None:
    empty = _create(admin, tables=False)
    try:
        store = mysql.MySQLStore(functools.partial(connect, empty))
        calls: list[Callable[[], object]] = [
            lambda: store.save("s", [agent.Message.user("hi")]),
            lambda: store.messages("s"),
            lambda: store.add_steer("s", "steer"),
            lambda: store.take_steers("s"),
        ]
        for call in calls:
            with pytest.raises(agent.SchemaMissingError, match=r"agentsessions\.stores\.mysql\.SCHEMA") as caught:
                call()
            assert isinstance(caught.value.__cause__, pymysql.err.ProgrammingError)
            assert "'s'" in str(caught.value)
    finally:
        _drop(admin, empty)


def test_a_single_connection_is_refused_with_what_to_pass_instead(database: str) -> None:
    conn = connect(database)
    try:
        with pytest.raises(TypeError, match=r"functools\.partial\(pymysql\.connect"):
            mysql.MySQLStore(conn)
    finally:
        conn.close()


def test_a_save_writes_only_the_new_messages(store: mysql.MySQLStore, database: str) -> None:
    messages = numbered_transcript(50)
    store.save("incremental", messages)
    watcher = connect(database, autocommit=True)
    written = functools.partial(
        _query, watcher, "SELECT position, body FROM agentsessions_messages WHERE session_id = %s"
    )
    # Mark every stored row; a save that rewrote a row would replace the mark.
    _query(
        watcher, "UPDATE agentsessions_messages SET body = CONCAT(body, ' ') WHERE session_id = %s", ("incremental",)
    )
    store.save("incremental", [*messages, agent.Message.user("one more")])
    assert [p for p, body in written(("incremental",)) if not body.endswith(b" ")] == [50]
    watcher.close()
    check_replicas_notice_each_other(store, lambda: mysql.MySQLStore(store.connect), "incremental", messages)


def test_eight_sessions_on_eight_threads_save_at_the_same_time(
    store: mysql.MySQLStore, admin: Any, database: str
) -> None:
    ids = [f"parallel-{i}" for i in range(8)]
    for session_id in ids:
        store.save(session_id, numbered_transcript(2))
    # Hold all eight session records: each save then waits inside the database, so all
    # eight are seen waiting at once only if nothing in the store makes them queue.
    blocker = connect(database)
    try:
        with blocker.cursor() as cur:
            in_ids = ", ".join(["%s"] * len(ids))
            cur.execute(
                f"SELECT 1 FROM agentsessions_sessions WHERE id IN ({in_ids}) FOR UPDATE", [encode_text(i) for i in ids]
            )
        errors: list[BaseException] = []

        def save(session_id: str) -> None:
            try:
                store.save(session_id, numbered_transcript(6, tag=session_id))
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=save, args=(i,)) for i in ids]
        for thread in threads:
            thread.start()
        wait_for(
            "eight saves waiting at once",
            lambda: len(_lock_waits(admin, database, "agentsessions_sessions")) == 8,
            every=POLL,
        )
    finally:
        blocker.close()  # ends its transaction
    for thread in threads:
        thread.join(30)
    assert not errors
    assert all(store.messages(i) == numbered_transcript(6, tag=i) for i in ids)


def test_a_connection_killed_mid_save_leaves_the_oldnumbered_transcript(
    store: mysql.MySQLStore, admin: Any, database: str
) -> None:
    old = numbered_transcript(3)
    store.save("killed", old)
    blocker = connect(database)
    try:
        # An uncommitted row where the save will insert message 5: it writes messages 3
        # and 4 in its transaction, then waits there, and is killed.
        with blocker.cursor() as cur:
            cur.execute(
                "INSERT INTO agentsessions_messages (session_id, position, body) VALUES (%s, 5, '{}')",
                (encode_text("killed"),),
            )
        caught: list[BaseException] = []

        def save() -> None:
            try:
                store.save("killed", numbered_transcript(8))
            except BaseException as error:
                caught.append(error)

        thread = threading.Thread(target=save)
        thread.start()
        waiting = wait_for(
            "the save to wait", lambda: _lock_waits(admin, database, "agentsessions_messages"), every=POLL
        )
        (saver,) = waiting
        _query(admin, f"KILL {int(saver[0])}")
        thread.join(30)
    finally:
        blocker.close()  # ends its transaction
    assert len(caught) == 1 and type(caught[0]) is agent.StoreError, caught
    assert "could not save the transcript for session 'killed'" in str(caught[0])
    assert isinstance(caught[0].__cause__, pymysql.err.OperationalError)
    assert store.messages("killed") == old
    store.save("killed", numbered_transcript(8))  # the pool dropped the dead connection
    assert mysql.MySQLStore(store.connect).messages("killed") == numbered_transcript(8)


@contextlib.contextmanager
def pooled_store(database: str) -> Iterator[mysql.MySQLStore]:
    """A store over a pool of its own, as each replica process has."""
    pool = new_pool(database)
    try:
        yield mysql.MySQLStore(pool.connection)
    finally:
        pool.close()


def test_processes_hand_each_steer_to_exactly_one_taker(database: str) -> None:
    check_steers_across_processes(functools.partial(pooled_store, database))


def test_importing_without_pymysql_names_the_extra() -> None:
    code = "import sys; sys.modules['pymysql'] = None; import agentsessions.stores.mysql"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "ImportError: agentsessions.stores.mysql needs PyMySQL" in done.stderr
    assert "pip install agentsessions[mysql]" in done.stderr
