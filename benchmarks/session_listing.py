"""Listing one user's conversations among many sessions, beside listing by state, in one run.

    python -m benchmarks.session_listing            # 1,000 and 100,000 sessions; PostgreSQL also 1,000,000
    python -m benchmarks.session_listing --quick    # a check that it still works: 1,000 sessions

For PostgreSQL, SQLite, MariaDB and Redis (a server that cannot be reached is skipped, with
the reason), the store is filled in bulk, straight into its tables or keys (COPY,
executemany, a pipeline: never through the API one by one), with sessions that each belong
to a user (``metadata={"user": ...}``), twenty per user, all ``FINISHED``. The user measured,
``u42``, made its twenty sessions first, so they are the oldest: a listing that walked the
newest sessions looking for them would read every other one first. At each size the
benchmark times, in turn so a busy moment of the machine falls on both, the first page of
``sessions(metadata={"user": "u42"})`` read to its twentieth session, and the first twenty of
``sessions(state=FINISHED)``; then grows the store to the next size and measures again.
Figures are medians in milliseconds, with each size's ratio to the smallest. Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import agentsessions as agent
from agentsessions.codec import encode_text
from agentsessions.metadata import pair_texts
from agentsessions.stores.kit import values
from benchmarks.save_scaling import STORES, Backend

PER_USER = 20
TARGET = "u42"
EPOCH_MICROS = 1_600_000_000 * 10**6  # September 2020: every session is older than any a test makes


def _user(number: int) -> str:
    """Whose session ``number`` is: the first twenty are the target's, then twenty per user."""
    return TARGET if number < PER_USER else f"user{number // PER_USER}"


def _rows(start: int, stop: int) -> list[tuple[bytes, int, str]]:
    """(id, updated_at in microseconds, user) of sessions ``start`` to ``stop``; later numbers are newer."""
    return [(encode_text(f"s{n:08d}"), EPOCH_MICROS + n * 1000, _user(n)) for n in range(start, stop)]


# --- Filling each store in bulk -------------------------------------------------------------


def _chunks(rows: list[tuple[bytes, int, str]], size: int = 5000) -> list[list[tuple[bytes, int, str]]]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def fill_postgres(store: Any, rows: list[tuple[bytes, int, str]]) -> None:
    """COPY the records and their metadata rows, then ANALYZE (a planner needs its statistics)."""
    with store.pool.connection() as conn, conn.cursor() as cur:
        with cur.copy("COPY agentsessions_sessions (id, revision, length, updated_at, run_state) FROM STDIN") as copy:
            for key, micros, _ in rows:
                copy.write_row((key, 1, 0, values.moment(micros), "finished"))
        with cur.copy("COPY agentsessions_metadata (session_id, mkey, mvalue) FROM STDIN") as copy:
            for key, _, user in rows:
                copy.write_row((key, "user", user))
        conn.commit()
        cur.execute("ANALYZE agentsessions_sessions")
        cur.execute("ANALYZE agentsessions_metadata")
        conn.commit()


