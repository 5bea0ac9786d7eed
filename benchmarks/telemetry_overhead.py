"""What telemetry costs per step: a run with no events callback, with OpenTelemetry over no-op
providers, and with the SDK's providers exporting to memory, side by side in one process.

    python -m benchmarks.telemetry_overhead

Every case drives the same scripted model and tool through ``Runner.run`` with no session
(the loop's own cost, where telemetry weighs most); the cases take turns round after round
so a busy moment of the machine falls on all of them; figures are medians. A step here is
one ``chat`` span and one ``execute_tool`` span, and four histogram records; the SDK case
exports each span as it ends (``SimpleSpanProcessor``), so its figure includes the export.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from benchmarks.loop_overhead import add, script_of

Case = Callable[[], object]


def missing() -> str:
    """Why the measurement cannot run here ("" when it can): the SDK is not installed."""
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        return "opentelemetry-sdk is not installed (pip install agentsessions[bench])"
    return ""


def cases(steps: int) -> dict[str, Callable[[ScriptedEndpoint], object]]:
    """Each configuration, as a function of a fresh endpoint that runs ``steps`` steps."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentsessions.telemetry import OpenTelemetry

    runner, user = agent.Runner(), [agent.Message.user("count")]
    spec = agent.Spec(tools=[add], max_steps=steps)
    no_op = OpenTelemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    sdk = OpenTelemetry(tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()]))

    def with_sdk(endpoint: ScriptedEndpoint) -> object:
        result = runner.run(spec, user, endpoint, sdk)
        exporter.clear()  # spans kept from round to round would only grow the heap
        return result

    return {
        "telemetry off": lambda endpoint: runner.run(spec, user, endpoint),
        "an events callback doing nothing": lambda endpoint: runner.run(spec, user, endpoint, lambda event: None),
        "OpenTelemetry, no-op providers": lambda endpoint: runner.run(spec, user, endpoint, no_op),
        "OpenTelemetry, SDK + in-memory": with_sdk,
    }


def measure(steps: int = 50, rounds: int = 30) -> dict[str, float]:
    """Median seconds per step of each configuration, round-robin, after one warm-up round."""
    script = script_of(steps)
    runs = cases(steps)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(rounds + 1):
        for name, run in runs.items():
            endpoint = ScriptedEndpoint(script)
            started = time.perf_counter()
            run(endpoint)
            if round_:
                times[name].append((time.perf_counter() - started) / steps)
    return {name: statistics.median(values) for name, values in times.items()}


def report(figures: dict[str, float]) -> None:
    """Print each configuration's time per step and its ratio to telemetry off."""
    off = figures["telemetry off"]
    for name, seconds in figures.items():
        print(f"  {name:<34} {seconds * 1e6:9.1f} us per step {seconds / off:6.2f}x off")


def main() -> None:
    """Measure and print."""
    reason = missing()
    if reason:
        print(f"telemetry overhead: skipped ({reason})")
        return
    steps, rounds = 50, 30
    print(f"telemetry overhead per step, no store, {steps} steps, median of {rounds} rounds")
    report(measure(steps, rounds))


if __name__ == "__main__":
    main()
