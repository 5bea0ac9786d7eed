"""The loop's own cost per step, beside a hand-written loop doing the same work, in one run.

    python benchmarks/loop_overhead.py

Both loops drive the same scripted model and the same tool; the difference is what the
runner adds (steer collection, events check, cancellation check, Result). Budget: 3x.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores.memory import MemoryStore

STEPS = 50
ROUNDS = 40


@agent.tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


def script_of(steps: int) -> list[agent.Message]:
    """A model's replies for a run of ``steps`` steps: a call to ``add`` each step, then an answer."""
    calls = [
        agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use(f"c{i}", "add", json.dumps({"a": i, "b": 1}))])
        for i in range(steps - 1)
    ]
    return [*calls, agent.Message.assistant("done")]


def hand_written(endpoint: ScriptedEndpoint, messages: list[agent.Message]) -> list[agent.Message]:
    """What a user would write without the library: request, reply, run the tools, repeat."""
    tools = {add.name: add}
    transcript = list(messages)
    for _ in range(STEPS):
        request = agent.ModelRequest("", tuple(transcript), (add,), 4096)
        response = endpoint.complete(request)
        transcript.append(response.message)
        uses = [c for c in response.message.content if c.type is agent.ContentType.TOOL_USE]
        if not uses:
            break
        # The tool returns a str; no check for it here, as a hand-written loop would not make one.
        results = [agent.Content.tool_result(u.id, tools[u.name].fn(**json.loads(u.input))) for u in uses]  # type: ignore[arg-type]
        transcript.append(agent.Message(agent.Role.USER, results))
    return transcript


def _per_step(run_once: Callable[[ScriptedEndpoint], object]) -> float:
    script = script_of(STEPS)
    timings = []
    for _ in range(ROUNDS):
        endpoint = ScriptedEndpoint(script)
        start = time.perf_counter()
        run_once(endpoint)
        timings.append((time.perf_counter() - start) / STEPS)
    return statistics.median(timings)


def main() -> None:
    user = [agent.Message.user("count")]
    runner = agent.Runner()
    spec = agent.Spec(tools=[add], max_steps=STEPS)
    store = MemoryStore()
    with_session = agent.Spec(tools=[add], max_steps=STEPS, session=agent.open("bench", store))
    cases: dict[str, Callable[[ScriptedEndpoint], object]] = {
        "hand-written loop": lambda e: hand_written(e, user),
        "Runner.run, no session": lambda e: runner.run(spec, user, e),
        "Runner.run, events callback": lambda e: runner.run(spec, user, e, events=lambda event: None),
        "Runner.run, memory session": lambda e: runner.run(with_session, user, e),
        "Runner.start + wait": lambda e: runner.start(spec, user, e).wait(),
    }
    for run_once in cases.values():  # warm up
        _per_step(run_once)
    results = {name: _per_step(run_once) for name, run_once in cases.items()}
    base = results["hand-written loop"]
    print(f"{'loop':32} {'per step':>10} {'vs hand-written':>16}   ({STEPS} steps, median of {ROUNDS} runs)")
    for name, seconds in results.items():
        print(f"{name:32} {seconds * 1e6:8.1f} us {seconds / base:15.2f}x")
    ratio = results["Runner.run, no session"] / base
    print(f"\nbudget: the runner within 3x of the hand-written loop -> {ratio:.2f}x {'OK' if ratio <= 3 else 'OVER'}")


if __name__ == "__main__":
    main()
