"""The three ways a run persists (no session, a seed store, a run store), with and without the journal.

One loop, one script, every path: each ``TranscriptSaved`` event stands for a write the
store received, with the length it received, and a run without a session writes nothing
and reports nothing. Before the seam, ``Spec(journal=True)`` without a session reported two
saves per tool call that never happened.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import pytest

import agentsessions as agent
from agentsessions import events as ev
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runs import Claim, Progress
from agentsessions.stores.memory import MemoryStore
from tests.support.seed_store import SeedOnly

USER = agent.Message.user("add twice")


@agent.tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


def calls(*ids: str) -> agent.Message:
    uses = [agent.Content.tool_use(i, "add", json.dumps({"a": n, "b": 1})) for n, i in enumerate(ids)]
    return agent.Message(agent.Role.ASSISTANT, uses)


class SeedWrites(SeedOnly):
    """A store with only the seed's four methods, noting the length of every transcript it was given."""

    def __init__(self) -> None:
        super().__init__(MemoryStore())

    @property
    def written(self) -> list[int]:
        return [length for call, length in self.calls if call == "save"]


class RunWrites(MemoryStore):
    """The reference run store, noting the length of every transcript a run saved."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[int] = []

    def save_run(self, claim: Claim, messages: Sequence[agent.Message], **options: Any) -> Progress:
        self.written.append(len(messages))
        return super().save_run(claim, messages, **options)


def store_for(path: str) -> SeedWrites | RunWrites | None:
    return {"no session": None, "seed store": SeedWrites(), "run store": RunWrites()}[path]


@pytest.mark.parametrize("journal", [False, True], ids=["plain", "journal"])
@pytest.mark.parametrize("path", ["no session", "seed store", "run store"])
def test_every_saved_event_is_a_write_the_store_received(path: str, journal: bool) -> None:
    store = store_for(path)
    session = agent.open("s", store) if store is not None else None
    spec = agent.Spec(tools=[add], session=session, journal=journal)
    seen: list[ev.Event] = []
    endpoint = ScriptedEndpoint([calls("c1", "c2"), calls("c3"), agent.Message.assistant("done")])
    result = agent.Runner().run(spec, [USER], endpoint, seen.append)
    assert result.text == "done" and result.steps == 3
    reported = [event.messages for event in seen if isinstance(event, ev.TranscriptSaved)]
    written = store.written if store is not None else []
    assert reported == written
    if store is None:
        assert reported == []
        return
    # Before each of the three requests and once at the end; the journal adds two per tool call.
    assert len(written) == 4 + (2 * 3 if journal else 0)
    assert store.messages("s") == result.messages


@pytest.mark.parametrize("path", ["no session", "seed store", "run store"])
def test_a_box_steer_reaches_the_next_request_on_every_path(path: str) -> None:
    store = store_for(path)
    session = agent.open("s", store) if store is not None else None
    started: list[agent.Run] = []
    handed = threading.Event()

    def steer_then_call(_: agent.ModelRequest) -> agent.Message:
        assert handed.wait(10)
        started[0].steer("also add 2")
        return calls("c1")

    endpoint = ScriptedEndpoint([steer_then_call, agent.Message.assistant("done")])
    started.append(agent.Runner().start(agent.Spec(tools=[add], session=session), [USER], endpoint))
    handed.set()
    result = started[0].wait(10)
    assert result.unapplied_steers == []
    assert endpoint.requests[1].messages[-1].content[-1] == agent.Content.of_text("also add 2")
