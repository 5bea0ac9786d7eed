"""How a save's cost and the bytes stored grow with the transcript, for every store, in one run.

    python benchmarks/save_scaling.py

For each store: the median time of a save that appends one message to a transcript of
20 messages and of 2,000 (each save extending the one before, as a running agent's do),
and their ratio; then the bytes the store holds after a 500-turn conversation saved the
way a run saves it, against the raw size of its messages (their codec JSON). A store whose
driver or server is missing is skipped, with the reason. Goals: t(2000)/t(20) <= 1.5,
stored/raw <= 1.2.

Servers: PostgreSQL, MariaDB and Redis as in tests/support/servers.py (each in a scratch schema,
database or key prefix, dropped at the end); MongoDB at AGENTSESSIONS_TEST_MONGODB, or else a SecantusDB
server started in this process, whose timings and sizes are its own, not MongoDB's.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs

import agentsessions as agent
from agentsessions.codec import dump_message

SMALL, LARGE = 20, 2000
REPEATS = 60
TURNS = 500
TIME_GOAL, STORAGE_GOAL = 1.5, 1.2  # t(2000)/t(20), bytes stored / raw bytes
POSTGRES_DSN = os.environ.get("AGENTSESSIONS_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")
MYSQL: dict[str, Any] = {
    "host": os.environ.get("AGENTSESSIONS_TEST_MYSQL_HOST", "127.0.0.1"),
    "port": int(os.environ.get("AGENTSESSIONS_TEST_MYSQL_PORT", "3306")),
    "user": os.environ.get("AGENTSESSIONS_TEST_MYSQL_USER", "root"),
    "password": os.environ.get("AGENTSESSIONS_TEST_MYSQL_PASSWORD", ""),
}
MONGODB_URI = os.environ.get("AGENTSESSIONS_TEST_MONGODB", "")
REDIS_URL = os.environ.get("AGENTSESSIONS_TEST_REDIS", "redis://127.0.0.1:6379/0")


@attrs.frozen
class Backend:
    """A store to measure, how to count the bytes it holds, and what that count is."""

    store: agent.Store
    stored_bytes: Callable[[], int] | None
    method: str


# --- The conversation -----------------------------------------------------------------

_WORDS = "the a of to and in is it for on with as was at by an be this that from or agent tool result café".split()  # noqa: SIM905


def _words(rng: random.Random, size: int) -> str:
    text: list[str] = []
    while sum(len(w) + 1 for w in text) < size:
        text.append(rng.choice(_WORDS))
    return " ".join(text)


def _turn(rng: random.Random, n: int) -> list[agent.Message]:
    """One turn: a question, a tool call with JSON arguments, its 1-2 KB result, an answer."""
    arguments = {"query": _words(rng, 60), "limit": rng.randint(5, 50), "filters": {"lang": "en", "since": 2020}}
    result = json.dumps([{"title": _words(rng, 40), "snippet": _words(rng, 200)} for _ in range(rng.randint(4, 8))])
    return [
        agent.Message.user(_words(rng, rng.randint(80, 300))),
        agent.Message(
            agent.Role.ASSISTANT,
            [
                agent.Content.of_text(_words(rng, 80)),
                agent.Content.tool_use(f"call-{n}", "search", json.dumps(arguments)),
            ],
        ),
        agent.Message(agent.Role.USER, [agent.Content.tool_result(f"call-{n}", result)]),
        agent.Message.assistant(_words(rng, rng.randint(150, 600))),
    ]


def conversation(turns: int, seed: int = 7) -> list[agent.Message]:
    """A deterministic conversation of ``turns`` turns, four messages each."""
    rng = random.Random(seed)
    return [message for n in range(turns) for message in _turn(rng, n)]


def short_conversation(turns: int) -> list[agent.Message]:
    """A chat of ``turns`` short turns, four messages each: a question, a tool call, its result, an answer.

    Short texts make reading cost what building the objects costs, where long ones make it
    cost what decoding JSON costs.
    """
    return [
        message
        for n in range(turns)
        for message in (
            agent.Message.user(f"What is {n} plus one?"),
            agent.Message(
                agent.Role.ASSISTANT, [agent.Content.tool_use(f"call-{n}", "add", json.dumps({"a": n, "b": 1}))]
            ),
            agent.Message(agent.Role.USER, [agent.Content.tool_result(f"call-{n}", str(n + 1))]),
            agent.Message.assistant(f"It is {n + 1}."),
        )
    ]


# --- Measurements ---------------------------------------------------------------------


def save_like_a_run(store: agent.Store, session_id: str, messages: list[agent.Message]) -> None:
    """Save before each model request and at the end, as the runner does: three saves a turn."""
    for end in range(4, len(messages) + 1, 4):
        store.save(session_id, messages[: end - 3])  # the question, before the first request
        store.save(session_id, messages[: end - 1])  # the tool result, before the second
        store.save(session_id, messages[:end])  # the answer, when the run returns


def append_time(store: agent.Store, session_id: str, base: list[agent.Message], extra: list[agent.Message]) -> float:
    """Median seconds of a save appending one message, starting at ``base``."""
    transcript = list(base)
    store.save(session_id, transcript)
    timings = []
    for message in extra:
        transcript.append(message)
        started = time.perf_counter()
        store.save(session_id, transcript)
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


# --- Stores ---------------------------------------------------------------------------


@contextlib.contextmanager
def memory() -> Iterator[Backend]:
    """The in-process store; it holds the messages themselves, so bytes are not counted."""
    from agentsessions.stores.memory import MemoryStore

    yield Backend(MemoryStore(), None, "not counted: it holds the Message objects")


@contextlib.contextmanager
def sqlite_file() -> Iterator[Backend]:
    """A SQLite file in a temporary directory."""
    from agentsessions.stores import sqlite

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "sessions.db")

        def size() -> int:
            with contextlib.closing(sqlite3.connect(path)) as db:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return os.path.getsize(path)

        store = sqlite.open(path)
        yield Backend(store, size, "file size after a WAL checkpoint")
        store.close()


@contextlib.contextmanager
def postgres_schema() -> Iterator[Backend]:
    """PostgreSQL, in a scratch schema dropped at the end."""
    import psycopg
    from psycopg_pool import ConnectionPool

    from agentsessions.stores import postgres

    schema = f"agentsessions_bench_{secrets.token_hex(4)}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            options = {"options": f"-c search_path={schema}"}
            with ConnectionPool(POSTGRES_DSN, kwargs=options, min_size=1, max_size=2, open=True) as pool:
                with pool.connection() as conn:
                    conn.execute(postgres.SCHEMA)

                def size() -> int:
                    tables = ("agentsessions_sessions", "agentsessions_messages", "agentsessions_steers")
                    for table in tables:
                        admin.execute(f"VACUUM {schema}.{table}")
                    query = (
                        "SELECT sum(pg_total_relation_size(format('%%I.%%I', %s::text, t))) FROM unnest(%s::text[]) t"
                    )
                    row = admin.execute(query, (schema, list(tables))).fetchone()
                    return int(row[0]) if row else 0

                yield Backend(
                    postgres.PostgresStore(pool), size, "pg_total_relation_size (heap, TOAST, indexes) after VACUUM"
                )
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@contextlib.contextmanager
def mysql_database() -> Iterator[Backend]:
    """MariaDB or MySQL, in a scratch database dropped at the end."""
    import pymysql

    from agentsessions.stores import mysql

    name = f"agentsessions_bench_{secrets.token_hex(4)}"
    admin = pymysql.connect(**MYSQL, autocommit=True, connect_timeout=5)
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
            cur.execute(f"USE {name}")
            for statement in mysql.SCHEMA:
                cur.execute(statement)

        def size() -> int:
            with admin.cursor() as cur:
                cur.execute("ANALYZE TABLE agentsessions_sessions, agentsessions_messages, agentsessions_steers")
                cur.fetchall()
                query = "SELECT SUM(data_length + index_length) FROM information_schema.tables WHERE table_schema = %s"
                cur.execute(query, (name,))
                row = cur.fetchone()
            return int(row[0]) if row else 0

        from dbutils.pooled_db import PooledDB  # a pool, as a service has: a new connection per call costs ~30 ms

        pool = PooledDB(pymysql, **MYSQL, database=name, connect_timeout=5)
        yield Backend(
            mysql.MySQLStore(pool.connection), size, "data_length + index_length after ANALYZE (InnoDB pages)"
        )
        pool.close()
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


@contextlib.contextmanager
def mongodb_database() -> Iterator[Backend]:
    """MongoDB at AGENTSESSIONS_TEST_MONGODB, or a SecantusDB server in this process."""
    import pymongo

    from agentsessions.stores import mongodb

    with contextlib.ExitStack() as stack:
        uri, note = MONGODB_URI, ""
        if not uri:
            from secantus import SecantusDBServer

            uri = stack.enter_context(SecantusDBServer(storage_path=":memory:")).uri
            note = "; SecantusDB's figures, not MongoDB's"
        client: pymongo.MongoClient[dict[str, Any]] = stack.enter_context(
            pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)
        )
        database = client[f"agentsessions_bench_{secrets.token_hex(4)}"]
        stack.callback(client.drop_database, database.name)
        for collection, models in mongodb.INDEXES.items():
            database[collection].create_indexes(models)

        def size() -> int:
            # A collection comes into being with its first document: plain saves make no counters.
            names = {mongodb.SESSIONS, mongodb.MESSAGES, mongodb.COUNTERS} & set(database.list_collection_names())
            stats = [database.command("collStats", name) for name in sorted(names)]
            return sum(int(s.get("size", 0)) + int(s.get("totalIndexSize", 0)) for s in stats)

        yield Backend(mongodb.MongoStore(database), size, f"collStats size + totalIndexSize (uncompressed){note}")


@contextlib.contextmanager
def redis_prefix() -> Iterator[Backend]:
    """Redis at AGENTSESSIONS_TEST_REDIS, under a scratch key prefix whose keys are deleted at the end."""
    import redis

    from agentsessions.stores.redis import RedisStore

    prefix = f"agentsessions_bench_{secrets.token_hex(4)}:"
    with redis.Redis.from_url(REDIS_URL, socket_timeout=30, socket_connect_timeout=5) as client:
        client.ping()

        def keys() -> list[Any]:
            return list(client.scan_iter(match=prefix + "*", count=1000))  # the prefix has no glob character

        def size() -> int:
            return sum(int(client.memory_usage(key, samples=0) or 0) for key in keys())

        try:
            yield Backend(RedisStore(client, prefix=prefix), size, "MEMORY USAGE of every key (in RAM)")
        finally:
            for key in keys():
                client.unlink(key)


STORES: dict[str, Callable[[], contextlib.AbstractContextManager[Backend]]] = {
    "memory": memory,
    "sqlite": sqlite_file,
    "postgres": postgres_schema,
    "mysql": mysql_database,
    "mongodb": mongodb_database,
    "redis": redis_prefix,
}


# --- Report ---------------------------------------------------------------------------


@attrs.frozen
class Row:
    """One store's figures."""

    store: str
    small: float
    large: float
    stored: int | None
    raw: int
    method: str


