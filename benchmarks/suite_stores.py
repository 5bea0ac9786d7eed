"""The suite's store figures: reading a long transcript, a save and a lease renewal against one
bare commit or round trip, and saves per second from many threads on one pool.

Servers as in tests/support/servers.py (PostgreSQL, MariaDB and Redis on 127.0.0.1), each measured
in a scratch schema, database or key prefix of its own, dropped at the end; a server that cannot be reached
is skipped, with the reason.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs

import agentsessions as agent
from agentsessions.messages import ContentType, Role
from agentsessions.stores import sqlite
from benchmarks.save_scaling import MYSQL, POSTGRES_DSN, REDIS_URL


@attrs.frozen
class Target:
    """A store to measure, and one bare commit (SQLite) or round trip (a server) on the same database.

    On a server, ``bare_write`` is also measured: a one-row UPDATE committed on its own, the
    least any durable write costs there (the round trip plus the server's log flush).
    """

    name: str
    store: Any
    bare: Callable[[], None]
    bare_write: Callable[[], None] | None = None


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``call``, after a few warm-up calls."""
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# --- Reading a transcript ------------------------------------------------------------------------


def sdk_items(messages: list[agent.Message]) -> list[dict[str, Any]]:
    """The same conversation as the Agents SDK's input items (a text-and-call message is two items)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        for block in message.content:
            if block.type is ContentType.TOOL_USE:
                call = {"type": "function_call", "call_id": block.id, "name": block.name, "arguments": block.input}
                items.append(call)
            elif block.type is ContentType.TOOL_RESULT:
                items.append({"type": "function_call_output", "call_id": block.tool_use_id, "output": block.text})
            elif message.role is Role.USER:
                items.append({"role": "user", "content": block.text})
            else:
                text = {"type": "output_text", "text": block.text, "annotations": []}
                items.append({"type": "message", "role": "assistant", "status": "completed", "content": [text]})
    return items


def read_times(folder: str, messages: list[agent.Message], rounds: int, with_sdk: bool) -> dict[str, float]:
    """Median seconds to read ``messages`` back with a fresh store object: ours, the SDK's, and a bare loop."""
    import asyncio

    from benchmarks import suite_systems

    ours_path, sdk_path = f"{folder}/read-ours.db", f"{folder}/read-sdk.db"
    store = sqlite.open(ours_path)
    store.save("read", messages)
    store.close()
    cases: dict[str, Callable[[], float]] = {"agentsessions": lambda: _ours_read(ours_path, len(messages))}
    loop = asyncio.new_event_loop()
    if with_sdk:
        suite_systems.sdk_write(sdk_path, sdk_items(messages))
        cases["OpenAI Agents"] = lambda: suite_systems.sdk_read(sdk_path, loop)[1]
        cases["floor: SELECT + json.loads"] = lambda: _bare_read(sdk_path)
    timings: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):  # round-robin, so a busy moment of the machine falls on every system
        for name, case in cases.items():
            timings[name].append(case())
    loop.close()
    return {name: statistics.median(times) for name, times in timings.items()}


def _ours_read(path: str, expected: int) -> float:
    store = sqlite.SQLiteStore(path)
    started = time.perf_counter()
    count = len(store.messages("read"))
    elapsed = time.perf_counter() - started
    store.close()
    if count != expected:
        raise AssertionError(f"read {count} messages, saved {expected}")
    return elapsed


def _bare_read(path: str) -> float:
    with contextlib.closing(sqlite3.connect(path)) as db:
        started = time.perf_counter()
        rows = db.execute("SELECT message_data FROM agent_messages WHERE session_id = ? ORDER BY id", ("read",))
        [json.loads(body) for (body,) in rows.fetchall()]
        return time.perf_counter() - started


# --- A save and a renewal against one bare commit or round trip -----------------------------------


def save_and_renew(target: Target, repeats: int) -> dict[str, float]:
    """Median seconds of a save appending one message, of renewing one claim, and of the bare operation."""
    store, tag = target.store, f"bench-{secrets.token_hex(4)}"
    transcript = [agent.Message.user(f"message {i}") for i in range(20)]
    store.save(f"{tag}-save", transcript)

    def save() -> None:
        transcript.append(agent.Message.assistant("one more"))
        store.save(f"{tag}-save", transcript)

    claim = store.claim(f"{tag}-lease", replica="bench", lease=60.0)
    figures = {
        "save": median_seconds(save, repeats),
        "renew": median_seconds(lambda: store.renew([claim]), repeats),
        "bare": median_seconds(target.bare, repeats),
    }
    if target.bare_write is not None:
        figures["bare write"] = median_seconds(target.bare_write, repeats)
    store.save_run(claim, [], end=agent.RunState.FINISHED)
    store.delete(f"{tag}-save")
    store.delete(f"{tag}-lease")
    return figures


