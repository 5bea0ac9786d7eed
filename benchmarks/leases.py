"""Lease renewal writes per second in one process: with 1,000 waiting runs, and with runs busy calling tools.

    python benchmarks/leases.py                       # memory, SQLite and (if reachable) PostgreSQL
    python benchmarks/leases.py --runs 1000 --lease 3 --seconds 6

First, every run waits on a slow model, so only the heartbeat keeps its lease. The
benchmark counts the store's ``renew`` calls and the claims each carried, and prints the
writes per second beside what renewing each run on its own would cost
(``runs / (lease / 3)``), and one renewal call's time beside one bare round trip to the
same database. Then 1, 10 and 100 runs call a tool every step as fast as they can: the
renewal writes per second stay those of one heartbeat, whatever the number of runs and of
tool calls (a run under a fresh lease renews nothing before a tool call).
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
        self.by_runs = 0  # renewals a run made itself (before a tool call, its heartbeat late)
        self.tool_calls = 0

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        started = time.perf_counter()
        renewal: Renewal = self.store.renew(claims)
        self.calls.append((len(claims), time.perf_counter() - started))
        self.by_runs += threading.current_thread().name != "agentsessions-heartbeat"
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


def measure_busy(store: Any, runs: int, lease: float, seconds: float) -> tuple[float, float, float]:
    """Tool calls, renewal calls, and renewals by the runs themselves, per second, of ``runs`` runs calling tools."""
    counting = Counting(store)
    stop = threading.Event()

    @agent.tool
    def tick(n: int) -> str:
        """Count a step."""
        counting.tool_calls += 1  # under the GIL; a lost increment would only lower the rate shown
        return str(n)

    def reply(request: agent.ModelRequest) -> agent.Message:
        time.sleep(0.001)  # the model's latency
        if stop.is_set():
            return agent.Message.assistant("done")
        steps = len(request.messages)
        return agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use(f"c{steps}", "tick", f'{{"n": {steps}}}')])

    tag = f"busy-bench-{time.monotonic_ns()}"
    handles = [
        agent.Runner().start(
            agent.Spec(tools=[tick], session=agent.open(f"{tag}-{i}", counting), lease=lease, max_steps=10**6),
            [agent.Message.user("tick")],
            ScriptedEndpoint([reply] * 10**6),
        )
        for i in range(runs)
    ]
    time.sleep(min(1.0, seconds / 4))  # every run under way
    calls_before, renewals_before, by_runs_before = counting.tool_calls, len(counting.calls), counting.by_runs
    time.sleep(seconds)
    calls, renewals = counting.tool_calls - calls_before, len(counting.calls) - renewals_before
    by_runs = counting.by_runs - by_runs_before
    stop.set()
    for handle in handles:
        try:
            handle.wait(120)
        except agent.RunError as error:  # reported, not hidden: the figures above still stand
            print(f"  (a run failed: {error.__cause__!r:.200})")
    for i in range(runs):
        store.delete(f"{tag}-{i}")
    return calls / seconds, renewals / seconds, by_runs / seconds


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
    parser.add_argument("--busy-seconds", type=float, default=6.0, help="the window of the tool-calling runs")
    parser.add_argument("--busy-lease", type=float, default=6.0, help="the lease of the tool-calling runs")
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
        busy = args.busy_lease
        print(f"\nruns calling a tool every step (1 ms model), lease {busy} s; {args.busy_seconds} s window")
        print(f"{'store':10} {'runs':>6} {'tool calls/s':>13} {'renewals/s':>11} {'by the runs':>12} {'beats/s':>8}")
        for kind, store in found:
            for runs in (1, 10, 100):
                calls, renewals, by_runs = measure_busy(store, runs, busy, args.busy_seconds)
                print(f"{kind:10} {runs:6} {calls:13.0f} {renewals:11.2f} {by_runs:12.2f} {3 / busy:8.2f}")


if __name__ == "__main__":
    main()
