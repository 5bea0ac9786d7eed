"""Listing one user's conversations among many sessions, beside listing by state, in one run.

    python -m benchmarks.session_listing            # 1,000 and 100,000 sessions; PostgreSQL also 1,000,000
    python -m benchmarks.session_listing --quick    # a check that it still works: 1,000 sessions

For PostgreSQL, SQLite, MariaDB and Redis, and beside them LangGraph's ``PostgresSaver`` (one
thread per session, one checkpoint each, ``list(filter={"user": ...}, limit=20)`` beside
``list(limit=20)``; its listing reads checkpoints, with no index on metadata). A server
that cannot be reached is skipped, with the reason. The store is filled in bulk, straight
into its tables or keys (COPY, executemany, a pipeline: never through the API one by one),
with sessions that each belong
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
import functools
import itertools
import json
import os
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import agentsessions as agent
from agentsessions.codec import encode_text
from agentsessions.metadata import pair_texts
from agentsessions.stores.kit import values
from benchmarks.save_scaling import POSTGRES_DSN, STORES, Backend

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
    grow_and_measure(
        name, sizes, lambda rows: FILLS[name](backend.store, rows), lambda: measure(backend.store, repeats)
    )


def grow_and_measure(
    name: str,
    sizes: list[int],
    fill: Callable[[list[tuple[bytes, int, str]]], None],
    timed: Callable[[], tuple[float, float]],
) -> None:
    """Fill to each size in turn, measure, and print its line."""
    made, first = 0, None
    for size in sizes:
        started = time.perf_counter()
        fill(_rows(made, size))
        filled, made = time.perf_counter() - started, size
        user, state = timed()
        first = first or (user, state)
        print(
            f"  {name}, {size:>9,} sessions: {TARGET}'s 20 newest {user * 1000:7.2f} ms "
            f"(x{user / first[0]:.2f} of {sizes[0]:,}), 20 newest by state {state * 1000:7.2f} ms "
            f"(x{state / first[1]:.2f}); by user / by state x{user / state:.2f}  [filled in {filled:.1f} s]"
        )


# --- The same query on LangGraph's PostgreSQL checkpointer ------------------------------------


@contextlib.contextmanager
def langgraph_saver() -> Iterator[Any]:
    """LangGraph's ``PostgresSaver`` in a scratch schema (its own ``setup()``), dropped at the end."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver  # type: ignore[import-not-found, unused-ignore]
    from psycopg.rows import dict_row

    schema = f"agentsessions_bench_lg_{secrets.token_hex(4)}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            options = f"-c search_path={schema}"
            with psycopg.connect(POSTGRES_DSN, autocommit=True, options=options, row_factory=dict_row) as conn:
                saver = PostgresSaver(conn)
                saver.setup()
                yield saver
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def fill_langgraph(saver: Any, rows: list[tuple[bytes, int, str]]) -> None:
    """One thread per session, one checkpoint each (the shape ``put`` writes), its metadata naming the user."""
    with saver.conn.cursor() as cur:
        columns = "thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata"
        with cur.copy(f"COPY checkpoints ({columns}) FROM STDIN") as copy:
            for key, micros, user in rows:
                checkpoint_id = f"{micros:020d}"  # LangGraph lists newest checkpoint id first
                checkpoint = {"v": 2, "id": checkpoint_id, "ts": values.moment(micros).isoformat()}
                checkpoint |= {"pending_sends": [], "versions_seen": {}, "channel_values": {}, "channel_versions": {}}
                metadata = {"user": user, "step": 1, "source": "loop"}
                copy.write_row((key.decode(), "", checkpoint_id, json.dumps(checkpoint), json.dumps(metadata)))
        cur.execute("ANALYZE checkpoints")


def measure_langgraph(saver: Any, repeats: int) -> tuple[float, float]:
    """Median seconds of ``list(filter={"user": "u42"}, limit=20)`` and of ``list(limit=20)``."""
    user, newest = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        found = len(list(saver.list(None, filter={"user": TARGET}, limit=PER_USER)))
        user.append(time.perf_counter() - started)
        started = time.perf_counter()
        len(list(saver.list(None, limit=PER_USER)))
        newest.append(time.perf_counter() - started)
        assert found == PER_USER, f"LangGraph listed {found} of {TARGET}'s {PER_USER} threads"
    return statistics.median(user), statistics.median(newest)


def main() -> None:
    """Measure every store that can be reached; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 sessions: check that it still works")
    parser.add_argument("--stores", default=",".join([*FILLS, "langgraph"]), help="which stores, comma-separated")
    arguments = parser.parse_args()
    repeats = 3 if arguments.quick else 31
    print(f"== listing one user's sessions among many, beside listing by state; medians of {repeats}")
    print(f"   (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores)")
    for name in arguments.stores.split(","):
        sizes = (
            [1_000]
            if arguments.quick
            else [1_000, 100_000, *([1_000_000] if name in ("postgres", "langgraph") else [])]
        )
        try:
            with contextlib.ExitStack() as stack:
                if name == "langgraph":  # the same query on a peer: "state" there is the newest checkpoints
                    saver = stack.enter_context(langgraph_saver())
                    label = "LangGraph PostgresSaver"
                    grow_and_measure(
                        label,
                        sizes,
                        functools.partial(fill_langgraph, saver),
                        functools.partial(measure_langgraph, saver, repeats),
                    )
                    continue
                backend = stack.enter_context(STORES[name]())
                run_store(name, backend, sizes, repeats)
        except Exception as error:  # a server that is not there, a driver not installed
            print(f"  {name}: skipped ({type(error).__name__}: {str(error).splitlines()[0][:120]})")
    print(f"   (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end)")


if __name__ == "__main__":
    main()