def fill_sqlite(store: Any, rows: list[tuple[bytes, int, str]]) -> None:
    """executemany in one transaction, then ANALYZE."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as db:
        db.execute("BEGIN IMMEDIATE")
        db.executemany(
            "INSERT INTO agentsessions_sessions (id, revision, length, updated_at, run_state) VALUES (?, 1, 0, ?, ?)",
            [(key, micros, "finished") for key, micros, _ in rows],
        )
        db.executemany(
            "INSERT INTO agentsessions_metadata (session_id, mkey, mvalue) VALUES (?, 'user', ?)",
            [(key, user) for key, _, user in rows],
        )
        db.execute("COMMIT")
        db.execute("ANALYZE")


def fill_mysql(store: Any, rows: list[tuple[bytes, int, str]]) -> None:
    """Multi-row INSERTs (PyMySQL's executemany), then ANALYZE TABLE."""
    conn = store.connect()
    try:
        with conn.cursor() as cur:
            for chunk in _chunks(rows):
                cur.executemany(
                    "INSERT INTO agentsessions_sessions (id, revision, length, updated_at, run_state) "
                    "VALUES (%s, 1, 0, %s, 'finished')",
                    [(key, values.moment(micros).replace(tzinfo=None)) for key, micros, _ in chunk],
                )
                cur.executemany(
                    "INSERT INTO agentsessions_metadata (session_id, mkey, mvalue) VALUES (%s, 'user', %s)",
                    [(key, user.encode()) for key, _, user in chunk],
                )
            conn.commit()
            cur.execute("ANALYZE TABLE agentsessions_sessions, agentsessions_metadata")
            cur.fetchall()
    finally:
        conn.close()


def fill_redis(store: Any, rows: list[tuple[bytes, int, str]]) -> None:
    """One pipeline per chunk: each record's hash, its member in the index and in its pair's set."""
    prefix = encode_text(store.prefix)
    for chunk in _chunks(rows):
        pipe = store.client.pipeline(transaction=False)
        for key, micros, user in chunk:
            stamp, pair = b"%016d" % micros, pair_texts({"user": user})[0].encode()
            pipe.hset(prefix + b"s:" + key, mapping={b"rev": b"1", b"u": stamp, b"st": b"finished", b"md": pair})
            pipe.zadd(prefix + b"sessions", {stamp + key: 0})
            pipe.zadd(prefix + b"p:" + pair, {stamp + key: 0})
        pipe.execute()


FILLS: dict[str, Callable[[Any, list[tuple[bytes, int, str]]], None]] = {
    "postgres": fill_postgres,
    "sqlite": fill_sqlite,
    "mysql": fill_mysql,
    "redis": fill_redis,
}


# --- Measuring --------------------------------------------------------------------------------


def _first(listing: Any, count: int) -> int:
    return len(list(itertools.islice(listing, count)))


def measure(store: Any, repeats: int) -> tuple[float, float]:
    """Median seconds of the user's first page read to its 20th session, and of the 20 newest finished."""
    user, state = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        found = _first(store.sessions(metadata={"user": TARGET}), PER_USER)
        user.append(time.perf_counter() - started)
        started = time.perf_counter()
        _first(store.sessions(state=agent.RunState.FINISHED), PER_USER)
        state.append(time.perf_counter() - started)
        assert found == PER_USER, f"listed {found} of {TARGET}'s {PER_USER} sessions"  # the fill went wrong
    return statistics.median(user), statistics.median(state)


def run_store(name: str, backend: Backend, sizes: list[int], repeats: int) -> None:
    """Fill to each size in turn and print its line."""
    made, first = 0, None
    for size in sizes:
        started = time.perf_counter()
        FILLS[name](backend.store, _rows(made, size))
        filled, made = time.perf_counter() - started, size
        user, state = measure(backend.store, repeats)
        first = first or (user, state)
        print(
            f"  {name}, {size:>9,} sessions: {TARGET}'s 20 newest {user * 1000:7.2f} ms "
            f"(x{user / first[0]:.2f} of {sizes[0]:,}), 20 newest by state {state * 1000:7.2f} ms "
            f"(x{state / first[1]:.2f}); by user / by state x{user / state:.2f}  [filled in {filled:.1f} s]"
        )


def main() -> None:
    """Measure every store that can be reached; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 sessions: check that it still works")
    parser.add_argument("--stores", default=",".join(FILLS), help="which stores, comma-separated")
    arguments = parser.parse_args()
    repeats = 3 if arguments.quick else 31
    print(f"== listing one user's sessions among many, beside listing by state; medians of {repeats}")
    print(f"   (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores)")
    for name in arguments.stores.split(","):
        sizes = [1_000] if arguments.quick else [1_000, 100_000, *([1_000_000] if name == "postgres" else [])]
        try:
            with contextlib.ExitStack() as stack:
                backend = stack.enter_context(STORES[name]())
                run_store(name, backend, sizes, repeats)
        except Exception as error:  # a server that is not there, a driver not installed
            print(f"  {name}: skipped ({type(error).__name__}: {str(error).splitlines()[0][:120]})")
    print(f"   (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end)")


if __name__ == "__main__":
    main()
