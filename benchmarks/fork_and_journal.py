"""What forking and the tool journal cost, beside what they are measured against, in one run.

    python benchmarks/fork_and_journal.py            # SQLite, and PostgreSQL when it is reachable
    python benchmarks/fork_and_journal.py --quick    # a check that it still works (CI)

- Fork of a 2,000-message session (the database copies the rows) beside a save of one new
  message on the same session.
- Per-step time of a run with ``Spec(journal=True)`` beside the same run without it: each
  step calls one tool, so the journal adds two small writes (call started, result) and the
  save of the calls as they arrive.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores import sqlite

DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"


@agent.tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


def script(steps: int) -> list[agent.Message]:
    calls = [
        agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use(f"c{i}", "add", json.dumps({"a": i, "b": 1}))])
        for i in range(steps - 1)
    ]
    return [*calls, agent.Message.assistant("done")]


def per_step(store: Any, journal: bool, steps: int, tag: str) -> float:
    session = agent.open(f"{tag}-{'journal' if journal else 'plain'}-{time.monotonic_ns()}", store)
    spec = agent.Spec(tools=[add], session=session, max_steps=steps, journal=journal)
    started = time.perf_counter()
    agent.Runner().run(spec, [agent.Message.user("count")], ScriptedEndpoint(script(steps)))
    elapsed = (time.perf_counter() - started) / steps
    session.delete()
    return elapsed


def fork_vs_save(store: Any, length: int, rounds: int) -> tuple[float, float]:
    source = f"fork-source-{time.monotonic_ns()}"
    messages = [agent.Message.user(f"message {i} " + "x" * 200) for i in range(length)]
    store.save(source, messages)
    forks, saves = [], []
    for i in range(rounds):
        started = time.perf_counter()
        store.fork(source, f"{source}-fork-{i}")
        forks.append(time.perf_counter() - started)
        messages.append(agent.Message.assistant(f"one more {i}"))
        started = time.perf_counter()
        store.save(source, messages)
        saves.append(time.perf_counter() - started)
        store.delete(f"{source}-fork-{i}")
    store.delete(source)
    return statistics.median(forks), statistics.median(saves)


@contextlib.contextmanager
def stores(quick: bool) -> Iterator[list[tuple[str, Any]]]:
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as stack:
        found: list[tuple[str, Any]] = [("sqlite", sqlite.open(f"{directory}/bench.db"))]
        if not quick:
            with contextlib.suppress(Exception):  # the benchmark runs without a server; it says so below
                found.append(("postgres", stack.enter_context(_postgres())))
        yield found


@contextlib.contextmanager
def _postgres() -> Iterator[Any]:
    import psycopg
    from psycopg_pool import ConnectionPool

    from agentsessions.stores import postgres

    schema = f"bench_journal_{time.monotonic_ns()}"
    with psycopg.connect(DSN, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            options = {"options": f"-c search_path={schema}"}
            with ConnectionPool(DSN, kwargs=options, min_size=1, max_size=2) as pool:
                with pool.connection() as conn:
                    conn.execute(postgres.SCHEMA)
                yield postgres.PostgresStore(pool)
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def median_step(store: Any, journal: bool, steps: int, kind: str, rounds: int) -> float:
    return statistics.median(per_step(store, journal, steps, kind) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few rounds, SQLite only: check that it works")
    args = parser.parse_args()
    steps, rounds, length = (5, 2, 50) if args.quick else (40, 9, 2000)
    print(
        f"{'store':10} {'fork ' + str(length):>12} {'save of 1':>10} {'ratio':>7}   "
        f"{'step, journal':>14} {'step, plain':>12} {'ratio':>7}"
    )
    with stores(args.quick) as found:
        if len(found) == 1 and not args.quick:
            print("(PostgreSQL not reachable: SQLite only)")
        for kind, store in found:
            fork, save = fork_vs_save(store, length, rounds)
            plain = median_step(store, False, steps, kind, rounds)
            journal = median_step(store, True, steps, kind, rounds)
            print(
                f"{kind:10} {fork * 1e3:10.2f}ms {save * 1e3:8.2f}ms {fork / save:6.1f}x   "
                f"{journal * 1e3:12.3f}ms {plain * 1e3:10.3f}ms {journal / plain:6.2f}x"
            )


if __name__ == "__main__":
    main()
