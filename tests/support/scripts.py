"""Scripted replies, and a store that fails, shared by the runner and session tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import agentsessions as agent
from agentsessions.runs import Claim, Progress
from agentsessions.stores.memory import MemoryStore


def call(name: str, call_id: str = "call-1", **arguments: object) -> agent.Message:
    """An assistant message calling one tool."""
    return agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use(call_id, name, json.dumps(arguments))])


def echo_last_result(request: agent.ModelRequest) -> agent.Message:
    """Answer with the text of the last tool result the model saw."""
    return agent.Message.assistant("result: " + request.messages[-1].content[0].text)


@agent.tool
def double(n: int) -> str:
    """Double a number."""
    return str(2 * n)


def record(into: list[object]) -> Callable[[object], None]:
    """An events callback that appends every event to ``into``."""
    return into.append


class FailsAfterFirstSave(MemoryStore):
    """A memory store whose database went away after a run's first save."""

    def __init__(self) -> None:
        super().__init__()
        self.saves = 0

    def save_run(self, claim: Claim, messages: Sequence[agent.Message], **options: Any) -> Progress:
        self.saves += 1
        if self.saves > 1:
            raise agent.StoreError("the database went away")
        return super().save_run(claim, messages, **options)
