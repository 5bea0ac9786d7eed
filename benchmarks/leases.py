"""Lease renewal writes per second with 1,000 concurrent runs in one process, beside one write per run.

    python benchmarks/leases.py                       # memory, SQLite and (if reachable) PostgreSQL
    python benchmarks/leases.py --runs 1000 --lease 3 --seconds 6

Every run waits on a slow model, so only the heartbeat keeps its lease. The benchmark
counts the store's ``renew`` calls and the claims each carried, and prints the writes per
second beside what renewing each run on its own would cost (``runs / (lease / 3)``), and
one renewal call's time beside one bare round trip to the same database.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runs import Claim, Renewal
from agentsessions.stores import sqlite
from agentsessions.stores.memory import MemoryStore


class Counting:
    """A store proxy that counts ``renew`` calls and times them."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.calls: list[tuple[int, float]] = []

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        started = time.perf_counter()
        renewal: Renewal = self.store.renew(claims)
        self.calls.append((len(claims), time.perf_counter() - started))
        return renewal

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def measure(store: Any, runs: int, lease: float, seconds: float) -> tuple[float, float, float]:
    """Renewal calls per second, claims per call, and the median call time, over ``seconds``."""
    counting = Counting(store)
    release, entered = threading.Event(), threading.Semaphore(0)

    def slow(_: agent.ModelRequest) -> agent.Message:
        entered.release()
        release.wait(seconds + 60)
        return agent.Message.assistant("done")

    tag = f"lease-bench-{time.monotonic_ns()}"
    handles = [
        agent.Runner().start(
            agent.Spec(session=agent.open(f"{tag}-{i}", counting), lease=lease),
            [agent.Message.user("wait")],
            ScriptedEndpoint([slow]),
        )
        for i in range(runs)
    ]
    for _ in range(runs):
        entered.acquire()
    before = len(counting.calls)
    time.sleep(seconds)  # the measurement window itself
    window = counting.calls[before:]
    release.set()
    for handle in handles:
        handle.wait(60)
    for i in range(runs):
        store.delete(f"{tag}-{i}")
    per_call = statistics.median(n for n, _ in window) if window else 0.0
    call_time = statistics.median(t for _, t in window) if window else 0.0
    return len(window) / seconds, per_call, call_time


def bare_round_trip(kind: str, store: Any) -> Callable[[], None]:
    if kind == "sqlite":
        db = store._connection()
        db.execute("CREATE TABLE IF NOT EXISTS bench_bare (k INTEGER PRIMARY KEY, v INTEGER)")
        db.execute("INSERT OR IGNORE INTO bench_bare VALUES (1, 0)")

        def commit_one_row() -> None:
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE bench_bare SET v = v + 1 WHERE k = 1")
            db.execute("COMMIT")

        return commit_one_row
    if kind == "postgres":
        pool = store.pool

        def select_one() -> None:
            with pool.connection() as conn:
                conn.execute("SELECT 1").fetchone()

        return select_one
    return lambda: None


@contextlib.contextmanager
def stores(dsn: str) -> Iterator[list[tuple[str, Any]]]:
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as stack:
        found: list[tuple[str, Any]] = [("memory", MemoryStore()), ("sqlite", sqlite.open(f"{directory}/s.db"))]
        try:
            import psycopg
            from psycopg_pool import ConnectionPool

            from agentsessions.stores import postgres

            schema = f"bench_leases_{time.monotonic_ns()}"
            admin = stack.enter_context(psycopg.connect(dsn, autocommit=True, connect_timeout=3))
            admin.execute(f"CREATE SCHEMA {schema}")
            stack.callback(admin.execute, f"DROP SCHEMA {schema} CASCADE")
            pool = stack.enter_context(
                ConnectionPool(dsn, kwargs={"options": f"-c search_path={schema}"}, min_size=2, max_size=8)
            )
            with pool.connection() as conn:
                conn.execute(postgres.SCHEMA)
            found.append(("postgres", postgres.PostgresStore(pool)))
        except Exception as error:  # the benchmark runs without a server; it says so
            print(f"(PostgreSQL skipped: {error})")
        yield found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--dsn", default="host=127.0.0.1 port=5432 user=postgres dbname=test")
    args = parser.parse_args()
    naive = args.runs / (args.lease / 3)
    every = args.lease / 3
    print(f"{args.runs} concurrent runs, lease {args.lease} s, renewed every {every:.2f} s; {args.seconds} s window")
    print(
        f"{'store':10} {'renew writes/s':>15} {'one per run':>12} {'ratio':>8} {'claims/call':>12} "
        f"{'call':>9} {'bare rt':>9} {'call/rt':>8}"
    )
    with stores(args.dsn) as found:
        for kind, store in found:
            rate, per_call, call_time = measure(store, args.runs, args.lease, args.seconds)
            bare = bare_round_trip(kind, store)
            times = []
            for _ in range(200):
                started = time.perf_counter()
                bare()
                times.append(time.perf_counter() - started)
            rt = statistics.median(times)
            ratio = f"{call_time / rt:7.1f}x" if kind != "memory" else "     n/a"
            print(
                f"{kind:10} {rate:15.2f} {naive:12.1f} {rate / naive:7.4f}x {per_call:12.0f} "
                f"{call_time * 1e3:7.2f}ms {rt * 1e3:7.3f}ms {ratio}"
            )


if __name__ == "__main__":
    main()
