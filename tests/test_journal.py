"""The tool journal and pending tool calls: what is saved when, what runs on resume, what is in doubt.

The kill tests (tests/crash/test_crashes.py) prove the same across real crashes; these show each rule
on its own, over the memory store.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.loop import IN_DOUBT
from agentsessions.runs import Claim, Progress
from agentsessions.stores.memory import MemoryStore

USER = agent.Message.user("send the report")


def uses(*names: str) -> agent.Message:
    """An assistant message calling each named tool once, ids c1, c2..."""
    return agent.Message(
        agent.Role.ASSISTANT,
        [agent.Content.tool_use(f"c{i}", name, json.dumps({"to": f"r{i}"})) for i, name in enumerate(names, 1)],
    )


class Tools:
    """Two tools with side effects (a list of what ran), one idempotent and one not."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        def send(to: str) -> str:
            """Send the report (not idempotent)."""
            self.ran.append(f"send {to}")
            return f"sent to {to}"

        def fetch(to: str) -> str:
            """Fetch a page (idempotent)."""
            self.ran.append(f"fetch {to}")
            return f"page {to}"

        self.send = agent.tool(send)
        self.fetch = agent.tool(idempotent=True)(fetch)

    def spec(self, store: agent.RunStore, *, journal: bool = True) -> agent.Spec:
        return agent.Spec(tools=[self.send, self.fetch], session=agent.open("s", store), journal=journal)


class Recording(MemoryStore):
    """Keeps a copy of every transcript a run saved."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: list[list[agent.Message]] = []

    def save_run(self, claim: Claim, messages: Sequence[agent.Message], **options: Any) -> Progress:
        self.saved.append(list(messages))
        return super().save_run(claim, messages, **options)


def test_the_journal_saves_calls_as_they_arrive_and_each_result_as_its_tool_returns() -> None:
    store, tools = Recording(), Tools()
    endpoint = ScriptedEndpoint([uses("send", "fetch"), agent.Message.assistant("done")])
    result = agent.Runner().run(tools.spec(store), [USER], endpoint)
    assert result.text == "done"
    doubt = agent.Content.tool_result
    sent, fetched = doubt("c1", "sent to r1"), doubt("c2", "page r2")
    calls = uses("send", "fetch")
    assert [m[2:] for m in store.saved] == [
        [],  # before the first request
        [agent.Message(agent.Role.USER, [doubt("c1", IN_DOUBT, is_error=True)])],  # the calls, and send started
        [agent.Message(agent.Role.USER, [sent])],  # send returned
        [agent.Message(agent.Role.USER, [sent, doubt("c2", IN_DOUBT, is_error=True)])],
        [agent.Message(agent.Role.USER, [sent, fetched])],
        [agent.Message(agent.Role.USER, [sent, fetched])],  # before the second request
        [agent.Message(agent.Role.USER, [sent, fetched]), agent.Message.assistant("done")],
    ]
    assert [m[1] for m in store.saved[1:]] == [calls] * 6


def test_without_the_journal_a_step_saves_once() -> None:
    store, tools = Recording(), Tools()
    endpoint = ScriptedEndpoint([uses("send", "fetch"), agent.Message.assistant("done")])
    agent.Runner().run(tools.spec(store, journal=False), [USER], endpoint)
    assert [len(m) for m in store.saved] == [1, 3, 4]


def test_a_transcript_ending_in_calls_without_results_runs_only_those_first() -> None:
    store, tools = MemoryStore(), Tools()
    calls = uses("send", "fetch", "send")
    done = agent.Message(agent.Role.USER, [agent.Content.tool_result("c1", "sent to r1")])
    endpoint = ScriptedEndpoint([agent.Message.assistant("all sent")])
    result = agent.Runner().run(tools.spec(store), [USER, calls, done], endpoint)
    assert tools.ran == ["fetch r2", "send r3"]  # c1 had its result: it is not run again
    assert endpoint.requests[0].messages[-1] == agent.Message(
        agent.Role.USER,
        [
            agent.Content.tool_result("c1", "sent to r1"),
            agent.Content.tool_result("c2", "page r2"),
            agent.Content.tool_result("c3", "sent to r3"),
        ],
    )
    assert result.text == "all sent"


@pytest.mark.parametrize("journal", [True, False])
def test_a_call_in_doubt_runs_again_only_if_its_tool_is_idempotent(journal: bool) -> None:
    store, tools = MemoryStore(), Tools()
    calls = uses("fetch", "send")
    doubt = [agent.Content.tool_result(call_id, IN_DOUBT, is_error=True) for call_id in ("c1", "c2")]
    in_doubt = agent.Message(agent.Role.USER, doubt)
    endpoint = ScriptedEndpoint([agent.Message.assistant("ok")])
    agent.Runner().run(tools.spec(store, journal=journal), [USER, calls, in_doubt], endpoint)
    assert tools.ran == ["fetch r1"]  # send may have run already: it never runs twice
    assert sorted(endpoint.requests[0].messages[-1].content, key=lambda c: c.tool_use_id) == [
        agent.Content.tool_result("c1", "page r1"),
        agent.Content.tool_result("c2", IN_DOUBT, is_error=True),
    ]


def test_a_steer_rides_after_the_results_of_finished_pending_calls() -> None:
    store, tools = MemoryStore(), Tools()
    agent.open("s", store).steer("also cc the boss")
    endpoint = ScriptedEndpoint([agent.Message.assistant("ok")])
    agent.Runner().run(tools.spec(store), [USER, uses("send")], endpoint)
    assert endpoint.requests[0].messages[-1] == agent.Message(
        agent.Role.USER, [agent.Content.tool_result("c1", "sent to r1"), agent.Content.of_text("also cc the boss")]
    )