@contextlib.contextmanager
def sqlite_target(folder: str, durable: bool) -> Iterator[Target]:
    """A SQLite store; the bare commit is an update of one row in its own transaction, on the same file."""
    store = sqlite.open(f"{folder}/saves-{'full' if durable else 'normal'}.db", durable=durable)
    db = store._connection()  # the store's own connection: same file, same pragmas
    db.execute("CREATE TABLE IF NOT EXISTS bench_bare (k INTEGER PRIMARY KEY, v INTEGER)")
    db.execute("INSERT OR IGNORE INTO bench_bare VALUES (1, 0)")

    def commit() -> None:
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE bench_bare SET v = v + 1 WHERE k = 1")
        db.execute("COMMIT")

    synchronous = db.execute("PRAGMA synchronous").fetchone()[0]
    yield Target(f"sqlite, synchronous={ {1: 'NORMAL', 2: 'FULL'}.get(synchronous, synchronous) }", store, commit)
    store.close()


@contextlib.contextmanager
def postgres_target(pool_size: int) -> Iterator[Target]:
    """PostgreSQL in a scratch schema, through one pool; the bare round trip is ``SELECT 1`` on a pooled connection."""
    import psycopg
    from psycopg_pool import ConnectionPool

    from agentsessions.stores import postgres

    schema = f"agentsessions_suite_{secrets.token_hex(4)}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            options = {"options": f"-c search_path={schema}"}
            with ConnectionPool(POSTGRES_DSN, kwargs=options, min_size=pool_size, max_size=pool_size) as pool:
                pool.wait(30)
                with pool.connection() as conn:
                    conn.execute(postgres.SCHEMA)
                    conn.execute("CREATE TABLE bench_bare (k integer PRIMARY KEY, v integer)")
                    conn.execute("INSERT INTO bench_bare VALUES (1, 0)")
                    conn.commit()

                def round_trip() -> None:
                    with pool.connection() as conn:
                        conn.execute("SELECT 1").fetchone()

                def write() -> None:
                    with pool.connection() as conn:
                        conn.autocommit = True
                        conn.execute("UPDATE bench_bare SET v = v + 1 WHERE k = 1")
                        conn.autocommit = False

                yield Target("postgres", postgres.PostgresStore(pool), round_trip, write)
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@contextlib.contextmanager
def mysql_target(pool_size: int) -> Iterator[Target]:
    """MariaDB/MySQL in a scratch database, through one DBUtils pool; the bare round trip is ``SELECT 1``."""
    import pymysql
    from dbutils.pooled_db import PooledDB

    from agentsessions.stores import mysql

    name = f"agentsessions_suite_{secrets.token_hex(4)}"
    admin = pymysql.connect(**MYSQL, autocommit=True, connect_timeout=5)
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
            cur.execute(f"USE {name}")
            for statement in mysql.SCHEMA:
                cur.execute(statement)
            cur.execute("CREATE TABLE bench_bare (k INT PRIMARY KEY, v INT)")
            cur.execute("INSERT INTO bench_bare VALUES (1, 0)")
        pool = PooledDB(pymysql, maxconnections=pool_size, blocking=True, **MYSQL, database=name, connect_timeout=5)

        def pooled(statement: str, *, commit: bool = False) -> Callable[[], None]:
            def run() -> None:
                conn = pool.connection()
                try:
                    with conn.cursor() as cur:
                        cur.execute(statement)
                        cur.fetchall()
                    if commit:
                        conn.commit()
                finally:
                    conn.close()

            return run

        round_trip = pooled("SELECT 1")
        write = pooled("UPDATE bench_bare SET v = v + 1 WHERE k = 1", commit=True)

        yield Target("mysql (MariaDB)", mysql.MySQLStore(pool.connection), round_trip, write)
        pool.close()
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


@contextlib.contextmanager
def redis_target(pool_size: int) -> Iterator[Target]:
    """Redis under a scratch key prefix; the bare round trip is ``PING``, the bare write one ``SET``."""
    import redis

    from agentsessions.stores.redis import RedisStore

    prefix = f"agentsessions_suite_{secrets.token_hex(4)}:"
    pool = redis.BlockingConnectionPool.from_url(REDIS_URL, max_connections=pool_size, timeout=30, socket_timeout=30)
    with redis.Redis(connection_pool=pool) as client:
        client.ping()
        try:
            bare_key = prefix + "bare"
            yield Target("redis", RedisStore(client, prefix=prefix), client.ping, lambda: client.set(bare_key, b"1"))
        finally:
            for key in client.scan_iter(match=prefix + "*", count=1000):  # the prefix has no glob character
                client.unlink(key)
            pool.disconnect()  # a client given its pool leaves it open


# --- Saves per second from many threads -----------------------------------------------------------


def saves_per_second(store: Any, threads: int, seconds: float) -> float:
    """Saves per second from ``threads`` threads, each appending one message at a time to its own session."""
    tag, stop, counts = f"threads-{secrets.token_hex(4)}", threading.Event(), [0] * threads
    start = threading.Barrier(threads + 1)

    def work(n: int) -> None:
        transcript = [agent.Message.user("start")]
        start.wait()
        while not stop.is_set():
            transcript.append(agent.Message.assistant(f"step {len(transcript)}"))
            store.save(f"{tag}-{n}", transcript)
            counts[n] += 1

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)  # the measurement window itself, not a wait for a state
    stop.set()
    for worker in workers:
        worker.join()
    rate = sum(counts) / (time.perf_counter() - began)
    for n in range(threads):
        store.delete(f"{tag}-{n}")
    return rate
