"""How long from ``session.approve()`` to the approved tool starting, with a resumer polling every second.

    python -m benchmarks.approval_latency            # 20 approvals
    python -m benchmarks.approval_latency --quick    # 3: a check that it still works

``examples/resumer.py`` runs in this process on a thread, once a second, as a cron job
would (its ``resume_all``), over one SQLite file. Each trial makes a session wait for a call
of a tool that needs approval (the example's service agent, asked to cancel an order),
waits a random fraction of a second so approvals fall anywhere in the resumer's period,
approves the call and times until the tool starts. The figure is bounded below by
nothing and above by one poll period plus one resumed run's start; nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType

import attrs

import agentsessions as agent
from agentsessions.stores import sqlite

POLL_SECONDS = 1.0
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "resumer.py"


def _resumer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("resumer_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(trials: int) -> list[float]:
    """Seconds from approve() to the tool starting, per trial."""
    resumer = _resumer()
    started: dict[str, float] = {}
    arrived = threading.Condition()

    def make(session: agent.StoreSession) -> tuple[agent.Spec, agent.Endpoint]:
        spec, endpoint = resumer.service_agent(session)

        def cancel_order(order_id: str) -> str:
            with arrived:
                started[session.id] = time.perf_counter()
                arrived.notify_all()
            return str(resumer.cancel_order.fn(order_id))

        tool = attrs.evolve(resumer.cancel_order, fn=cancel_order)
        return attrs.evolve(spec, tools=(resumer.order_status, tool)), endpoint

    stop = threading.Event()
    with tempfile.TemporaryDirectory() as where:
        store = sqlite.open(f"{where}/sessions.db")

        def poll() -> None:
            while not stop.wait(POLL_SECONDS):
                with contextlib.redirect_stdout(io.StringIO()):
                    resumer.resume_all(store, make, max_parallel=2, replica="resumer")

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        seconds = []
        for n in range(trials):
            session_id = f"order-{n}"
            spec, endpoint = make(agent.open(session_id, store))
            waited = agent.Runner(replica="web").run(spec, [agent.Message.user(f"cancel order {n}")], endpoint)
            assert waited.stop_reason == agent.StopReason.APPROVAL_REQUIRED
            time.sleep(random.uniform(0, POLL_SECONDS))
            approved = time.perf_counter()
            agent.open(session_id, store).approve(waited.approvals[0].call_id, by="ops")
            with arrived:
                assert arrived.wait_for(lambda: session_id in started, 10 * POLL_SECONDS), "never resumed"  # noqa: B023
            seconds.append(started[session_id] - approved)
        stop.set()
        poller.join(10 * POLL_SECONDS)
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 approvals instead of 20")
    args = parser.parse_args(argv)
    seconds = sorted(measure(3 if args.quick else 20))
    p90 = seconds[min(len(seconds) - 1, round(0.9 * (len(seconds) - 1)))]
    median = statistics.median(seconds)
    print(f"== approve() to the tool starting, a resumer polling every {POLL_SECONDS:g} s ({len(seconds)} approvals)")
    print(
        f"  median {median:.3f} s, mean {statistics.mean(seconds):.3f} s, p90 {p90:.3f} s, "
        f"max {seconds[-1]:.3f} s (median / poll period x{median / POLL_SECONDS:.2f}; SQLite)"
    )


if __name__ == "__main__":
    main()
