"""Whether a save still costs what is new when one store object serves many sessions (issue 33 build 4).

    python -m benchmarks.session_scaling                      # 300 and 1,000 sessions, every persistent store
    python -m benchmarks.session_scaling --sessions 10000     # the large case (minutes per store)
    python -m benchmarks.session_scaling --stores postgres,redis --modes run
    python -m benchmarks.session_scaling --sessions 10000 --stores mysql --modes run,handle --repeats 1

For each store and each number of sessions N, through one store object: every session is
saved at 10 messages, then grown by one message each, round-robin (N - 1 other sessions
saved between two saves of one session), and those saves are timed ("early"); then every
session is brought to 120 messages and grown by one again, timed ("late"). All of it
twice; the table prints the lower of the two medians of each and late/early side by side
(goal: at most 1.2). Two ways of
saving: ``run``, each session held by a run (``claim``, then ``save_run`` under it: what a
replica running N sessions at once does), ``handle`` (``agent.open(id, store).save``
through handles the application keeps: what each saved is remembered beside it), and
``plain`` (``store.save``, or a handle made afresh for each save: a web view's saves), for
which a store object remembers only the 256 sessions it used last and reads the stored
rows of any other once before writing what differs. Then, for the run and handle modes,
the memory of what the store object remembers of each session after the last round (its
entry and list of references; the transcripts themselves are the runs'). The machine's
load average is printed beside the figures.

Servers as in benchmarks/save_scaling.py (scratch schema, database or key prefix, dropped at
the end). MongoDB's figures come from SecantusDB unless AGENTSESSIONS_TEST_MONGODB names a
server: they are SecantusDB's, not MongoDB's (it scans a collection for some updates).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

import agentsessions as agent
from agentsessions.runs import Claim, RunState
from benchmarks.save_scaling import STORES, conversation

EARLY, LATE = 10, 120  # messages before the timed append
GOAL = 1.2
MODES = ("run", "handle", "plain")


@attrs.frozen
class Row:
    """One store, one number of sessions, one way of saving."""

    store: str
    sessions: int
    mode: str
    early: float
    late: float
    memory: int | None  # bytes the store object holds after the late round (run mode)
    load: str

    @property
    def ratio(self) -> float:
        """Late over early."""
        return self.late / self.early


def load() -> str:
    """The load average over 1, 5 and 15 minutes."""
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def _round(save: Callable[[int, int], None], sessions: int, length: int) -> list[float]:
    """Each session saved at ``length`` messages, round-robin; each save's seconds."""
    timings = []
    for i in range(sessions):
        started = time.perf_counter()
        save(i, length)
        timings.append(time.perf_counter() - started)
    if sessions >= 10_000:  # a round takes minutes there: show the pace
        print(f"    round to {length} messages: {sum(timings):.0f} s, load {load()}", flush=True)
    return timings


def measure(store: Any, name: str, sessions: int, mode: str, talk: list[agent.Message], repeats: int = 2) -> Row:
    """The early and late append of ``sessions`` sessions through ``store``, saved as ``mode`` says."""
    tag = f"scaling-{mode}-{sessions}-{time.monotonic_ns()}"
    ids = [f"{tag}-{i}" for i in range(sessions)]
    claims: list[Claim] = []
    if mode == "run":
        claims = [store.claim(session_id, replica="bench", lease=3600.0) for session_id in ids]
    handles = [agent.open(session_id, store) for session_id in ids] if mode == "handle" else []

    def save(i: int, length: int) -> None:
        if claims:
            store.save_run(claims[i], talk[:length])
        elif handles:
            handles[i].save(talk[:length])
        else:
            store.save(ids[i], talk[:length])

    early, late = [], []
    for _ in range(repeats):  # the lowest median of each kept: a busy moment of the machine falls on one
        _round(save, sessions, EARLY)  # from LATE + 1 the second time: a cut, not timed
        early.append(statistics.median(_round(save, sessions, EARLY + 1)))
        _round(save, sessions, LATE)
        late.append(statistics.median(_round(save, sessions, LATE + 1)))
    memory = remembered(store) if mode != "plain" else None
    for i, session_id in enumerate(ids):
        if claims:
            store.save_run(claims[i], talk[: LATE + 1], end=RunState.FINISHED)
        store.delete(session_id)
    return Row(name, sessions, mode, min(early), min(late), memory, load())


def remembered(store: Any) -> int:
    """The bytes of what ``store`` remembers of its sessions: each entry, its list of messages, the dicts.

    The messages themselves are the runs' (the transcripts they save), so they are not
    counted; the pool and the driver's caches are not either.
    """
    memory = store._known._memory  # the benchmark looks inside: no public API reports this
    held, recent = memory._held, memory._recent
    total = sys.getsizeof(held) + sys.getsizeof(recent)
    for ref, known in held.values():
        total += sys.getsizeof(ref) + _entry(known) + 56  # the (ref, known) tuple
    for known in recent.values():
        total += _entry(known) + 100  # an OrderedDict entry's links
    return total


def _entry(known: Any) -> int:
    return sys.getsizeof(known) + sys.getsizeof(known.messages)


def table(rows: Sequence[Row]) -> str:
    """The figures, one line per store, number of sessions and mode."""
    head = f"{'store':<9} {'sessions':>8} {'mode':<6} {'early ms':>9} {'late ms':>8} {'late/early':>10}"
    head += f" {'':<4} {'store memory':>13} {'per session':>11}  load (1/5/15 min)"
    lines = [head, "-" * len(head)]
    for r in rows:
        memory = (
            f"{r.memory / 1e6:>10.1f} MB {r.memory / r.sessions:>9,.0f} B" if r.memory is not None else f"{'-':>25}"
        )
        verdict = "ok" if r.ratio <= GOAL else "over"
        lines.append(
            f"{r.store:<9} {r.sessions:>8,} {r.mode:<6} {r.early * 1000:>9.3f} {r.late * 1000:>8.3f} "
            f"{r.ratio:>10.2f} {verdict:<4} {memory}  {r.load}"
        )
    return "\n".join(lines)


def main() -> None:
    """Measure what the arguments ask for and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", default="300,1000", help="numbers of sessions, comma-separated")
    parser.add_argument("--stores", default="sqlite,postgres,mysql,mongodb,redis")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--repeats", type=int, default=2, help="rounds of each kind; 1 halves a long run")
    args = parser.parse_args()
    counts = [int(n) for n in args.sessions.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    talk = conversation(LATE // 4 + 1)[: LATE + 1]
    print(f"sessions grown round-robin from {EARLY} and from {LATE} messages; median of one save appending one message")
    print(f"load average at start: {load()}")
    rows: list[Row] = []
    for name in args.stores.split(","):
        with contextlib.ExitStack() as stack:
            try:
                backend = stack.enter_context(STORES[name]())
            except Exception as error:  # a missing driver or server: say so and go on
                print(f"{name}: skipped ({type(error).__name__}: {(str(error) or '-').splitlines()[0]})")
                continue
            for sessions in counts:
                for mode in modes:
                    started = time.perf_counter()
                    rows.append(measure(backend.store, name, sessions, mode, talk, args.repeats))
                    took = time.perf_counter() - started
                    # The row at once: a long run's figures survive its being stopped later.
                    print(f"  {name} {sessions} {mode}: {took:.0f} s", table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    print(f"\ngoal: late/early <= {GOAL}. MongoDB: SecantusDB's figures unless a real server was named, not MongoDB's.")
    print("store memory: what the store object remembers of its sessions after the late round (run mode):")
    print("each entry and its list of the messages saved; the messages are the runs' own, not counted.")


if __name__ == "__main__":
    main()
