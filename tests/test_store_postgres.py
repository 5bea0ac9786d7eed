"""The PostgreSQL store: the conformance suite, a missing schema, incremental saves,
parallel sessions, a connection killed mid-save, and steers taken from several processes.

Each run works in a schema of its own (``agentsessions_test_<random>``), dropped at the end.
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

import psycopg
import pytest
from conftest import POSTGRES_DSN, check_replicas_notice_each_other, numbered_transcript, require_server, wait_for
from crossprocess import check_steers_across_processes
from psycopg_pool import ConnectionPool

import agentsessions as agent
from agentsessions.codec import encode_text
from agentsessions.stores import postgres, storetest

Pool = ConnectionPool[Any]


def _admin() -> Any:
    return psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5)


def make_pool(schema: str, max_size: int = 10) -> Pool:
    """A pool whose connections work in ``schema``."""
    options = f"-c search_path={schema}"
    return ConnectionPool(POSTGRES_DSN, kwargs={"options": options}, min_size=1, max_size=max_size, open=True)


@pytest.fixture(scope="module")
def admin() -> Iterator[Any]:
    """An autocommit connection outside the store, to create schemas and watch and kill backends."""
    with require_server("PostgreSQL", _admin) as connection:
        yield connection


@pytest.fixture(scope="module")
def schema(admin: Any) -> Iterator[str]:
    """A fresh schema with the store's tables, dropped when the module is done."""
    name = f"agentsessions_test_{secrets.token_hex(4)}"
    admin.execute(f"CREATE SCHEMA {name}")
    try:
        with make_pool(name, max_size=1) as pool, pool.connection() as conn:
            conn.execute(postgres.SCHEMA)  # what the user's migration does
        yield name
    finally:
        admin.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture(scope="module")
def pool(schema: str) -> Iterator[Pool]:
    """The pool the store borrows from."""
    with make_pool(schema) as pool:
        yield pool


@pytest.fixture
def store(pool: Pool) -> postgres.PostgresStore:
    """A store over the module's pool."""
    return postgres.PostgresStore(pool)


def test_the_postgres_store_keeps_the_contract(store: postgres.PostgresStore) -> None:
    # A new store object per call, over the same pool: the suite uses two as replicas.
    report = storetest.run(lambda: postgres.PostgresStore(store.pool))
    assert report.replicas
    print(report, dict(report.examples))


def test_an_empty_schema_raises_schema_missing_naming_the_schema_to_run(admin: Any) -> None:
    empty = f"agentsessions_test_{secrets.token_hex(4)}"
    admin.execute(f"CREATE SCHEMA {empty}")
    try:
        with make_pool(empty, max_size=1) as pool:
            store = postgres.PostgresStore(pool)
            calls: list[Callable[[], object]] = [
                lambda: store.save("s", [agent.Message.user("hi")]),
                lambda: store.messages("s"),
                lambda: store.add_steer("s", "steer"),
                lambda: store.take_steers("s"),
            ]
            for call in calls:
                with pytest.raises(
                    agent.SchemaMissingError, match=r"agentsessions\.stores\.postgres\.SCHEMA"
                ) as caught:
                    call()
                assert isinstance(caught.value.__cause__, psycopg.errors.UndefinedTable)
                assert "'s'" in str(caught.value)
    finally:
        admin.execute(f"DROP SCHEMA {empty} CASCADE")


def _row_versions(admin: Any, schema: str, session_id: str) -> dict[int, str]:
    rows = admin.execute(
        f"SELECT position, xmin::text FROM {schema}.agentsessions_messages WHERE session_id = %s",
        (encode_text(session_id),),
    ).fetchall()
    return dict(rows)


def test_a_save_writes_only_the_new_messages(store: postgres.PostgresStore, admin: Any, schema: str) -> None:
    messages = numbered_transcript(50)
    store.save("incremental", messages)
    before = _row_versions(admin, schema, "incremental")
    store.save("incremental", [*messages, agent.Message.user("one more")])
    after = _row_versions(admin, schema, "incremental")
    assert {p for p in after if before.get(p) != after[p]} == {50}  # xmin changes only for rows written
    check_replicas_notice_each_other(store, lambda: postgres.PostgresStore(store.pool), "incremental", messages)


def test_eight_sessions_on_eight_threads_save_at_the_same_time(
    store: postgres.PostgresStore, admin: Any, schema: str
) -> None:
    ids = [f"parallel-{i}" for i in range(8)]
    for session_id in ids:
        store.save(session_id, numbered_transcript(2))
    # Hold all eight session records: each save then waits inside the database, so all
    # eight are seen waiting at once only if nothing in the store makes them queue.
    with psycopg.connect(POSTGRES_DSN, options=f"-c search_path={schema}") as blocker:
        blocker.execute(
            "SELECT 1 FROM agentsessions_sessions WHERE id = ANY(%s) FOR UPDATE", ([encode_text(i) for i in ids],)
        )
        blocker_pid = blocker.info.backend_pid
        errors: list[BaseException] = []

        def save(session_id: str) -> None:
            try:
                store.save(session_id, numbered_transcript(6, tag=session_id))
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=save, args=(i,)) for i in ids]
        for thread in threads:
            thread.start()
        blocked = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        wait_for("eight saves waiting at once", lambda: admin.execute(blocked, (blocker_pid,)).fetchone()[0] == 8)
        blocker.rollback()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert all(store.messages(i) == numbered_transcript(6, tag=i) for i in ids)


def test_a_connection_killed_mid_save_leaves_the_oldnumbered_transcript(
    store: postgres.PostgresStore, admin: Any, schema: str
) -> None:
    old = numbered_transcript(3)
    store.save("killed", old)
    with psycopg.connect(POSTGRES_DSN, options=f"-c search_path={schema}") as blocker:
        # An uncommitted row where the save will insert message 5: it writes messages 3
        # and 4 in its transaction, then waits there, and is killed.
        insert = "INSERT INTO agentsessions_messages (session_id, position, body) VALUES (%s, 5, '{}')"
        blocker.execute(insert, (encode_text("killed"),))
        caught: list[BaseException] = []

        def save() -> None:
            try:
                store.save("killed", numbered_transcript(8))
            except BaseException as error:
                caught.append(error)

        thread = threading.Thread(target=save)
        thread.start()
        query = "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        row = wait_for("the save to wait", lambda: admin.execute(query, (blocker.info.backend_pid,)).fetchone())
        admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        thread.join(30)
        blocker.rollback()
    assert len(caught) == 1 and type(caught[0]) is agent.StoreError, caught
    assert "could not save the transcript for session 'killed'" in str(caught[0])
    assert isinstance(caught[0].__cause__, psycopg.OperationalError)
    assert store.messages("killed") == old
    store.save("killed", numbered_transcript(8))  # the pool replaced the dead connection
    assert postgres.PostgresStore(store.pool).messages("killed") == numbered_transcript(8)


@contextlib.contextmanager
def pooled_store(schema: str) -> Iterator[postgres.PostgresStore]:
    """A store over a small pool of its own, as each replica process has."""
    with make_pool(schema, max_size=2) as pool:
        yield postgres.PostgresStore(pool)


def test_processes_hand_each_steer_to_exactly_one_taker(schema: str) -> None:
    check_steers_across_processes(functools.partial(pooled_store, schema))


def test_importing_without_psycopg_names_the_extra() -> None:
    code = "import sys; sys.modules['psycopg'] = None; import agentsessions.stores.postgres"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "ImportError: agentsessions.stores.postgres needs psycopg" in done.stderr
    assert "pip install agentsessions[postgres]" in done.stderr
