"""AnthropicEndpoint against a local server that speaks (and checks) the Messages API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import agentsessions as agent
from agentsessions import events as ev
from agentsessions.endpoints import AnthropicEndpoint, EndpointError
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing.fakes.messages import PREFILL_REFUSED, FakeMessagesAPI, Reply, text, tool_use

KEY = "sk-ant-test-5f0c1d2e3b4a-never-print-me"
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture
def fake() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(api_key=KEY) as server:
        yield server


def endpoint(fake: FakeMessagesAPI, **options: Any) -> AnthropicEndpoint:
    return AnthropicEndpoint("claude-test", api_key=KEY, base_url=fake.origin, backoff=0, **options)


def ask(endpoint: AnthropicEndpoint, *messages: agent.Message, **fields: Any) -> agent.ModelResponse:
    return endpoint.complete(agent.ModelRequest(fields.pop("system", ""), messages, **fields))


def test_the_request_is_the_messages_api_wire_format(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("ok")]))
    weather = agent.Tool("weather", "The weather in a city.", WEATHER_SCHEMA, lambda city: "sunny")
    transcript = [
        agent.Message.user("Weather in Zürich?"),
        agent.Message(
            agent.Role.ASSISTANT,
            [agent.Content.of_text(""), agent.Content.tool_use("toolu_1", "weather", '{"z":1,"a":[1, 2],"z":3}')],
        ),
        agent.Message(agent.Role.USER, [agent.Content.tool_result("toolu_1", "boom", is_error=True)]),
        agent.Message.user("steer: in Celsius"),  # same role again: merged into the message before
    ]
    ask(endpoint(fake, cache=False), *transcript, system="Be brief.", tools=(weather,), max_tokens=321)

    seen = fake.requests[0]
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.headers["content-type"] == "application/json"
    assert seen.body == {
        "model": "claude-test",
        "max_tokens": 321,
        "system": "Be brief.",
        "tools": [{"name": "weather", "description": "The weather in a city.", "input_schema": WEATHER_SCHEMA}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Zürich?"}]},
            # The empty text block is left out (the API refuses it); the input goes as an object.
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "weather",
                                                "input": {"z": 3, "a": [1, 2]}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "boom", "is_error": True},
                {"type": "text", "text": "steer: in Celsius"},
            ]},
        ],
    }  # fmt: skip


def test_the_answer_maps_onto_a_model_response(fake: FakeMessagesAPI) -> None:
    fake.add(
        Reply(
            [text("Checking."), tool_use("toolu_9", "weather", {"city": "Zürich", "days": [1, 2]})],
            input_tokens=42,
            output_tokens=17,
        )
    )
    response = ask(endpoint(fake), agent.Message.user("Weather?"))
    assert response == agent.ModelResponse(
        agent.Message(
            agent.Role.ASSISTANT,
            [
                agent.Content.of_text("Checking."),
                agent.Content.tool_use("toolu_9", "weather", '{"city": "Zürich", "days": [1, 2]}'),
            ],
        ),
        stop_reason="tool_use",
        usage=agent.Usage(42, 17),
        model="claude-test",
    )


REPLIES = {
    "text": Reply([text("Hello there, in pieces: ünïcödé ✓ and \u2028 too.")]),
    "tool calls": Reply(
        [
            text("Two calls."),
            tool_use("toolu_a", "f", {"q": 'é"\\', "n": [1, {"x": None}]}),
            tool_use("toolu_b", "g", {"s": "x" * 50}),
        ]
    ),
    "empty input": Reply([tool_use("toolu_e", "now", {})]),
    "max tokens": Reply([text("Cut sh")], stop_reason="max_tokens"),
    "no content": Reply([], stop_reason="end_turn"),
}


@pytest.mark.parametrize("reply", REPLIES.values(), ids=REPLIES.keys())
def test_streaming_and_not_give_the_same_response(fake: FakeMessagesAPI, reply: Reply) -> None:
    fake.add(reply, reply)
    whole = ask(endpoint(fake), agent.Message.user("Hi"))
    pieces: list[str] = []
    streamed = ask(endpoint(fake, stream=True), agent.Message.user("Hi"), on_text=pieces.append)
    assert streamed == whole
    assert "".join(pieces) == whole.message.text
    assert fake.requests[1].body["stream"] is True and "stream" not in fake.requests[0].body


def test_a_streamed_tool_input_is_exactly_the_concatenated_pieces(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([tool_use("toolu_1", "f", {"b": 1, "a": "ü"})]), Reply([tool_use("toolu_2", "f", {})]))
    streaming = endpoint(fake, stream=True)
    assert ask(streaming, agent.Message.user("x")).message.content[0].input == '{"b": 1, "a": "ü"}'
    assert ask(streaming, agent.Message.user("x")).message.content[0].input == "{}"  # no pieces at all


def answered(transcript: list[agent.Message]) -> list[agent.Message]:
    """``transcript``, which ends with tool calls, followed by a result for each."""
    results = [agent.Content.tool_result(use.id, "done") for use in transcript[-1].tool_uses]
    return [*transcript, agent.Message(agent.Role.USER, results)]


def test_non_finite_numbers_in_a_tool_input_go_as_null(fake: FakeMessagesAPI) -> None:
    # Python's json writes inf and nan as Infinity and NaN, which no JSON parser takes:
    # the fake, like the API, would refuse the whole request.
    fake.add(Reply([text("ok")]))
    odd = '{"x": 1e999, "y": -1e999, "n": NaN, "i": -Infinity, "k": 1.5, "deep": [{"z": 2e400}]}'
    call = agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("toolu_1", "f", odd)])
    assert ask(endpoint(fake), *answered([agent.Message.user("x"), call])).message.text == "ok"
    sent = fake.requests[0].body["messages"][1]["content"][0]["input"]
    assert sent == {"x": None, "y": None, "n": None, "i": None, "k": 1.5, "deep": [{"z": None}]}


def test_a_models_non_finite_number_comes_back_as_json_that_can_be_sent(fake: FakeMessagesAPI) -> None:
    # The model wrote {"x": 1e999}: valid JSON, but no double holds it (Python reads inf).
    reply = Reply([tool_use("toolu_1", "f", {"x": float("inf"), "k": 1})])
    fake.add(reply, reply, Reply([text("ok")]), Reply([text("ok")]))
    whole = ask(endpoint(fake), agent.Message.user("x")).message
    streamed = ask(endpoint(fake, stream=True), agent.Message.user("x")).message
    assert whole.content[0].input == '{"x": null, "k": 1}'  # only the parsed object arrived
    assert streamed.content[0].input == '{"x": 1e999, "k": 1}'  # the model's own text, verbatim
    for message in (whole, streamed):
        assert ask(endpoint(fake), *answered([agent.Message.user("x"), message])).message.text == "ok"
    assert [seen.body["messages"][1]["content"][0]["input"] for seen in fake.requests[2:]] == [{"x": None, "k": 1}] * 2


def test_without_message_delta_no_stop_reason_is_made_up(fake: FakeMessagesAPI) -> None:
    reply = Reply([text("hi")], silent_stop=True)
    fake.add(reply, reply)
    whole = ask(endpoint(fake), agent.Message.user("x"))
    streamed = ask(endpoint(fake, stream=True), agent.Message.user("x"))
    assert whole.message == streamed.message
    assert whole.stop_reason == streamed.stop_reason == ""


@pytest.mark.parametrize("stop_reason", ["refusal", "pause_turn", "stop_sequence"])
def test_the_stop_reason_is_the_providers_own(fake: FakeMessagesAPI, stop_reason: str) -> None:
    fake.add(Reply([text("hi")], stop_reason=stop_reason), Reply([text("hi")], stop_reason=stop_reason))
    assert ask(endpoint(fake), agent.Message.user("x")).stop_reason == stop_reason
    assert ask(endpoint(fake, stream=True), agent.Message.user("x")).stop_reason == stop_reason


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_calls_share_one_connection(fake: FakeMessagesAPI, stream: bool) -> None:
    # A streamed answer is read to its chunked body's end, so its connection goes back to the pool.
    fake.add(*[Reply([text("hello"), tool_use("toolu_1", "f", {"a": 1})])] * 4)
    with endpoint(fake, stream=stream) as claude:
        for _ in range(4):
            assert ask(claude, agent.Message.user("x")).message.text == "hello"
    assert (fake.attempts, fake.connections) == (4, 1)


def test_the_text_goes_to_on_text_as_it_arrives(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("abcdefghij")]))
    pieces: list[str] = []
    ask(endpoint(fake, stream=True), agent.Message.user("x"), on_text=pieces.append)
    assert pieces == ["abcd", "efgh", "ij"]


def test_an_error_event_in_the_stream_is_raised_as_the_provider_gave_it(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("partial answer")], error_after=4))
    with pytest.raises(EndpointError) as caught:
        ask(endpoint(fake, stream=True), agent.Message.user("x"))
    assert (caught.value.type, caught.value.message) == ("overloaded_error", "Overloaded")


def test_a_stream_cut_short_is_an_error_without_status(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("partial answer")], cut_after=4))
    with pytest.raises(EndpointError) as caught:
        ask(endpoint(fake, stream=True, max_retries=0), agent.Message.user("x"))
    assert caught.value.status == 0


def test_a_listener_error_is_not_disguised_as_an_endpoint_error(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("hello")]))

    def listener(_: str) -> None:
        raise KeyError("the listener's own bug")

    with pytest.raises(KeyError, match="listener's own bug"):
        ask(endpoint(fake, stream=True), agent.Message.user("x"), on_text=listener)


def test_prefill_refused_by_the_model_reaches_the_caller_intact() -> None:
    with FakeMessagesAPI(api_key=KEY, prefill=False) as fake:
        transcript = [agent.Message.user("Hi"), agent.Message.assistant("Hello")]
        with pytest.raises(EndpointError) as caught:
            ask(endpoint(fake), *transcript)
    assert (caught.value.status, caught.value.type) == (400, "invalid_request_error")
    assert caught.value.message == PREFILL_REFUSED
    assert fake.attempts == 1  # a 400 is never retried


def test_a_tool_result_without_its_call_is_the_api_s_error(fake: FakeMessagesAPI) -> None:
    transcript = [agent.Message.user("Hi"), agent.Message(agent.Role.USER, [agent.Content.tool_result("toolu_x", "")])]
    with pytest.raises(EndpointError, match="unexpected `tool_use_id` found in `tool_result` blocks: toolu_x"):
        ask(endpoint(fake), agent.Message.assistant("Hello"), *transcript)


def test_a_wrong_key_is_an_authentication_error(fake: FakeMessagesAPI) -> None:
    wrong = AnthropicEndpoint("claude-test", api_key="sk-ant-wrong", base_url=fake.origin)
    with pytest.raises(EndpointError) as caught:
        ask(wrong, agent.Message.user("x"))
    assert (caught.value.status, caught.value.type, caught.value.message) == (
        401,
        "authentication_error",
        "invalid x-api-key",
    )


def test_the_key_comes_from_the_environment(fake: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    fake.add(Reply([text("ok")]))
    assert ask(AnthropicEndpoint("claude-test", base_url=fake.origin), agent.Message.user("x")).message.text == "ok"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        AnthropicEndpoint("claude-test")


def test_max_tokens_on_the_endpoint_replaces_the_request_s(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("ok")]))
    ask(endpoint(fake, max_tokens=77), agent.Message.user("x"), max_tokens=4096)
    assert fake.requests[0].body["max_tokens"] == 77


def test_the_repr_shows_the_model_and_url_only(fake: FakeMessagesAPI) -> None:
    assert repr(endpoint(fake)) == f"AnthropicEndpoint(model='claude-test', base_url='{fake.origin}')"


def run_agent(stream: bool) -> tuple[agent.Result, list[ev.Event], FakeMessagesAPI]:
    """A ReAct run with a tool and two steers (one before the run, one while the tool runs)."""
    session = agent.open("conversation", MemoryStore())

    @agent.tool
    def weather(city: str) -> str:
        """The weather in a city."""
        session.steer("And Paris?")
        return f"{city}: 21 °C, sunny"

    script = [
        Reply([text("Let me look."), tool_use("toolu_01", "weather", {"city": "Zürich"})]),
        Reply([text("Zürich is sunny at 21 °C; for Paris ask again.")]),
    ]
    events: list[ev.Event] = []
    session.steer("In Celsius, please.")
    with FakeMessagesAPI(script, api_key=KEY) as fake:
        spec = agent.Spec(tools=[weather], system="You report weather.", session=session)
        result = agent.Runner().run(
            spec, [agent.Message.user("Weather in Zürich?")], endpoint(fake, stream=stream), events=events.append
        )
    return result, events, fake


def test_a_react_run_streams_and_not_to_the_same_transcript() -> None:
    (whole, whole_events, _), (streamed, events, fake) = run_agent(stream=False), run_agent(stream=True)
    assert streamed.messages == whole.messages
    assert streamed.text == "Zürich is sunny at 21 °C; for Paris ask again."
    assert streamed.usage == whole.usage == agent.Usage(22, 14)
    assert streamed.messages[1].content[1].input == json.dumps({"city": "Zürich"}, ensure_ascii=False)
    deltas = [e for e in events if isinstance(e, ev.TextDelta)]
    assert "".join(d.text for d in deltas if d.step == 1) == "Let me look."
    assert "".join(d.text for d in deltas if d.step == 2) == streamed.text
    assert not [e for e in whole_events if isinstance(e, ev.TextDelta)]
    # The steer given while the tool ran rides after the tool result, in the same user message.
    # The cache breakpoints sit where the first request ended and where this one ends.
    cached = {"cache_control": {"type": "ephemeral"}}
    assert fake.requests[1].body["messages"][0]["content"][1] == {
        "type": "text",
        "text": "In Celsius, please.",
        **cached,
    }
    assert fake.requests[1].body["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Zürich: 21 °C, sunny"},
        {"type": "text", "text": "And Paris?", **cached},
    ]}  # fmt: skip