def measure(name: str, backend: Backend, talk: list[agent.Message], extra: list[agent.Message], raw: int) -> Row:
    """Bytes after the conversation first (in a fresh store), then the append timings."""
    save_like_a_run(backend.store, "conversation", talk)
    stored = backend.stored_bytes() if backend.stored_bytes else None
    small = append_time(backend.store, "short", talk[:SMALL], extra)
    large = append_time(backend.store, "long", talk[:LARGE], extra)
    return Row(name, small, large, stored, raw, backend.method)


def _ratio(value: float | None, goal: float) -> str:
    if value is None:
        return f"{'-':>6} {'':<4}"
    return f"{value:>6.2f} {'ok' if value <= goal else 'over':<4}"


def _table(rows: list[Row]) -> str:
    head = f"{'store':<9} {'t(20) ms':>9} {'t(2000) ms':>10} {'ratio':>6} {'':<4} {'bytes stored':>13}"
    head += f" {'raw bytes':>10} {'ratio':>6}"
    lines = [head, "-" * (len(head) + 5)]
    for r in rows:
        stored = f"{r.stored:>13,}" if r.stored is not None else f"{'-':>13}"
        storage = _ratio(r.stored / r.raw if r.stored is not None else None, STORAGE_GOAL)
        lines.append(
            f"{r.store:<9} {r.small * 1000:>9.3f} {r.large * 1000:>10.3f} {_ratio(r.large / r.small, TIME_GOAL)} "
            f"{stored} {r.raw:>10,} {storage}"
        )
    return "\n".join(line.rstrip() for line in lines)


def main() -> None:
    """Measure every store that can be reached and print the table."""
    started = time.perf_counter()
    talk = conversation(TURNS)
    extra = conversation(REPEATS // 4 + 1, seed=8)[:REPEATS]
    raw = sum(len(dump_message(m).encode()) for m in talk)
    print(f"{TURNS}-turn conversation: {len(talk)} messages, {raw:,} bytes of message JSON")
    print(f"append timings: median of {REPEATS} saves, each adding one message to the one before\n")
    rows: list[Row] = []
    for name, open_backend in STORES.items():
        with contextlib.ExitStack() as stack:
            try:
                backend = stack.enter_context(open_backend())
            except Exception as error:  # a missing driver or server: say so and go on
                print(f"{name}: skipped ({type(error).__name__}: {(str(error) or '-').splitlines()[0]})")
                continue
            rows.append(measure(name, backend, talk, extra, raw))
    print(_table(rows))
    print("\nbytes stored, as measured:")
    for row in rows:
        print(f"  {row.store}: {row.method}")
    print(f"\ngoals: t(2000)/t(20) <= {TIME_GOAL}; bytes stored / raw bytes <= {STORAGE_GOAL}")
    print(f"took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
