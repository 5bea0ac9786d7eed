"""agentsessions beside a hand-written loop, LangGraph and the OpenAI Agents SDK, in one process.

    python -m benchmarks                  # the full run (several minutes); writes docs/per_step.png
    python -m benchmarks --quick          # a check that it still works (CI): small sizes, seconds
    python -m benchmarks --png PATH       # where the figure goes

Peers come from the ``bench`` extra (pip install agentsessions[bench]); one that is not
installed is skipped, and the suite says so. Every system drives the same scripted model
and tool (see benchmarks/suite_systems.py); the systems take turns, round after round, so
a busy moment of the machine falls on all of them; figures are medians. Goals are printed
as measured/goal; none is asserted anywhere.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

import attrs

from benchmarks import prompt_cache_cost, suite_memory, suite_stores, suite_systems, telemetry_overhead
from benchmarks.save_scaling import conversation, short_conversation


@attrs.frozen
class Sizes:
    """How big each measurement is: the full run's, or the quick check's."""

    loop_steps: int = 50
    loop_rounds: int = 30
    run_steps: int = 500
    run_rounds: int = 3
    edge: int = 20  # steps 1-20 against the last 20
    read_turns: int = 500  # four messages a turn: 2,000 messages
    read_rounds: int = 20
    repeats: int = 200
    threads: tuple[int, ...] = (1, 8, 32)
    thread_seconds: float = 3.0
    concurrent: int = 1000


QUICK = Sizes(10, 2, 20, 1, 5, 25, 2, 10, (1, 2), 0.3, 20)
GOALS = {"loop": 2.0, "late/early": 1.2, "read": 1.0, "file": 2.5, "save": 2.0, "renew": 2.0, "cache": 1.2}


def machine() -> str:
    """The machine, its load, and the date, for the report's header."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    today = datetime.date.today().isoformat()
    return f"{today}; {cpu}, {os.cpu_count()} cores; Python {platform.python_version()}; load average {load}"


def peers() -> dict[str, str]:
    """Each peer and why it is skipped ("" when it runs)."""
    return {name: suite_systems.missing(name) for name in suite_systems.PEERS}


def loop_overhead(sizes: Sizes, skip: dict[str, str]) -> dict[str, float]:
    """Median seconds per step with no store, for each system, round-robin."""
    steps = sizes.loop_steps
    systems: dict[str, Callable[[], suite_systems.Run]] = {
        "floor (plain dicts)": lambda: suite_systems.plain_dict(steps),
        "hand-written, our classes": lambda: suite_systems.our_classes(steps),
        "agentsessions": lambda: suite_systems.agentsessions_run(steps),
        "LangGraph": lambda: suite_systems.langgraph_run(steps),
        "OpenAI Agents": lambda: suite_systems.openai_agents_run(steps),
    }
    systems = {name: run for name, run in systems.items() if not skip.get(name)}
    times: dict[str, list[float]] = {name: [] for name in systems}
    for round_ in range(sizes.loop_rounds + 1):
        for name, run in systems.items():
            per_step = run().per_step()
            if round_:  # the first round warms up
                times[name].append(sum(per_step) / len(per_step))
    return {name: statistics.median(values) for name, values in times.items()}


@attrs.frozen
class LongRun:
    """A system's long run with a SQLite store: the median time of each step over the rounds, and the file."""

    per_step: list[float]
    file_bytes: int


def long_runs(sizes: Sizes, skip: dict[str, str], folder: str) -> dict[str, LongRun]:
    """Each system's ``run_steps``-step run with a SQLite store, round-robin, a fresh file each time."""
    steps = sizes.run_steps
    systems: dict[str, Callable[[str], suite_systems.Run]] = {
        "floor (plain dicts), FULL": lambda path: suite_systems.plain_dict(steps, path, durable=True),
        "agentsessions, NORMAL": lambda path: suite_systems.agentsessions_run(steps, path),
        "agentsessions, durable (FULL)": lambda path: suite_systems.agentsessions_run(steps, path, durable=True),
        "LangGraph + SqliteSaver": lambda path: suite_systems.langgraph_run(steps, path),
        "OpenAI Agents + SQLiteSession": lambda path: suite_systems.openai_agents_run(steps, path),
    }
    systems = {name: run for name, run in systems.items() if not skip.get(name.split(" + ")[0])}
    steps_seen: dict[str, list[list[float]]] = {name: [] for name in systems}
    sizes_seen: dict[str, int] = {}
    for round_ in range(sizes.run_rounds):
        for number, (name, run) in enumerate(systems.items()):
            path = f"{folder}/long-{round_}-{number}.db"
            steps_seen[name].append(run(path).per_step())
            sizes_seen[name] = suite_systems.file_bytes(path)
    return {
        name: LongRun([statistics.median(step) for step in zip(*seen, strict=False)], sizes_seen[name])
        for name, seen in steps_seen.items()
    }


