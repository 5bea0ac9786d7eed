"""Scripted replies shared by the runner and session tests."""

from __future__ import annotations

import json
from collections.abc import Callable

import agentsessions as agent


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
