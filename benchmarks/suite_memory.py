"""What many concurrent runs cost in memory in one process, each waiting on a slow model.

Every run holds a session in a memory store (so it has a claim, a lease and a place in the
heartbeat, as a run with a real store does) and waits in its model call until all have
started. tracemalloc counts the Python heap the runs added, less their transcripts (built
and measured on their own first); the resident set's growth is printed beside it, since a
thread's stack is outside the Python heap.
"""

from __future__ import annotations

import gc
import threading
import time
import tracemalloc

import attrs

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores.memory import MemoryStore


@attrs.frozen
class Memory:
    """Bytes per run: the Python heap beyond its transcript, the transcript itself, and the resident set."""

    runs: int
    heap_per_run: float
    transcript_per_run: float
    rss_per_run: float


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _transcript() -> list[agent.Message]:
    return [agent.Message.user("wait for the slow model, please")]


def concurrent_runs(runs: int, deadline: float = 120.0) -> Memory:
    """Start ``runs`` runs whose model blocks, measure once all are inside it, then let them finish."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    transcripts = [_transcript() for _ in range(runs)]
    transcript_bytes = (tracemalloc.get_traced_memory()[0] - before) / runs

    release, entered = threading.Event(), threading.Semaphore(0)

    def slow(_: agent.ModelRequest) -> agent.Message:
        entered.release()
        release.wait(deadline)
        return agent.Message.assistant("done")

    store, runner = MemoryStore(), agent.Runner()
    gc.collect()
    heap_before, rss_before = tracemalloc.get_traced_memory()[0], _rss()
    handles = [
        runner.start(agent.Spec(session=agent.open(f"wait-{i}", store)), transcripts[i], ScriptedEndpoint([slow]))
        for i in range(runs)
    ]
    ends = time.monotonic() + deadline
    for _ in range(runs):
        if not entered.acquire(timeout=max(0.0, ends - time.monotonic())):
            raise TimeoutError("the runs did not all reach the model in time")
    gc.collect()
    heap = (tracemalloc.get_traced_memory()[0] - heap_before) / runs
    rss = (_rss() - rss_before) / runs
    release.set()
    for handle in handles:
        handle.wait(deadline)
    tracemalloc.stop()
    return Memory(runs, heap, transcript_bytes, rss)