@contextlib.contextmanager
def servers(pool_size: int) -> Iterator[list[suite_stores.Target]]:
    """PostgreSQL, MariaDB and Redis targets that can be reached, saying why any other is skipped."""
    with contextlib.ExitStack() as stack:
        found = []
        for opener in (suite_stores.postgres_target, suite_stores.mysql_target, suite_stores.redis_target):
            try:
                found.append(stack.enter_context(opener(pool_size)))
            except Exception as error:  # a missing driver or server: say so and go on
                reason = f"{type(error).__name__}: {(str(error) or '-').splitlines()[0]}"
                print(f"  {opener.__name__.split('_')[0]}: skipped ({reason})")
        yield found


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:,.1f} us"


def _goal(label: str, measured: float, goal: float, note: str = "") -> str:
    verdict = "met" if measured <= goal else "NOT met"
    return f"  {label:<52} {measured:7.2f} / {goal:<4} {verdict}{'  ' + note if note else ''}"


def section(title: str) -> None:
    """Print a section heading."""
    print(f"\n== {title}")


def report_loop(loop: dict[str, float], goals: list[str]) -> None:
    """Print the per-step overhead table and its goal."""
    floor = loop["floor (plain dicts)"]
    for name, seconds in loop.items():
        print(f"  {name:<32} {_ms(seconds):>12} per step {seconds / floor:9.1f}x floor")
    goals.append(_goal("loop overhead, agentsessions / plain-dict floor", loop["agentsessions"] / floor, GOALS["loop"]))
    ours = loop["hand-written, our classes"]
    print(f"  (agentsessions / hand-written loop over our classes: {loop['agentsessions'] / ours:.2f}x)")


def report_long(runs: dict[str, LongRun], sizes: Sizes, goals: list[str]) -> None:
    """Print early and late step times and file sizes of the long runs, and their goals."""
    text = suite_systems.message_text_bytes(sizes.run_steps)
    edge = sizes.edge
    print(f"  message text (the floor's JSON of the {sizes.run_steps}-step conversation): {text:,} bytes")
    head = f"{'system':<32} {f'steps 1-{edge}':>12} {'last ' + str(edge):>12} {'late/early':>10} {'file':>12}"
    print(f"  {head} {'÷ text':>8}")
    for name, run in runs.items():
        early, late = statistics.median(run.per_step[:edge]), statistics.median(run.per_step[-edge:])
        print(
            f"  {name:<32} {_ms(early):>12} {_ms(late):>12} {late / early:10.2f} "
            f"{run.file_bytes:>12,} {run.file_bytes / text:7.1f}x"
        )
        if name.startswith("agentsessions"):
            goals.append(_goal(f"late/early, {name}", late / early, GOALS["late/early"]))
            goals.append(_goal(f"SQLite file ÷ message text, {name}", run.file_bytes / text, GOALS["file"]))


def report_read(reads: dict[str, float], what: str, goals: list[str]) -> None:
    """Print the read times and the read goal."""
    for name, seconds in reads.items():
        print(f"  {name:<32} {_ms(seconds):>12}")
    if "OpenAI Agents" in reads:
        ratio = reads["agentsessions"] / reads["OpenAI Agents"]
        goals.append(_goal(f"read {what}, agentsessions / SQLiteSession.get_items", ratio, GOALS["read"]))


def report_saves(name: str, figures: dict[str, float], goals: list[str]) -> None:
    """Print one store's save and renewal against its bare operation, and their goals."""
    bare = figures["bare"]
    print(
        f"  {name:<32} save {_ms(figures['save']):>11} ({figures['save'] / bare:4.1f}x)  "
        f"renew {_ms(figures['renew']):>11} ({figures['renew'] / bare:4.1f}x)  bare {_ms(bare):>11}"
    )
    goals.append(_goal(f"save / bare, {name}", figures["save"] / bare, GOALS["save"]))
    goals.append(_goal(f"lease renewal / bare, {name}", figures["renew"] / bare, GOALS["renew"]))
    write = figures.get("bare write")
    if write is not None:  # a server: the same goals against the least a durable write costs there
        print(
            f"  {'':<32} against one bare write {_ms(write)}: "
            f"save {figures['save'] / write:4.1f}x, renew {figures['renew'] / write:4.1f}x"
        )
        goals.append(_goal(f"save / bare write, {name}", figures["save"] / write, GOALS["save"]))
        goals.append(_goal(f"lease renewal / bare write, {name}", figures["renew"] / write, GOALS["renew"]))


