"""The loop's cost per step in two checkouts of agentsessions, measured side by side in one run.

    python benchmarks/compare_loop.py --before ../baseline --after .
    python benchmarks/compare_loop.py --before ../baseline --after . --rounds 30 --steps 50

Each round runs one worker process per checkout (``PYTHONPATH=<checkout>``), in an order
that alternates from round to round, so a busy moment of the machine falls on both. A
worker drives the same scripted model and tool through ``Runner.run`` (no session, a memory
session, a SQLite session) and beside them a hand-written loop, which is the same code in
both checkouts: its ratio shows how much of a difference is noise. Figures are medians over
the rounds of each worker's median; the ratio is after / before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

CASES = ("hand-written loop", "no session", "memory session", "SQLite session")


def worker(steps: int, runs: int) -> dict[str, float]:
    """Median seconds per step of each case, over ``runs`` runs of ``steps`` steps (in this process's checkout)."""
    import agentsessions as agent
    from agentsessions.endpoints import ScriptedEndpoint
    from agentsessions.stores import sqlite
    from agentsessions.stores.memory import MemoryStore

    @agent.tool
    def add(a: int, b: int) -> str:
        """Add two numbers."""
        return str(a + b)

    script = [
        agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use(f"c{i}", "add", json.dumps({"a": i, "b": 1}))])
        for i in range(steps - 1)
    ] + [agent.Message.assistant("done")]
    user = [agent.Message.user("count")]

    def hand_written(endpoint: ScriptedEndpoint) -> object:
        transcript = list(user)
        for _ in range(steps):
            response = endpoint.complete(agent.ModelRequest("", tuple(transcript), (add,), 4096))
            transcript.append(response.message)
            uses = [c for c in response.message.content if c.type is agent.ContentType.TOOL_USE]
            if not uses:
                break
            results = [agent.Content.tool_result(u.id, add.fn(**json.loads(u.input))) for u in uses]  # type: ignore[arg-type]
            transcript.append(agent.Message(agent.Role.USER, results))
        return transcript

    runner = agent.Runner()
    memory = MemoryStore()
    directory = tempfile.mkdtemp(prefix="compare-loop-")
    on_disk = sqlite.open(os.path.join(directory, "sessions.db"))
    counter = iter(range(10**9))

    def with_store(store: object) -> Callable[[ScriptedEndpoint], object]:
        def run(endpoint: ScriptedEndpoint) -> object:
            session = agent.open(f"s{next(counter)}", store)  # type: ignore[arg-type]
            return runner.run(agent.Spec(tools=[add], max_steps=steps, session=session), user, endpoint)

        return run

    plain = agent.Spec(tools=[add], max_steps=steps)
    cases: dict[str, Callable[[ScriptedEndpoint], object]] = {
        "hand-written loop": hand_written,
        "no session": lambda endpoint: runner.run(plain, user, endpoint),
        "memory session": with_store(memory),
        "SQLite session": with_store(on_disk),
    }
    figures = {}
    for name, run_once in cases.items():
        run_once(ScriptedEndpoint(script))  # warm up
        timings = []
        for _ in range(runs):
            endpoint = ScriptedEndpoint(script)
            start = time.perf_counter()
            run_once(endpoint)
            timings.append((time.perf_counter() - start) / steps)
        figures[name] = statistics.median(timings)
    return figures


def measure(checkout: Path, steps: int, runs: int) -> dict[str, float]:
    """One worker's figures, in a process that imports agentsessions from ``checkout``."""
    done = subprocess.run(
        [sys.executable, __file__, "--worker", str(checkout), "--steps", str(steps), "--runs", str(runs)],
        env={**os.environ, "PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the worker for {checkout} failed:\n{done.stderr}")
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="the checkout measured first (its root directory)")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--rounds", type=int, default=20, help="worker pairs, interleaved")
    parser.add_argument("--steps", type=int, default=50, help="steps per run")
    parser.add_argument("--runs", type=int, default=15, help="runs per case in each worker")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        import agentsessions

        imported = Path(agentsessions.__file__).resolve()
        if not imported.is_relative_to(args.worker.resolve()):
            raise SystemExit(f"agentsessions came from {imported}, not from {args.worker}")
        print(json.dumps(worker(args.steps, args.runs)))
        return
    if args.before is None:
        parser.error("--before CHECKOUT is required")
    checkouts = {"before": args.before.resolve(), "after": args.after.resolve()}
    seen: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for round_ in range(args.rounds):
        order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
        for which in order:
            seen[which].append(measure(checkouts[which], args.steps, args.runs))
    print(f"loop cost per step: median of {args.rounds} interleaved rounds, each the median of {args.runs} runs")
    print(f"of {args.steps} steps (one tool call a step); before = {checkouts['before']}, after = {checkouts['after']}")
    print(f"{'case':20} {'before':>10} {'after':>10} {'after/before':>13} {'per-round ratios (min-max)':>28}")
    for case in CASES:
        before = statistics.median(figures[case] for figures in seen["before"])
        after = statistics.median(figures[case] for figures in seen["after"])
        ratios = [a[case] / b[case] for a, b in zip(seen["after"], seen["before"], strict=True)]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(f"{case:20} {before * 1e6:7.1f} us {after * 1e6:7.1f} us {after / before:12.2f}x {spread:>28}")


if __name__ == "__main__":
    main()
