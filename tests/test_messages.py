"""Messages are immutable, checked at construction, and say what was wrong."""

from __future__ import annotations

import attrs
import pytest

import agentsessions as agent


def test_named_constructors_build_text_messages() -> None:
    message = agent.Message.user("hello")
    assert message.role is agent.Role.USER
    assert message.content == (agent.Content(agent.ContentType.TEXT, text="hello"),)
    assert message.text == "hello"
    assert agent.Message.assistant("hi").role == "assistant"


def test_messages_are_frozen_and_hashable() -> None:
    message = agent.Message.user("x")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.role = agent.Role.ASSISTANT  # type: ignore[misc]
    assert len({message, agent.Message.user("x")}) == 1


def test_roles_and_types_accept_their_values() -> None:
    message = agent.Message("assistant", [agent.Content("tool_use", id="1", name="f", input="{}")])
    assert message.role is agent.Role.ASSISTANT
    assert message.tool_uses[0].type is agent.ContentType.TOOL_USE


@pytest.mark.parametrize(
    ("build", "complaint"),
    [
        (lambda: agent.Message.user(3), "Content.text must be a str, got int"),  # type: ignore[arg-type]
        (lambda: agent.Message("user", "text"), "sequence of Content, got a str"),  # type: ignore[arg-type]
        (lambda: agent.Message("user", [1]), "must hold Content, got int"),  # type: ignore[list-item]
        (lambda: agent.Message("robot", []), "'robot' is not a valid Role"),
        (lambda: agent.Content.tool_use("1", "f", {"a": 1}), "Content.input must be a str, got dict"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_is_named(build: object, complaint: str) -> None:
    with pytest.raises((TypeError, ValueError), match=complaint):
        build()  # type: ignore[operator]


@pytest.mark.parametrize("flag", ["no", "", 1, 0, None])
def test_is_error_must_be_a_bool_not_anything_truthy(flag: object) -> None:
    with pytest.raises(TypeError, match=f"Content.is_error must be a bool, got {type(flag).__name__}"):
        agent.Content(agent.ContentType.TOOL_RESULT, tool_use_id="t", is_error=flag)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Content\.is_error must be a bool"):
        agent.Content.tool_result("t", "out", is_error=flag)  # type: ignore[arg-type]


def test_is_error_keeps_a_bool() -> None:
    assert agent.Content.tool_result("t", "out", is_error=True).is_error is True
    assert agent.Content.tool_result("t", "out").is_error is False
