"""Pruning many old sessions on PostgreSQL or MariaDB/MySQL while runs claim some of them, in one run.

    python -m benchmarks.prune                    # 100,000 sessions on PostgreSQL
    python -m benchmarks.prune --sessions 5000    # a quicker look
    python -m benchmarks.prune --store mysql      # on MariaDB/MySQL

The store is filled in bulk (as ``benchmarks.session_listing`` does: COPY, multi-row INSERTs) with finished
sessions saved long ago, each with a user in its metadata. Then ``store.prune`` deletes them,
``batch`` at a time, while a thread claims sessions the prune has not reached yet, one after
another, as runs resuming old conversations would. It prints the whole prune's time, each
batch transaction's time (median and longest), and the claims' latency during the prune beside
the same claims' latency before it: a claim that meets a batch waits for that one transaction,
never for the whole prune. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Any

from benchmarks.save_scaling import STORES
from benchmarks.session_listing import FILLS, _rows

NAMES = {"postgres": "PostgreSQL", "mysql": "MariaDB/MySQL"}
"""The stores this benchmark fills, and what it calls them."""


def _claims(store: Any, ids: list[str], stop: threading.Event) -> list[float]:
    """Claim ``ids`` one after another until ``stop``; each claim's seconds."""
    took = []
    for session_id in ids:
        if stop.is_set():
            break
        started = time.perf_counter()
        store.claim(session_id, replica="bench", lease=60)
        took.append(time.perf_counter() - started)
    return took


def _timed_batches(store: Any) -> list[float]:
    """Make ``store``'s prune time each batch transaction; the list the times go to."""
    times: list[float] = []
    batch = store._prune_batch

    def timed(ids: list[str], **kwargs: Any) -> int:
        started = time.perf_counter()
        try:
            return int(batch(ids, **kwargs))
        finally:
            times.append(time.perf_counter() - started)

    store._prune_batch = timed
    return times


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def main() -> None:
    """Fill, prune with claims beside it, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100_000, help="how many old sessions to prune")
    parser.add_argument("--batch", type=int, default=500, help="the prune's batch size")
    parser.add_argument("--store", choices=sorted(NAMES), default="postgres", help="the server to prune on")
    arguments = parser.parse_args()
    count, kind = arguments.sessions, arguments.store
    print(f"== prune {count:,} finished sessions on {NAMES[kind]}, batch {arguments.batch}, claims beside it")
    print(f"   (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores)")
    with STORES[kind]() as backend:
        store: Any = backend.store
        FILLS[kind](store, _rows(0, count))
        newest = [f"s{n:08d}" for n in range(count - 1, count - 1 - min(2000, count // 4), -1)]
        before, during = newest[: len(newest) // 4], newest[len(newest) // 4 :]
        quiet = _claims(store, before, threading.Event())
        batches, stop = _timed_batches(store), threading.Event()
        claimed: list[float] = []
        claimer = threading.Thread(target=lambda: claimed.extend(_claims(store, during, stop)))
        started = time.perf_counter()
        claimer.start()
        # The listing is newest first, so the claims race the first batches.
        deleted = store.prune(updated_before=store.info(newest[0]).updated_at, batch=arguments.batch)
        total = time.perf_counter() - started
        stop.set()
        claimer.join()
    print(f"   deleted {deleted:,} in {total:.2f} s ({deleted / total:,.0f} sessions/s), {len(batches)} batches")
    print(f"   a batch transaction: median {_ms(statistics.median(batches))}, longest {_ms(max(batches))}")
    print(f"   a claim before the prune: median {_ms(statistics.median(quiet))}, longest {_ms(max(quiet))}")
    during_figures = (
        f"median {_ms(statistics.median(claimed))}, longest {_ms(max(claimed))} "
        f"(longest / longest batch: {max(claimed) / max(batches):.2f})"
        if claimed
        else "none got in before the prune ended"
    )
    print(f"   a claim during the prune ({len(claimed)}): {during_figures}")
    print(f"   (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end)")


if __name__ == "__main__":
    main()