def write_png(runs: dict[str, LongRun], path: str, sizes: Sizes) -> str:
    """Plot each system's per-step time against the step number, log scale; returns what was done."""
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return "PNG skipped: matplotlib is not installed (pip install agentsessions[bench])"
    figure, axes = plt.subplots(figsize=(9, 5), dpi=110)
    for name, run in runs.items():
        axes.plot(range(1, len(run.per_step) + 1), [s * 1e6 for s in run.per_step], label=name, linewidth=1)
    axes.set_yscale("log")
    axes.set_xlabel("step")
    axes.set_ylabel("time per step (µs, log scale)")
    axes.set_title(f"Per-step time in a {sizes.run_steps}-step run with a SQLite store (median of {sizes.run_rounds})")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return f"PNG written: {path}"


def main() -> None:
    """Run every measurement, print the tables and the goals, and write the figure."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: check that the suite still works")
    parser.add_argument("--png", default="", help="the figure's path (default docs/per_step.png; quick: a temp file)")
    args = parser.parse_args()
    sizes = QUICK if args.quick else Sizes()
    started, goals = time.perf_counter(), list[str]()
    print(f"benchmarks{' (quick)' if args.quick else ''}: {machine()}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in suite_systems.versions().items()))
    skip = peers()
    for name, reason in skip.items():
        if reason:
            print(f"{name}: skipped ({reason})")
    with tempfile.TemporaryDirectory() as folder:
        run_sections(sizes, skip, folder, goals, args.png or ("" if args.quick else "docs/per_step.png"))
    section("goals (measured / goal)")
    print("\n".join(goals))
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\ntook {time.perf_counter() - started:.0f} s; load average now {load}")


def run_sections(sizes: Sizes, skip: dict[str, str], folder: str, goals: list[str], png: str) -> None:
    """Every measurement in turn, printed as it completes."""
    section(f"loop overhead per step, no store, {sizes.loop_steps} steps, median of {sizes.loop_rounds} rounds")
    report_loop(loop_overhead(sizes, skip), goals)
    section(f"telemetry overhead per step, no store, {sizes.loop_steps} steps, median of {sizes.loop_rounds} rounds")
    reason = telemetry_overhead.missing()
    if reason:
        print(f"  skipped ({reason})")
    else:
        telemetry_overhead.report(telemetry_overhead.measure(sizes.loop_steps, sizes.loop_rounds))
    section(f"{sizes.run_steps}-step run with a SQLite store, per-step median over {sizes.run_rounds} rounds")
    runs = long_runs(sizes, skip, folder)
    report_long(runs, sizes, goals)
    for workload, messages in (
        ("long texts", conversation(sizes.read_turns)),
        ("short texts", short_conversation(sizes.read_turns)),
    ):
        count, rounds = len(messages), sizes.read_rounds
        section(f"read {count:,} messages from SQLite ({workload}), a new store object each time, median of {rounds}")
        reads = suite_stores.read_times(folder, messages, rounds, not skip["OpenAI Agents"])
        report_read(reads, f"{count:,} messages, {workload}", goals)
    section(
        f"a save (one message onto 20), a lease renewal, one bare commit (SQLite) or SELECT 1 / PING round trip "
        f"(servers; and one autocommitted one-row UPDATE / SET, the bare write): medians of {sizes.repeats}"
    )
    for durable in (False, True):
        with suite_stores.sqlite_target(folder, durable) as target:
            report_saves(target.name, suite_stores.save_and_renew(target, sizes.repeats), goals)
    with servers(max(sizes.threads)) as found:
        for target in found:
            report_saves(target.name, suite_stores.save_and_renew(target, sizes.repeats), goals)
        section(f"saves per second on one pool, {sizes.thread_seconds:g} s each, every thread on its own session")
        for target in found:
            rates = {n: suite_stores.saves_per_second(target.store, n, sizes.thread_seconds) for n in sizes.threads}
            cells = "  ".join(f"{n:>2} threads {rate:8,.0f}/s ({rate / rates[1]:4.1f}x)" for n, rate in rates.items())
            print(f"  {target.name:<18} {cells}")
    section(f"{sizes.concurrent:,} concurrent runs in one process, each waiting on a slow model")
    memory = suite_memory.concurrent_runs(sizes.concurrent)
    print(
        f"  Python heap per run beyond its transcript: {memory.heap_per_run:,.0f} bytes "
        f"(transcript {memory.transcript_per_run:,.0f} bytes); resident set per run {memory.rss_per_run:,.0f} bytes"
    )
    steps = 40 if sizes != QUICK else 6
    section(f"prompt caching over a {steps}-step Anthropic run: input billed at full rate / new tokens")
    for cache in (True, False):
        billed, priced = prompt_cache_cost.measure(steps, cache)
        print(f"  cache={cache!s:<5} {billed:6.2f}x the new tokens, priced at {priced:.2f} of sending it uncached")
        if cache:
            goals.append(_goal(f"input billed / new tokens, {steps} steps, cache=True", billed, GOALS["cache"]))
    if png:
        print("\n" + write_png(runs, png, sizes))
    elif sizes == QUICK:
        print("\n" + write_png(runs, f"{folder}/per_step.png", sizes))


if __name__ == "__main__":
    main()
