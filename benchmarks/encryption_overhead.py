"""What encryption at rest costs, per store: each store against itself wrapped, side by side in one run.

    python -m benchmarks.encryption_overhead            # the full run (a few minutes)
    python -m benchmarks.encryption_overhead --quick    # a check that it still works: small sizes

For every store (memory, SQLite, PostgreSQL, MariaDB, MongoDB, Redis; one that cannot be
reached is skipped, with the reason), the same operations on the same data go through the
store and through ``encrypted(store, keyring)`` in turn, round after round, so a busy
moment of the machine falls on both; figures are medians:

- save: appending one message to a transcript of ``base`` messages, as a run's save does;
- read: a transcript of ``base`` messages read back, by a wrapper that has not seen the
  session (every row decrypted) and by one that has (rows it wrote or read are not
  decrypted again);
- late/early, through the store and through the wrapper: a save appending to 2,000
  messages against one appending to 20 (a save must cost what is new, encrypted or not);
- rekey: sessions (and messages) re-encrypted per second by ``agentsessions.crypto.rekey``.

The conversation is the save-scaling one (1-2 KB tool results). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import time
from collections.abc import Callable

import attrs

import agentsessions as agent
from agentsessions.crypto import Keyring, encrypted, rekey
from benchmarks.save_scaling import STORES, conversation


@attrs.frozen
class Sizes:
    """How big each measurement is."""

    base: int = 200
    rounds: int = 40
    early: int = 20
    late: int = 2000
    sessions: int = 200
    per_session: int = 8


QUICK = Sizes(base=20, rounds=3, early=8, late=40, sessions=10, per_session=4)
KEYRING = Keyring({"k1": Keyring.new_key()}, "k1")


@attrs.frozen
class Figures:
    """One store's medians, in seconds, and its rekey throughput."""

    save: float
    save_wrapped: float
    read: float
    read_cold: float
    read_warm: float
    early: float
    late: float
    plain_early: float
    plain_late: float
    rekey_seconds: float
    sessions: int
    messages: int


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _saves(store: agent.Store, session_id: str, base: list[agent.Message], extra: list[agent.Message]) -> list[float]:
    """Seconds of each save appending one message of ``extra`` to ``base``."""
    transcript = list(base)
    store.save(session_id, transcript)
    times = []
    for message in extra:
        transcript.append(message)
        times.append(_timed(lambda: store.save(session_id, transcript)))
    return times


def measure(store: agent.RunStore, sizes: Sizes, tag: str) -> Figures:
    """Every figure of one store, plain and wrapped taking turns."""
    talk = conversation(max(sizes.late, sizes.base) // 4 + sizes.rounds // 4 + 2)
    base, extra = talk[: sizes.base], talk[sizes.base : sizes.base + sizes.rounds]
    wrapped = encrypted(store, KEYRING)
    times: dict[str, list[float]] = {name: [] for name in ("save", "save_wrapped", "read", "cold", "warm")}
    made: list[str] = []
    for round_ in range(sizes.rounds):
        plain_id, secret_id = f"{tag}-plain-{round_}", f"{tag}-secret-{round_}"
        times["save"] += _saves(store, plain_id, base, extra[:1])
        times["save_wrapped"] += _saves(wrapped, secret_id, base, extra[:1])
        times["read"].append(_timed(functools.partial(store.messages, plain_id)))
        times["cold"].append(_timed(functools.partial(encrypted(store, KEYRING).messages, secret_id)))
        times["warm"].append(_timed(functools.partial(wrapped.messages, secret_id)))
        made += [plain_id, secret_id]
    edges: dict[str, list[float]] = {"early": [], "late": [], "plain early": [], "plain late": []}
    for piece in range(0, len(extra), 10):  # in turns, ten saves at a time
        ten = extra[piece : piece + 10]
        for name, through in (("", wrapped), ("plain ", store)):
            edges[f"{name}early"] += _saves(through, f"{tag}-{name}early-{piece}", talk[: sizes.early], ten)
            edges[f"{name}late"] += _saves(through, f"{tag}-{name}late-{piece}", talk[: sizes.late], ten)
            made += [f"{tag}-{name}{edge}-{piece}" for edge in ("early", "late")]
    for session_id in made:
        store.delete(session_id)
    for n in range(sizes.sessions):  # the sessions rekey moves: a few messages each, under the old key
        wrapped.save(f"{tag}-rekey-{n}", talk[: sizes.per_session])
    started = time.perf_counter()
    done = rekey(store, KEYRING.rotated("k2"), batch=100)
    seconds = time.perf_counter() - started
    assert done.done and done.rekeyed == sizes.sessions, done  # a rekey that failed would mislead
    med = statistics.median
    return Figures(
        med(times["save"]),
        med(times["save_wrapped"]),
        med(times["read"]),
        med(times["cold"]),
        med(times["warm"]),
        med(edges["early"]),
        med(edges["late"]),
        med(edges["plain early"]),
        med(edges["plain late"]),
        seconds,
        done.rekeyed,
        done.rekeyed * sizes.per_session,
    )


def report(name: str, f: Figures) -> list[str]:
    """One store's lines."""
    ms = 1000.0
    return [
        f"  {name}: save +1 message {f.save * ms:.2f} ms, wrapped {f.save_wrapped * ms:.2f} ms "
        f"(x{f.save_wrapped / f.save:.2f}); read {f.read * ms:.2f} ms, wrapped cold {f.read_cold * ms:.2f} ms "
        f"(x{f.read_cold / f.read:.2f}), warm {f.read_warm * ms:.2f} ms (x{f.read_warm / f.read:.2f}); "
        f"late/early x{f.plain_late / f.plain_early:.2f}, wrapped x{f.late / f.early:.2f}; "
        f"rekey {f.sessions / f.rekey_seconds:.0f} sessions/s, {f.messages / f.rekey_seconds:.0f} messages/s "
        f"({f.sessions} sessions in {f.rekey_seconds:.2f} s)"
    ]


def main() -> None:
    """Measure every store that can be reached; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: check that it still works")
    sizes = QUICK if parser.parse_args().quick else Sizes()
    print(
        f"== encryption at rest: wrapped / unwrapped, medians; a transcript of {sizes.base} messages, "
        f"late/early = a save at {sizes.late} / at {sizes.early} messages"
    )
    for name, opened in STORES.items():
        try:
            with contextlib.ExitStack() as stack:
                backend = stack.enter_context(opened())
                figures = measure(backend.store, sizes, name)  # type: ignore[arg-type]
        except Exception as error:  # a server that is not there, a driver not installed
            print(f"  {name}: skipped ({type(error).__name__}: {str(error).splitlines()[0][:120]})")
            continue
        for line in report(name, figures):
            print(line)


if __name__ == "__main__":
    main()
