"""Steers between OS processes: three add and three take at once, over one database.

Shared by the tests of every store that processes can share. ``open_store`` must be
picklable (a module-level function, or a ``functools.partial`` of one), because each
process is spawned fresh and opens the store its own way, as a replica would.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import agentsessions as agent

StoreOpener = Callable[[], AbstractContextManager[agent.Store]]

ADDERS, TAKERS, PER_ADDER = 3, 3, 50
# A bound for a stuck process, not a pace: on a loaded machine spawning six interpreters
# that import the drivers takes long, and the test waits on the processes' own signals.
PATIENCE = 600.0


def _add(open_store: StoreOpener, worker: int) -> None:
    with open_store() as store:
        for n in range(PER_ADDER):
            store.add_steer("shared", f"{worker}:{n}")


def _take(open_store: StoreOpener, results: multiprocessing.Queue[list[str]]) -> None:
    with open_store() as store:
        taken: list[str] = []
        for _ in range(5000):  # bounded: what is left when it stops, the parent takes
            taken += store.take_steers("shared")
            if store.messages("done"):
                break
        results.put(taken)


def _next_batch(
    results: multiprocessing.Queue[list[str]], takers: Sequence[multiprocessing.process.BaseProcess]
) -> list[str]:
    """The next taker's steers; fails at once if a taker died without reporting, not after the patience."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=1)
        except queue.Empty:
            failed = [p.exitcode for p in takers if p.exitcode not in (None, 0)]
            assert not failed, f"a taker ended with exit code {failed[0]} before reporting its steers"
    raise AssertionError(f"no taker reported its steers within {PATIENCE:g} s")


def check_steers_across_processes(open_store: StoreOpener) -> None:
    """Every steer is taken exactly once, and each taker sees each adder's steers in order."""
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[list[str]] = context.Queue()
    takers = [context.Process(target=_take, args=(open_store, results)) for _ in range(TAKERS)]
    adders = [context.Process(target=_add, args=(open_store, w)) for w in range(ADDERS)]
    for process in takers + adders:
        process.start()
    for process in adders:
        process.join(PATIENCE)
        assert process.exitcode == 0, f"an adder ended with exit code {process.exitcode}"
    with open_store() as store:
        store.save("done", [agent.Message.user("stop taking")])
        batches = [_next_batch(results, takers) for _ in takers]
        for process in takers:
            process.join(PATIENCE)
        taken = [steer for batch in batches for steer in batch] + store.take_steers("shared")
    assert sorted(taken) == sorted(f"{w}:{n}" for w in range(ADDERS) for n in range(PER_ADDER))
    for batch in batches:
        for worker in range(ADDERS):
            mine = [int(s.split(":")[1]) for s in batch if s.startswith(f"{worker}:")]
            assert mine == sorted(mine)
