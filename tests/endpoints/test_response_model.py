"""``ModelResponse.model``: the model each endpoint's provider says answered, whole and streamed.

The fake servers answer with a dated model where a test asks (as providers do for an alias);
without, they name the model asked for. The official SDKs' recordings are checked against
the SDKs' own reading of ``model`` in the fixture tests beside this file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.endpoints import AnthropicEndpoint, OpenAIEndpoint, OpenAIResponsesEndpoint, ScriptedEndpoint
from agentsessions.testing.fakes import chat_completions, messages, responses

QUESTION = (agent.Message.user("Which model are you?"),)
ANSWERED = "model-2026-12-04"  # what the server says answered "model-alias"

Fake = messages.FakeMessagesAPI | chat_completions.FakeChatCompletionsAPI | responses.FakeResponsesAPI


def _anthropic(model: str | None) -> tuple[Fake, Callable[[Any, bool], agent.Endpoint]]:
    fake = messages.FakeMessagesAPI([messages.Reply([messages.text("I am.")], model=model)])
    return fake, lambda f, stream: AnthropicEndpoint("model-alias", api_key=f.api_key, base_url=f.origin, stream=stream)


def _chat(model: str | None) -> tuple[Fake, Callable[[Any, bool], agent.Endpoint]]:
    fake = chat_completions.FakeChatCompletionsAPI([chat_completions.Reply("I am.", model=model)])
    return fake, lambda f, stream: OpenAIEndpoint("model-alias", api_key=f.api_key, base_url=f.url, stream=stream)


def _responses(model: str | None) -> tuple[Fake, Callable[[Any, bool], agent.Endpoint]]:
    fake = responses.FakeResponsesAPI([responses.Answer("I am.", model=model)])
    return fake, lambda f, stream: OpenAIResponsesEndpoint(
        "model-alias", api_key=f.api_key, base_url=f.url, stream=stream
    )


ENDPOINTS = [
    pytest.param(_anthropic, id="anthropic"),
    pytest.param(_chat, id="chat"),
    pytest.param(_responses, id="responses"),
]
STREAM = [pytest.param(False, id="whole"), pytest.param(True, id="streamed")]


@pytest.fixture(params=STREAM)
def stream(request: pytest.FixtureRequest) -> Iterator[bool]:
    yield request.param


@pytest.mark.parametrize("make", ENDPOINTS)
def test_the_model_the_server_says_answered(make: Callable[..., Any], stream: bool) -> None:
    fake, endpoint = make(ANSWERED)
    with fake:
        response = endpoint(fake, stream).complete(agent.ModelRequest("", QUESTION))
        assert fake.requests[0].body["model"] == "model-alias"
    assert response.model == ANSWERED
    assert response.message.text == "I am."


@pytest.mark.parametrize("make", ENDPOINTS)
def test_a_server_naming_the_model_asked_for(make: Callable[..., Any], stream: bool) -> None:
    fake, endpoint = make(None)
    with fake:
        assert endpoint(fake, stream).complete(agent.ModelRequest("", QUESTION)).model == "model-alias"


def test_a_responses_stream_whose_last_event_is_bare_names_the_model() -> None:
    fake = responses.FakeResponsesAPI([responses.Answer("I am.", model=ANSWERED, bare_completed=True)])
    with fake:
        endpoint = OpenAIResponsesEndpoint("model-alias", api_key=fake.api_key, base_url=fake.url, stream=True)
        assert endpoint.complete(agent.ModelRequest("", QUESTION)).model == ANSWERED


def test_the_scripted_endpoint_answers_as_its_model() -> None:
    scripted = ScriptedEndpoint(
        [
            agent.Message.assistant("plain"),
            agent.ModelResponse(agent.Message.assistant("scripted whole"), model="its-own"),
            agent.ModelResponse(agent.Message.assistant("no model of its own")),
        ],
        model="scripted-1",
    )
    answers = [scripted.complete(agent.ModelRequest("", QUESTION)).model for _ in range(3)]
    assert answers == ["scripted-1", "its-own", "scripted-1"]
    assert ScriptedEndpoint([agent.Message.assistant("x")]).complete(agent.ModelRequest("", QUESTION)).model == ""
    with pytest.raises(TypeError, match="model"):
        ScriptedEndpoint([], model=None)  # type: ignore[arg-type]


def test_old_code_building_a_response_needs_no_model() -> None:
    response = agent.ModelResponse(agent.Message.assistant("x"), "end_turn", agent.Usage(1, 2))
    assert response.model == ""
    with pytest.raises(TypeError, match="model"):
        agent.ModelResponse(agent.Message.assistant("x"), model=3)  # type: ignore[arg-type]
