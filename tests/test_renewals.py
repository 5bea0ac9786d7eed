"""Lease renewals: one heartbeat write per process and store, never one per tool call.

A run proves it still holds its session by the time of its last renewal (the heartbeat's,
or its last save's); only a late heartbeat makes it renew its own lease before a tool
call. Counted over a real SQLite store through a wrapper that notes which thread renewed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runs import Claim, Progress, Renewal
from agentsessions.stores import sqlite

HEARTBEAT = "agentsessions-heartbeat"


class Counting:
    """A real store behind a wrapper that notes every renewal (and the thread that made it) and every save."""

    def __init__(self, store: Any, *, deaf_heartbeat: bool = False) -> None:
        self.store = store
        self.deaf_heartbeat = deaf_heartbeat
        self.renewals: list[str] = []
        self.saves = 0

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        thread = threading.current_thread().name
        self.renewals.append(thread)
        if self.deaf_heartbeat and thread == HEARTBEAT:
            raise agent.StoreError("the heartbeat's write timed out")
        renewal: Renewal = self.store.renew(claims)
        return renewal

    def save_run(self, claim: Claim, messages: Sequence[agent.Message], **options: Any) -> Progress:
        self.saves += 1
        progress: Progress = self.store.save_run(claim, messages, **options)
        return progress

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@agent.tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


def tool_steps(steps: int, *, latency: float = 0.0) -> ScriptedEndpoint:
    """A model that calls ``add`` each step for ``steps - 1`` steps, then answers; each reply after ``latency`` s."""

    def reply(request: agent.ModelRequest) -> agent.Message:
        time.sleep(latency)
        done = sum(1 for m in request.messages if m.role is agent.Role.ASSISTANT)
        if done == steps - 1:
            return agent.Message.assistant("done")
        use = agent.Content.tool_use(f"c{done}", "add", json.dumps({"a": done, "b": 1}))
        return agent.Message(agent.Role.ASSISTANT, [use])

    return ScriptedEndpoint([reply] * steps)


def test_a_tool_call_under_a_fresh_lease_costs_no_renewal(tmp_path: Path) -> None:
    store = Counting(sqlite.open(str(tmp_path / "s.db")))
    spec = agent.Spec(tools=[add], session=agent.open("s", store), max_steps=20, lease=60)
    result = agent.Runner().run(spec, [agent.Message.user("count")], tool_steps(20))
    assert (result.text, result.steps) == ("done", 20)
    # Nineteen tool calls, no renewal of the run's own: a step costs its save and nothing more.
    assert [thread for thread in store.renewals if thread != HEARTBEAT] == []
    assert store.saves == 21  # before each of the 20 requests, and the release
    print(f"\n{len(store.renewals)} renewals in {result.steps} steps (19 tool calls), {store.saves} saves")


def test_a_late_heartbeat_makes_the_run_renew_before_a_tool_call(tmp_path: Path) -> None:
    # Every heartbeat write fails, and the model takes longer than half the lease: before each
    # tool call, the last renewal (the step's save) is too old to vouch for the lease.
    store = Counting(sqlite.open(str(tmp_path / "s.db")), deaf_heartbeat=True)
    spec = agent.Spec(tools=[add], session=agent.open("s", store), max_steps=4, lease=0.4)
    result = agent.Runner().run(spec, [agent.Message.user("count")], tool_steps(4, latency=0.25))
    assert (result.text, store.store.info("s").state) == ("done", agent.RunState.FINISHED)
    mine = [thread for thread in store.renewals if thread != HEARTBEAT]
    assert mine == [threading.current_thread().name] * 3  # one before each of the three tool calls
