"""A Responses API transcript, with its reasoning kept as RAW openai blocks, in every store and sent back byte for byte.

A two-step tool run against the fake Responses server is saved in the store; another
handle on the same store (as another replica would open it) reads it back and runs the
next turn from it. The fake refuses a call sent back without the reasoning item that
preceded it and a reasoning item whose encrypted content changed, so the next turn's
success proves the stored items came back whole; the bytes are compared too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsessions as agent
from agentsessions.endpoints import OpenAIResponsesEndpoint
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing.fakes.chat_completions import Call
from agentsessions.testing.fakes.responses import Answer, FakeResponsesAPI
from tests.support.backends import PERSISTENT, Opener, scratch_opener, store_params

KEY = "sk-responses-stores"


@pytest.fixture(params=store_params("memory", *PERSISTENT))
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    if request.param == "memory":
        store = MemoryStore()  # one store object is all a memory store has: both handles share it
        yield lambda: contextlib.nullcontext(store)
        return
    with scratch_opener(request.param, tmp_path) as made:
        yield made


@agent.tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}, 21 °C"


def test_a_transcript_with_reasoning_is_kept_by_the_store_and_sent_back_byte_for_byte(opener: Opener) -> None:
    search = {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "ü"},
    }
    script = [
        Answer("Let me look ✓.", [Call("call_w", "weather", '{"city":  "Zürich"}')], reasoning="need the weather"),
        Answer("It is sunny.", reasoning="answer now", extra=search),
        Answer("Tomorrow too."),
    ]
    with (
        FakeResponsesAPI(script, api_key=KEY) as fake,
        OpenAIResponsesEndpoint("gpt-test", api_key=KEY, base_url=fake.url, stream=True) as gpt,
    ):
        with opener() as store:
            spec = agent.Spec(tools=[weather], session=agent.open("conversation", store))
            assert agent.Runner().run(spec, [agent.Message.user("Weather in Zürich?")], gpt).text == "It is sunny."
            saved = store.messages("conversation")
        with opener() as again:  # another handle, as another replica opens the store
            stored = again.messages("conversation")
            spec = agent.Spec(tools=[weather], session=agent.open("conversation", again))
            transcript = [*stored, agent.Message.user("And tomorrow?")]
            assert agent.Runner().run(spec, transcript, gpt).text == "Tomorrow too."
    assert stored == saved
    raw = [block for message in stored for block in message.content if block.type is agent.ContentType.RAW]
    assert [block.name for block in raw] == ["openai"] * 3
    last = fake.raw_bodies[2]
    for block in raw:
        assert block.data.encode() in last  # spliced in verbatim, not re-serialised
    kinds = [item.get("type") for item in fake.requests[2].body["input"]]
    assert kinds == [
        "message", "reasoning", "message", "function_call", "function_call_output",
        "reasoning", "web_search_call", "message", "message",
    ]  # fmt: skip
    assert fake.requests[2].body["input"][1] == fake.reasoning_items["rs_0001"]
    assert fake.requests[2].body["input"][3]["arguments"] == '{"city":  "Zürich"}'
