"""What the PostgreSQL store's run calls cost, against one bare round trip to the server.

    python benchmarks/postgres_runs.py

Prints, side by side, the median time of: a bare ``SELECT 1`` on a connection already in
hand (one round trip), the pool's ``check_connection`` and ``postgres.check_connection``
(the same round trip under a deadline: what a pool made with ``check=`` adds to every
borrow; the store's documented pool has none), ``save_run`` of one new message on a 20-message and on a 500-message
transcript, ``fork`` of a whole 20-message and 2,000-message session, and ``renew`` of 1
and of 1,000 claims, each through a pool with and without that check, and each as a ratio
to the bare round trip.
Then the time ``sessions()`` takes to page through 100,000 sessions (a tenth never saved,
the rest in runs of ten sharing one ``updated_at``), made with one INSERT ... SELECT
generate_series. Everything happens in a scratch schema, dropped at the end.
"""

from __future__ import annotations

import itertools
import os
import secrets
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

import agentsessions as agent
from agentsessions.stores import postgres

POSTGRES_DSN = os.environ.get("AGENTSESSIONS_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")
REPEATS = 200
SESSIONS = 100_000


def median_ms(call: Callable[[], object], repeats: int = REPEATS) -> float:
    """The median wall time of ``call`` in milliseconds, after a few warm-up calls."""
    for _ in range(5):
        call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def transcript(n: int, tag: str) -> list[agent.Message]:
    """``n`` messages of about 200 bytes, user and assistant in turn."""
    text = "x" * 180
    return [(agent.Message.user if i % 2 == 0 else agent.Message.assistant)(f"{tag}{i} {text}") for i in range(n)]


def save_run_ms(store: postgres.PostgresStore, session_id: str, length: int) -> float:
    """``save_run`` of one more message each time, on a transcript that starts ``length`` long."""
    claim = store.claim(session_id, replica="bench", lease=60)
    messages = transcript(length, session_id)
    store.save_run(claim, messages)

    def one_more() -> None:
        messages.append(agent.Message.user(f"one more {len(messages)}"))
        store.save_run(claim, messages)

    return median_ms(one_more)


def fork_ms(store: postgres.PostgresStore, session_id: str, length: int) -> float:
    """``fork`` of a whole ``length``-message session, into a new id each time."""
    store.save(session_id, transcript(length, session_id))
    forks = itertools.count()
    return median_ms(lambda: store.fork(session_id, f"{session_id}-{next(forks)}"), repeats=REPEATS // 4)


def renew_ms(store: postgres.PostgresStore, prefix: str, count: int) -> float:
    """``renew`` of ``count`` claims held by this process."""
    claims = [store.claim(f"{prefix}-{i}", replica="bench", lease=60) for i in range(count)]
    return median_ms(lambda: store.renew(claims), repeats=REPEATS if count < 100 else 50)


def listing(admin: Any, schema: str, pool: ConnectionPool[Any]) -> None:
    """Make SESSIONS records in one statement, then time paging through them."""
    started = time.perf_counter()
    admin.execute(
        f"""
        INSERT INTO {schema}.agentsessions_sessions (id, revision, length, updated_at)
        SELECT convert_to('listed-' || i, 'UTF8'), 0, 0,
               CASE WHEN i %% 10 = 0 THEN NULL ELSE now() - (i / 10) * interval '1 millisecond' END
        FROM generate_series(1, %s) AS i
        """,
        (SESSIONS,),
    )
    admin.execute(f"ANALYZE {schema}.agentsessions_sessions")
    print(f"  made {SESSIONS:,} sessions in {time.perf_counter() - started:.2f} s (one INSERT ... SELECT)")
    store = postgres.PostgresStore(pool)
    filters: list[tuple[str, dict[str, Any]]] = [("all", {}), ("state=FAILED (none match)", {"state": "failed"})]
    for label, kwargs in filters:
        started = time.perf_counter()
        seen = sum(1 for _ in store.sessions(**kwargs))
        seconds = time.perf_counter() - started
        pages = -(-max(seen, 1) // postgres.PAGE_SIZE)
        per_page = seconds / pages * 1000
        print(f"  sessions() {label}: {seen:,} in {seconds:.2f} s, {pages} pages, {per_page:.1f} ms a page")


def main() -> None:
    """Measure, print, and drop the scratch schema."""
    schema = f"agentsessions_bench_{secrets.token_hex(4)}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            options = f"-c search_path={schema}"
            pools = {
                "default": _pool(options),
                "with check": _pool(options, check=postgres.check_connection),
                "sync commit off": _pool(f"{options} -c synchronous_commit=off"),
            }
            try:
                with pools["default"].connection() as conn:
                    conn.execute(postgres.SCHEMA)
                measure(pools)
                listing(admin, schema, pools["default"])
            finally:
                for pool in pools.values():
                    pool.close()
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _pool(options: str, **settings: Any) -> ConnectionPool[Any]:
    return ConnectionPool(POSTGRES_DSN, kwargs={"options": options}, min_size=1, max_size=2, open=True, **settings)


def measure(pools: dict[str, ConnectionPool[Any]]) -> None:
    """The side-by-side table of calls against one round trip and one committed write."""
    with pools["default"].connection() as conn:
        conn.autocommit = True
        trip = median_ms(lambda: conn.execute("SELECT 1"))
        check = median_ms(lambda: ConnectionPool.check_connection(conn))
        bounded = median_ms(lambda: postgres.check_connection(conn))
        conn.execute("CREATE TEMPORARY TABLE bench_one (n bigint)")
        conn.execute("INSERT INTO bench_one VALUES (0)")
        # A temporary table writes no WAL: a committed write to a real table measures the flush.
        conn.execute("CREATE TABLE IF NOT EXISTS bench_write (n bigint)")
        write = median_ms(lambda: conn.execute("INSERT INTO bench_write VALUES (1)"))
        conn.autocommit = False
    print(f"one round trip (SELECT 1): {trip:.3f} ms; pool check_connection: {check:.3f} ms")
    print(f"postgres.check_connection (the same, under a deadline): {bounded:.3f} ms")
    print(f"one committed one-row INSERT (round trip + WAL flush): {write:.3f} ms")
    print(f"{'call':<22}" + "".join(f"{name:>26}" for name in pools))
    rows: list[tuple[str, Callable[[postgres.PostgresStore, str], float]]] = [
        ("info (read)", lambda store, tag: median_ms(lambda: store.info(f"{tag}-x"))),
        ("save_run 20 -> +1", lambda store, tag: save_run_ms(store, f"{tag}-s20", 20)),
        ("save_run 500 -> +1", lambda store, tag: save_run_ms(store, f"{tag}-s500", 500)),
        ("fork 20", lambda store, tag: fork_ms(store, f"{tag}-f20", 20)),
        ("fork 2000", lambda store, tag: fork_ms(store, f"{tag}-f2000", 2000)),
        ("renew 1 claim", lambda store, tag: renew_ms(store, f"{tag}-r1", 1)),
        ("renew 1000 claims", lambda store, tag: renew_ms(store, f"{tag}-r1000", 1000)),
    ]
    for label, run in rows:
        cells = []
        for name, pool in pools.items():
            ms = run(postgres.PostgresStore(pool), name.replace(" ", "-"))
            cells.append(f"{ms:8.3f} ms {ms / trip:5.1f}x {ms / write:4.1f}w")
        print(f"{label:<22}" + "".join(f"{cell:>26}" for cell in cells))
    print("x: times one round trip; w: times one committed write")


if __name__ == "__main__":
    main()
