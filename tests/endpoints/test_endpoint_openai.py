"""OpenAIEndpoint against a local server that speaks (and checks) the Chat Completions API."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import agentsessions as agent
from agentsessions import events as ev
from agentsessions.endpoints import EndpointError, OpenAIEndpoint
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing.fakes.chat_completions import TOOL_WITHOUT_CALL, Call, FakeChatCompletionsAPI, Reply, mask

KEY = "sk-proj-test-8c7b6a5f4e3d-never-print-me"
ODD_ARGUMENTS = '{"z":1,"a":[1, 2],"z":3}'  # duplicate keys and mixed spacing: must survive byte for byte
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture
def fake() -> Iterator[FakeChatCompletionsAPI]:
    with FakeChatCompletionsAPI(api_key=KEY) as server:
        yield server


def endpoint(fake: FakeChatCompletionsAPI, **options: Any) -> OpenAIEndpoint:
    return OpenAIEndpoint("gpt-test", api_key=KEY, base_url=fake.url, backoff=0, **options)


def ask(endpoint: OpenAIEndpoint, *messages: agent.Message, **fields: Any) -> agent.ModelResponse:
    return endpoint.complete(agent.ModelRequest(fields.pop("system", ""), messages, **fields))


def test_the_request_is_the_chat_completions_wire_format(fake: FakeChatCompletionsAPI) -> None:
    fake.add(Reply("ok"))
    weather = agent.Tool("weather", "The weather in a city.", WEATHER_SCHEMA, lambda city: "sunny")
    transcript = [
        agent.Message(agent.Role.USER, [agent.Content.of_text("Weather?"), agent.Content.of_text("In °C.")]),
        agent.Message(
            agent.Role.ASSISTANT,
            [
                agent.Content.tool_use("call_1", "weather", ODD_ARGUMENTS),
                agent.Content.tool_use("call_2", "weather", "{}"),
            ],
        ),
        agent.Message(
            agent.Role.USER,
            [
                agent.Content.tool_result("call_1", "sunny"),
                agent.Content.of_text("steer: and Paris?"),  # rides along with the results...
                agent.Content.tool_result("call_2", "boom", is_error=True),
            ],
        ),
    ]
    ask(endpoint(fake), *transcript, system="Be brief.", tools=(weather,), max_tokens=321)

    seen = fake.requests[0]
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.body == {
        "model": "gpt-test",
        "max_completion_tokens": 321,
        "tools": [{"type": "function", "function": {"name": "weather", "description": "The weather in a city.",
                                                    "parameters": WEATHER_SCHEMA}}],
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}, {"type": "text", "text": "In °C."}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ODD_ARGUMENTS}},
                {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": "boom"},
            {"role": "user", "content": "steer: and Paris?"},  # ...and goes after them
        ],
    }  # fmt: skip


def test_the_answer_maps_onto_a_model_response(fake: FakeChatCompletionsAPI) -> None:
    fake.add(Reply("Checking.", [Call("call_9", "weather", ODD_ARGUMENTS)], prompt_tokens=42, completion_tokens=17))
    response = ask(endpoint(fake), agent.Message.user("Weather?"))
    assert response == agent.ModelResponse(
        agent.Message(
            agent.Role.ASSISTANT,
            [agent.Content.of_text("Checking."), agent.Content.tool_use("call_9", "weather", ODD_ARGUMENTS)],
        ),
        stop_reason="tool_use",
        usage=agent.Usage(42, 17),
        model="gpt-test",
    )


REPLIES = {
    "text": Reply("Hello there, in pieces: ünïcödé ✓ and \u2028 too."),
    "tool calls": Reply("Two calls.", [Call("call_a", "f", ODD_ARGUMENTS), Call("call_b", "g", '{"s": "xxxxxxxx"}')]),
    "calls only": Reply(None, [Call("call_e", "now", "")]),
    "length": Reply("Cut sh", finish_reason="length"),
    "content filter": Reply("", finish_reason="content_filter"),
    "stop with calls": Reply(None, [Call("call_s", "f", "{}")], finish_reason="stop"),
    "refusal": Reply(None, refusal="I can't help with that."),
}
STOP_REASONS = ["end_turn", "tool_use", "tool_use", "max_tokens", "content_filter", "tool_use", "end_turn"]


@pytest.mark.parametrize(
    ("reply", "stop_reason"), list(zip(REPLIES.values(), STOP_REASONS, strict=True)), ids=list(REPLIES)
)
def test_streaming_and_not_give_the_same_response(fake: FakeChatCompletionsAPI, reply: Reply, stop_reason: str) -> None:
    fake.add(reply, reply)
    whole = ask(endpoint(fake), agent.Message.user("Hi"))
    pieces: list[str] = []
    streamed = ask(endpoint(fake, stream=True), agent.Message.user("Hi"), on_text=pieces.append)
    assert streamed == whole
    assert whole.stop_reason == stop_reason
    assert "".join(pieces) == whole.message.text
    assert fake.requests[1].body["stream_options"] == {"include_usage": True}
    assert "stream" not in fake.requests[0].body and "stream_options" not in fake.requests[0].body


def test_a_server_repeating_each_calls_id_and_name_is_read_once(fake: FakeChatCompletionsAPI) -> None:
    calls = [Call("call_1", "get", '{"city": "Zürich", "days": 3}'), Call("call_2", "put", "{}")]
    fake.add(Reply(None, calls), Reply(None, calls, repeat_call_head=True))
    whole = ask(endpoint(fake), agent.Message.user("x"))
    streamed = ask(endpoint(fake, stream=True), agent.Message.user("x"))
    assert streamed == whole
    assert [(use.id, use.name, use.input) for use in streamed.message.tool_uses] == [
        ("call_1", "get", '{"city": "Zürich", "days": 3}'),
        ("call_2", "put", "{}"),
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_calls_share_one_connection(fake: FakeChatCompletionsAPI, stream: bool) -> None:
    # A streamed answer is read past [DONE] to its chunked body's end, so its connection is reused.
    fake.add(*[Reply("hello", [Call("call_1", "f", '{"a": 1}')])] * 4)
    with endpoint(fake, stream=stream) as gpt:
        for _ in range(4):
            assert ask(gpt, agent.Message.user("x")).message.text == "hello"
    assert (fake.attempts, fake.connections) == (4, 1)


def test_the_text_goes_to_on_text_as_it_arrives(fake: FakeChatCompletionsAPI) -> None:
    fake.add(Reply("abcdefghij"))
    pieces: list[str] = []
    ask(endpoint(fake, stream=True), agent.Message.user("x"), on_text=pieces.append)
    assert pieces == ["abcd", "efgh", "ij"]


def test_an_error_chunk_in_the_stream_is_raised_as_the_provider_gave_it(fake: FakeChatCompletionsAPI) -> None:
    fake.add(Reply("partial answer", error_after=2))
    with pytest.raises(EndpointError) as caught:
        ask(endpoint(fake, stream=True), agent.Message.user("x"))
    assert caught.value.type == "server_error"
    assert caught.value.message == "The server had an error while processing your request."


def test_a_stream_without_done_is_an_error_without_status(fake: FakeChatCompletionsAPI) -> None:
    fake.add(Reply("partial answer", cut_after=3))
    with pytest.raises(EndpointError, match=r"\[DONE\]|failed") as caught:
        ask(endpoint(fake, stream=True, max_retries=0), agent.Message.user("x"))
    assert caught.value.status == 0


def test_a_tool_message_without_its_call_is_the_api_s_error(fake: FakeChatCompletionsAPI) -> None:
    transcript = [agent.Message.user("Hi"), agent.Message(agent.Role.USER, [agent.Content.tool_result("call_x", "")])]
    with pytest.raises(EndpointError) as caught:
        ask(endpoint(fake), *transcript)
    assert (caught.value.status, caught.value.type, caught.value.message) == (
        400,
        "invalid_request_error",
        TOOL_WITHOUT_CALL,
    )


def test_a_wrong_key_is_echoed_masked_and_never_whole(fake: FakeChatCompletionsAPI) -> None:
    wrong = "sk-wrong-key-that-is-long-enough-1234"
    with pytest.raises(EndpointError) as caught:
        ask(OpenAIEndpoint("gpt-test", api_key=wrong, base_url=fake.url), agent.Message.user("x"))
    assert caught.value.status == 401 and caught.value.type == "invalid_request_error"
    assert mask(wrong) in caught.value.message and wrong not in str(caught.value)


def test_the_key_comes_from_the_environment(fake: FakeChatCompletionsAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    fake.add(Reply("ok"))
    assert ask(OpenAIEndpoint("gpt-test", base_url=fake.url), agent.Message.user("x")).message.text == "ok"
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIEndpoint("gpt-test")


def test_the_token_limit_can_go_under_its_older_name(fake: FakeChatCompletionsAPI) -> None:
    fake.add(Reply("ok"))
    ask(endpoint(fake, max_tokens=77, max_tokens_param="max_tokens"), agent.Message.user("x"))
    assert fake.requests[0].body["max_tokens"] == 77 and "max_completion_tokens" not in fake.requests[0].body


def test_the_repr_shows_the_model_and_url_only(fake: FakeChatCompletionsAPI) -> None:
    assert repr(endpoint(fake)) == f"OpenAIEndpoint(model='gpt-test', base_url='{fake.url}')"


def run_agent(stream: bool) -> tuple[agent.Result, list[ev.Event], FakeChatCompletionsAPI]:
    """A ReAct run with a tool and two steers (one before the run, one while the tool runs)."""
    session = agent.open("conversation", MemoryStore())

    @agent.tool
    def weather(city: str) -> str:
        """The weather in a city."""
        session.steer("And Paris?")
        return f"{city}: 21 °C, sunny"

    script = [
        Reply("Let me look.", [Call("call_01", "weather", '{"city":"Zürich"}')]),
        Reply("Zürich is sunny at 21 °C; for Paris ask again."),
    ]
    events: list[ev.Event] = []
    session.steer("In Celsius, please.")
    with FakeChatCompletionsAPI(script, api_key=KEY) as fake:
        spec = agent.Spec(tools=[weather], system="You report weather.", session=session)
        result = agent.Runner().run(
            spec, [agent.Message.user("Weather in Zürich?")], endpoint(fake, stream=stream), events=events.append
        )
    return result, events, fake


def test_a_react_run_streams_and_not_to_the_same_transcript() -> None:
    (whole, whole_events, _), (streamed, events, fake) = run_agent(stream=False), run_agent(stream=True)
    assert streamed.messages == whole.messages
    assert streamed.text == "Zürich is sunny at 21 °C; for Paris ask again."
    assert streamed.usage == whole.usage == agent.Usage(26, 10)
    assert streamed.messages[1].content[1].input == '{"city":"Zürich"}'
    deltas = [e for e in events if isinstance(e, ev.TextDelta)]
    assert "".join(d.text for d in deltas if d.step == 1) == "Let me look."
    assert "".join(d.text for d in deltas if d.step == 2) == streamed.text
    assert not [e for e in whole_events if isinstance(e, ev.TextDelta)]
    assert fake.requests[1].body["messages"][1:] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Zürich?"},
                                     {"type": "text", "text": "In Celsius, please."}]},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "call_01", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Zürich"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_01", "content": "Zürich: 21 °C, sunny"},
        {"role": "user", "content": "And Paris?"},
    ]  # fmt: skip
