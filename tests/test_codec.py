"""dumps/loads: the one persisted form, versioned, verbatim."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentsessions as agent
from agentsessions import codec

TOOL_ARGS = '{"z":1,"a":[1, 2],"z":3}'


def _transcript() -> list[agent.Message]:
    return [
        agent.Message.user("find the bug \x00 in ünïcode 🐛"),
        agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("t1", "grep", TOOL_ARGS)]),
        agent.Message(agent.Role.USER, [agent.Content.tool_result("t1", "boom", is_error=True)]),
    ]


def test_round_trip_keeps_tool_arguments_byte_for_byte() -> None:
    loaded = agent.loads(agent.dumps(_transcript()))
    assert loaded == _transcript()
    assert loaded[1].content[0].input == TOOL_ARGS


def test_the_payload_carries_its_format_version() -> None:
    assert json.loads(agent.dumps([]))["v"] == agent.FORMAT_VERSION


def test_a_newer_format_is_refused_with_a_clear_error() -> None:
    payload = json.dumps({"v": agent.FORMAT_VERSION + 1, "messages": []})
    with pytest.raises(agent.FormatError, match="newer than this agentsessions reads"):
        agent.loads(payload)


@pytest.mark.parametrize("text", ["not json", "[]", '{"messages": []}', '{"v": 1, "messages": [{"role": "x"}]}'])
def test_foreign_text_is_a_format_error(text: str) -> None:
    with pytest.raises(agent.FormatError):
        agent.loads(text)


def test_dumps_refuses_a_non_message() -> None:
    with pytest.raises(TypeError, match="element 1 is str"):
        agent.dumps([agent.Message.user("a"), "b"])  # type: ignore[list-item]


def test_lone_surrogates_survive_and_the_output_is_valid_utf8() -> None:
    messages = [agent.Message.user("half a pair: \ud83d")]
    text = agent.dumps(messages)
    text.encode("utf-8")
    assert agent.loads(text) == messages
    assert codec.load_message(codec.dump_message(messages[0]).encode()) == messages[0]


@given(st.lists(st.text()), st.text())
def test_any_text_round_trips(texts: list[str], tool_input: str) -> None:
    messages = [agent.Message.user(t) for t in texts]
    messages.append(agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("id", "f", tool_input)]))
    assert agent.loads(agent.dumps(messages)) == messages


@given(st.text())
def test_steer_text_encoding_round_trips(text: str) -> None:
    assert codec.decode_text(codec.encode_text(text)) == text
