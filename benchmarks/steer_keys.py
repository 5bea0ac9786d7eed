"""What a steer key costs, per store: keyed steers against plain ones, side by side in one run.

    python -m benchmarks.steer_keys            # the full run (a minute or two)
    python -m benchmarks.steer_keys --quick    # a check that it still works: small sizes

For every store (memory, SQLite, PostgreSQL, MariaDB, MongoDB, Redis; one that cannot be
reached is skipped, with the reason), each round adds to one session a steer without a
key, one with a new key, and the same keyed steer again (a retry, which stores nothing),
in turn, so a busy moment of the machine falls on all three; the steers are taken between
rounds, untimed, while the keys stay (as they do while a session lives). Figures are
medians. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable

import attrs

import agentsessions as agent
from benchmarks.save_scaling import STORES


@attrs.frozen
class Figures:
    """One store's medians, in seconds."""

    plain: float
    keyed: float
    retry: float


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure(store: agent.RunStore, rounds: int, name: str) -> Figures:
    """Median seconds of a plain steer, a keyed one and its retry, over ``rounds`` rounds."""
    session_id = f"bench-steer-keys-{name}-{time.time_ns()}"
    plain, keyed, retry = [], [], []
    text = "the customer is on the Pro plan, answer with that in mind"
    for n in range(rounds):
        plain.append(_timed(lambda: store.add_steer(session_id, text)))
        keyed.append(_timed(lambda: store.add_steer(session_id, text, key=f"request-{n}")))  # noqa: B023
        retry.append(_timed(lambda: store.add_steer(session_id, text, key=f"request-{n}")))  # noqa: B023
        store.take_steers(session_id)
    store.delete(session_id)
    return Figures(statistics.median(plain), statistics.median(keyed), statistics.median(retry))


def report(name: str, figures: Figures) -> str:
    """One line: the medians in milliseconds and the ratios to a plain steer."""
    ms, plain = 1000, figures.plain
    return (
        f"  {name}: steer {plain * ms:.2f} ms, keyed {figures.keyed * ms:.2f} ms (x{figures.keyed / plain:.2f}), "
        f"retry {figures.retry * ms:.2f} ms (x{figures.retry / plain:.2f})"
    )


def main() -> None:
    """Measure every store that can be reached; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: check that it still works")
    rounds = 5 if parser.parse_args().quick else 200
    print(f"== steer keys: a steer without a key, with a new key, and its retry; medians of {rounds} rounds")
    for name, opened in STORES.items():
        try:
            with contextlib.ExitStack() as stack:
                backend = stack.enter_context(opened())
                figures = measure(backend.store, rounds, name)  # type: ignore[arg-type]
        except Exception as error:  # a server that is not there, a driver not installed
            print(f"  {name}: skipped ({type(error).__name__}: {str(error).splitlines()[0][:120]})")
            continue
        print(report(name, figures))


if __name__ == "__main__":
    main()
