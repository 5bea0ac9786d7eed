"""What a save costs through the pool setup the docs recommend, beside a bare committed INSERT.

    python benchmarks/pool_saves.py [--saves N]

For PostgreSQL and for MySQL/MariaDB, in one run, side by side: the p50 and p99 of a save
that appends one message to a transcript of 20 and of 2,000 messages (what a run does
before each model request), through

- the documented pool: PostgreSQL's ``ConnectionPool`` with no ``check`` (the store finds
  dropped connections without a round trip), MySQL's DBUtils ``PooledDB`` with
  ``ping=0, reset=False`` (what ``stores.from_url`` makes);
- the setup the docs recommended before (issue 33 item 4): ``check=postgres.check_connection``,
  a ``PooledDB`` with its defaults (a ping when lent, a ROLLBACK when given back);
- the floor: one ``INSERT`` of a row the size of a message and its ``COMMIT``, on a
  connection borrowed from the documented pool, written by hand.

Each figure is also given as a ratio to the floor's p50. Everything happens in a scratch
schema or database, dropped at the end. A server that cannot be reached is skipped, saying so.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import agentsessions as agent

POSTGRES_DSN = os.environ.get("AGENTSESSIONS_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")
MYSQL: dict[str, Any] = {
    "host": os.environ.get("AGENTSESSIONS_TEST_MYSQL_HOST", "127.0.0.1"),
    "port": int(os.environ.get("AGENTSESSIONS_TEST_MYSQL_PORT", "3306")),
    "user": os.environ.get("AGENTSESSIONS_TEST_MYSQL_USER", "root"),
    "password": os.environ.get("AGENTSESSIONS_TEST_MYSQL_PASSWORD", ""),
}
LENGTHS = (20, 2_000)
BODY = "x" * 180  # about what transcript() makes a message: a ~200-byte row


def transcript(n: int, tag: str) -> list[agent.Message]:
    """``n`` messages of about 200 bytes, user and assistant in turn."""
    return [(agent.Message.user if i % 2 == 0 else agent.Message.assistant)(f"{tag}{i} {BODY}") for i in range(n)]


def interleaved(calls: dict[str, Callable[[], object]], count: int) -> dict[str, tuple[float, float]]:
    """p50 and p99, in milliseconds, of each call made ``count`` times, the calls taking turns.

    Taking turns, rather than one after the other, puts every figure under the same load
    of a shared machine: the ratios hold even when the absolute times drift.
    """
    times: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(count + 5):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            if round_ >= 5:  # the first rounds warm up
                times[name].append(time.perf_counter() - started)
    return {
        name: (statistics.median(spent) * 1000, statistics.quantiles(spent, n=100)[98] * 1000)
        for name, spent in times.items()
    }


def appender(store: agent.RunStore, length: int) -> Callable[[], None]:
    """A call appending one message to a session of its own that starts ``length`` long, and saving it."""
    session_id = f"bench-{secrets.token_hex(4)}"
    messages = transcript(length, session_id)
    store.save(session_id, messages)

    def append() -> None:
        messages.append(agent.Message.user(f"more {BODY}"))
        store.save(session_id, messages)

    return append


def report(backend: str, rows: dict[str, tuple[float, float]]) -> None:
    floor_p50, floor_p99 = rows["bare committed INSERT"]
    print(f"== {backend}: save p50 / p99 in ms, and each as a ratio to the bare INSERT's")
    for name, (p50, p99) in rows.items():
        print(f"  {name:<56} {p50:7.3f} / {p99:7.3f}   x{p50 / floor_p50:5.2f} / x{p99 / floor_p99:5.2f}")


# --- PostgreSQL -------------------------------------------------------------------------------


@contextmanager
def postgres_schema() -> Iterator[str]:
    import psycopg

    from agentsessions.stores import postgres

    schema = f"agentsessions_bench_{secrets.token_hex(4)}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            with psycopg.connect(POSTGRES_DSN, options=f"-c search_path={schema}", autocommit=True) as conn:
                conn.execute(postgres.SCHEMA)
                conn.execute("CREATE TABLE bare (id bigserial PRIMARY KEY, session_id bytea, body text)")
            yield schema
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def bench_postgres(count: int) -> None:
    from psycopg_pool import ConnectionPool

    from agentsessions.stores import postgres

    with postgres_schema() as schema:
        kwargs = {"options": f"-c search_path={schema}", "connect_timeout": 5}
        plain = ConnectionPool(POSTGRES_DSN, kwargs=kwargs, min_size=1, max_size=2, open=True)
        checked = ConnectionPool(
            POSTGRES_DSN, kwargs=kwargs, min_size=1, max_size=2, check=postgres.check_connection, open=True
        )
        with plain, checked:

            def bare() -> None:
                with plain.connection() as conn:
                    conn.execute("INSERT INTO bare (session_id, body) VALUES (%s, %s)", (b"bare", BODY))

            calls: dict[str, Callable[[], object]] = {"bare committed INSERT": bare}
            for length in LENGTHS:
                calls[f"save at {length} messages, documented pool (no check)"] = appender(
                    postgres.PostgresStore(plain), length
                )
                calls[f"save at {length} messages, check=postgres.check_connection"] = appender(
                    postgres.PostgresStore(checked), length
                )
            rows = interleaved(calls, count)
    report("PostgreSQL", rows)


# --- MySQL/MariaDB ----------------------------------------------------------------------------


def bench_mysql(count: int) -> None:
    import pymysql
    from dbutils.pooled_db import PooledDB

    from agentsessions.stores import mysql
    from agentsessions.stores.mysql._pool import pool as documented_pool

    database = f"agentsessions_bench_{secrets.token_hex(4)}"
    admin = pymysql.connect(**MYSQL, autocommit=True, connect_timeout=5)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    try:
        settings: dict[str, Any] = {
            **MYSQL,
            "database": database,
            "connect_timeout": 5,
            "read_timeout": 30,
            "write_timeout": 30,
        }
        with pymysql.connect(**settings) as conn, conn.cursor() as cur:
            for stmt in mysql.SCHEMA:
                cur.execute(stmt)
            cur.execute(
                "CREATE TABLE bare (id BIGINT AUTO_INCREMENT PRIMARY KEY, session_id VARBINARY(64), body LONGBLOB)"
            )
            conn.commit()
        pooled = documented_pool(2, **settings)
        defaults = PooledDB(pymysql, maxcached=2, **settings)

        def bare() -> None:
            conn = pooled.connection()
            try:
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO bare (session_id, body) VALUES (%s, %s)", (b"bare", BODY.encode()))
                conn.commit()
            finally:
                conn.close()

        calls: dict[str, Callable[[], object]] = {"bare committed INSERT": bare}
        for length in LENGTHS:
            calls[f"save at {length} messages, documented pool (ping=0)"] = appender(
                mysql.MySQLStore(pooled.connection), length
            )
            calls[f"save at {length} messages, PooledDB defaults (ping)"] = appender(
                mysql.MySQLStore(defaults.connection), length
            )
        try:
            rows = interleaved(calls, count)
        finally:
            pooled.close()
            defaults.close()
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE {database}")
        admin.close()
    report("MySQL/MariaDB", rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--saves", type=int, default=2_000, help="saves measured per figure (default 2,000)")
    count = parser.parse_args(argv).saves
    for name, bench in (("PostgreSQL", bench_postgres), ("MySQL/MariaDB", bench_mysql)):
        try:
            bench(count)
        except ImportError as error:
            print(f"{name}: skipped ({error})")
        except Exception as error:  # a server that is not there: say so, measure the rest
            print(f"{name}: skipped ({type(error).__name__}: {error})")


if __name__ == "__main__":
    main()
