"""OpenAIResponsesEndpoint against a local server that speaks (and checks) the Responses API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.endpoints import (
    EndpointDecodingError,
    EndpointStatusError,
    EndpointTransportError,
    OpenAIResponsesEndpoint,
    by_name,
)
from agentsessions.endpoints._responses_read import Stream
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing.fakes.chat_completions import Call
from agentsessions.testing.fakes.responses import Answer, FakeResponsesAPI
from agentsessions.testing.fakes.server import Fail, RawServer
from tests.support.sse_pieces import assembled

KEY = "sk-responses-test-key"
C = agent.Content
ODD_ARGUMENTS = '{"z":1,"a":[1, 2],"z":3}'  # duplicate keys and mixed spacing: must survive byte for byte
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
CITATION = {"type": "url_citation", "start_index": 0, "end_index": 4, "url": "https://x.test/bern", "title": "Bern"}
SEARCH = {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "ü"}}


@pytest.fixture
def fake() -> Iterator[FakeResponsesAPI]:
    with FakeResponsesAPI(api_key=KEY) as server:
        yield server


def endpoint(fake: FakeResponsesAPI, **options: Any) -> OpenAIResponsesEndpoint:
    return OpenAIResponsesEndpoint("gpt-test", api_key=KEY, base_url=fake.url, backoff=0, **options)


def ask(client: OpenAIResponsesEndpoint, *messages: agent.Message, **fields: Any) -> agent.ModelResponse:
    return client.complete(agent.ModelRequest(fields.pop("system", ""), messages, **fields))


def test_the_request_is_the_responses_wire_format(fake: FakeResponsesAPI) -> None:
    fake.add(Answer("ok"))
    weather = agent.Tool("weather", "The weather in a city.", SCHEMA, lambda city: "sunny")
    transcript = [
        agent.Message.user("Weather?", C.image(media_type="image/png", data=PNG), C.image(url="https://x.test/a.jpg")),
        agent.Message(
            agent.Role.ASSISTANT,
            [
                C.thinking("another provider's", "sig"),
                C.of_text("Checking."),
                C.tool_use("call_1", "weather", ODD_ARGUMENTS),
            ],
        ),
        agent.Message(
            agent.Role.USER,
            [
                C.tool_result("call_1", "sunny"),
                C.document(media_type="application/pdf", data="JVBERi0=", name="r.pdf"),
                C.document(url="https://x.test/a.pdf"),
            ],
        ),
    ]
    ask(endpoint(fake, reasoning="low"), *transcript, system="Be brief.", tools=(weather,), max_tokens=321)
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert fake.requests[0].body == {
        "model": "gpt-test",
        "instructions": "Be brief.",
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "max_output_tokens": 321,
        "reasoning": {"effort": "low"},
        "tools": [
            {"type": "function", "name": "weather", "description": "The weather in a city.", "parameters": SCHEMA}
        ],
        "input": [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Weather?"},
                {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
                {"type": "input_image", "image_url": "https://x.test/a.jpg", "detail": "auto"},
            ]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": ODD_ARGUMENTS},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_file", "filename": "r.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
                {"type": "input_file", "file_url": "https://x.test/a.pdf"},
            ]},
        ],
    }  # fmt: skip
    assert ODD_ARGUMENTS.encode() in fake.raw_bodies[0] or json.dumps(ODD_ARGUMENTS).encode() in fake.raw_bodies[0]


@agent.tool
def screenshot(page: str) -> list[agent.Content]:
    """A screenshot of a page."""
    return [C.of_text(f"screenshot of {page}"), C.image(media_type="image/png", data=PNG)]


def test_media_a_tool_returned_go_inside_its_output(fake: FakeResponsesAPI) -> None:
    fake.add(Answer(calls=[Call("call_s", "screenshot", '{"page": "home"}')]), Answer("a page"))
    session = agent.open("s", MemoryStore())
    result = agent.Runner().run(
        agent.Spec(tools=[screenshot], session=session), [agent.Message.user("look")], endpoint(fake)
    )
    assert result.text == "a page"
    assert fake.requests[1].body["input"][-1] == {
        "type": "function_call_output",
        "call_id": "call_s",
        "output": [
            {"type": "input_text", "text": "screenshot of home"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
        ],
    }


ANSWERS = {
    "text": Answer("Hello there, in pieces: ünïcödé ✓ and \u2028 too."),
    "reasoning and calls": Answer(
        "Two calls.", [Call("call_a", "f", ODD_ARGUMENTS), Call("call_b", "g", "{}")], reasoning="think ✓"
    ),
    "calls only": Answer(calls=[Call("call_e", "now", "")]),
    "a server tool's item": Answer("Found it.", extra=SEARCH),
    "max output tokens": Answer("Cut sh", incomplete="max_output_tokens"),
    "content filter": Answer("", incomplete="content_filter"),
    "refusal": Answer(refusal="I can't help with that."),
    "cached": Answer("cheap", input_tokens=2000, cached_tokens=1536, cache_write_tokens=400),
    "completed without output": Answer("kept", [Call("call_k", "f", "{}")], reasoning="r", bare_completed=True),
    "phase and citations": Answer("Bern it is.", phase="final_answer", annotations=[CITATION]),
}
STOP_REASONS = [
    "end_turn", "tool_use", "tool_use", "end_turn", "max_tokens", "content_filter", "end_turn", "end_turn", "tool_use",
    "end_turn",
]  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "stop_reason"), list(zip(ANSWERS.values(), STOP_REASONS, strict=True)), ids=list(ANSWERS)
)
def test_streaming_and_not_give_the_same_response(fake: FakeResponsesAPI, answer: Answer, stop_reason: str) -> None:
    fake.add(answer, answer)
    whole = ask(endpoint(fake), agent.Message.user("Hi"))
    texts: list[str] = []
    streamed = ask(endpoint(fake, stream=True), agent.Message.user("Hi"), on_text=texts.append)
    # The two answers carry their own ids (rs_0001, rs_0002): compare with them made equal.
    assert _same_ids(streamed) == _same_ids(whole)
    assert whole.stop_reason == stop_reason
    assert "".join(texts) == whole.message.text
    assert fake.requests[1].body["stream"] is True and "stream" not in fake.requests[0].body


def _same_ids(response: agent.ModelResponse) -> agent.ModelResponse:
    blocks = [
        C.raw(block.name, block.data.replace("0002", "0001"), text=block.text) if block.type is agent.ContentType.RAW
        else block
        for block in response.message.content
    ]  # fmt: skip
    return agent.ModelResponse(agent.Message(agent.Role.ASSISTANT, blocks), response.stop_reason, response.usage)


def test_the_answer_maps_onto_blocks_in_output_order(fake: FakeResponsesAPI) -> None:
    fake.add(Answer("Checking.", [Call("call_9", "weather", ODD_ARGUMENTS)], reasoning="hmm", extra=SEARCH,
                    input_tokens=42, output_tokens=17, cached_tokens=30, cache_write_tokens=10))  # fmt: skip
    response = ask(endpoint(fake), agent.Message.user("Weather?"))
    reasoning = {"id": "rs_0001", "type": "reasoning", "summary": [{"type": "summary_text", "text": "hmm"}],
                 "encrypted_content": "gAAAAB0001-sealed-thoughts=="}  # fmt: skip
    assert response == agent.ModelResponse(
        agent.Message(
            agent.Role.ASSISTANT,
            [
                C.raw("openai", json.dumps(reasoning, separators=(",", ":"))),
                C.raw("openai", json.dumps(SEARCH, separators=(",", ":"), ensure_ascii=False)),
                C.of_text("Checking."),
                C.tool_use("call_9", "weather", ODD_ARGUMENTS),
            ],
        ),
        stop_reason="tool_use",
        usage=agent.Usage(2, 17, 30, 10),
        model="gpt-test",
    )


@agent.tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_reasoning_goes_back_verbatim_in_place_across_a_tool_run(fake: FakeResponsesAPI, stream: bool) -> None:
    fake.add(
        Answer("Let me look.", [Call("call_w", "weather", '{"city": "Zürich"}')], reasoning="need the weather"),
        Answer("It is sunny.", reasoning="done"),
    )
    spec = agent.Spec(tools=[weather], session=agent.open("s", MemoryStore()))
    result = agent.Runner().run(spec, [agent.Message.user("go")], endpoint(fake, stream=stream))
    assert result.text == "It is sunny."
    sent = fake.requests[1].body["input"]
    assert [item.get("type") for item in sent] == [
        "message", "reasoning", "message", "function_call", "function_call_output"
    ]  # fmt: skip
    assert sent[1] == fake.reasoning_items["rs_0001"]  # the encrypted content came back as it was given
    assert fake.connections == 1


def test_a_call_sent_back_without_its_reasoning_is_refused_as_the_api_does(fake: FakeResponsesAPI) -> None:
    fake.add(Answer(calls=[Call("call_w", "weather", '{"city": "Bern"}')], reasoning="r"))
    gpt = endpoint(fake)
    first = ask(gpt, agent.Message.user("go"))
    without = agent.Message(
        agent.Role.ASSISTANT, [b for b in first.message.content if b.type is not agent.ContentType.RAW]
    )
    with pytest.raises(EndpointStatusError) as caught:
        ask(gpt, agent.Message.user("go"), without, agent.Message(agent.Role.USER, [C.tool_result("call_w", "x")]))
    assert caught.value.status == 400
    assert "provided without its required 'reasoning' item: 'rs_0001'" in str(caught.value)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_calls_share_one_connection(fake: FakeResponsesAPI, stream: bool) -> None:
    fake.add(*[Answer("hello", [Call("call_1", "f", '{"a": 1}')], reasoning="r")] * 4)
    with endpoint(fake, stream=stream) as gpt:
        for _ in range(4):
            assert ask(gpt, agent.Message.user("x")).message.text == "hello"
    assert (fake.attempts, fake.connections) == (4, 1)


def test_the_text_goes_to_on_text_as_it_arrives(fake: FakeResponsesAPI) -> None:
    fake.add(Answer("abcdefghij"))
    texts: list[str] = []
    ask(endpoint(fake, stream=True), agent.Message.user("x"), on_text=texts.append)
    assert texts == ["abcd", "efgh", "ij"]


def test_an_error_event_is_raised_as_the_provider_gave_it(fake: FakeResponsesAPI) -> None:
    fake.add(Answer("partial answer", error_after=5))
    with pytest.raises(EndpointStatusError) as caught:
        ask(endpoint(fake, stream=True), agent.Message.user("x"))
    assert (caught.value.type, caught.value.message) == ("server_error", "The server had an error.")
    assert caught.value.request_id == "req_fake0001"


def test_a_failed_response_is_raised_with_its_error(fake: FakeResponsesAPI) -> None:
    fake.add(Answer("partial answer", fail_after=4))
    with pytest.raises(EndpointStatusError) as caught:
        ask(endpoint(fake, stream=True), agent.Message.user("x"))
    assert (caught.value.type, caught.value.message) == ("server_error", "Something went wrong while processing.")


def test_a_stream_cut_before_its_end_is_a_transport_error(fake: FakeResponsesAPI) -> None:
    fake.add(Answer("partial answer", [Call("c", "f", "{}")], cut_after=6))
    with pytest.raises(EndpointTransportError, match="Response ended prematurely"):
        ask(endpoint(fake, stream=True, max_retries=0), agent.Message.user("x"))
    # Whole events, then the body's clean end, but never response.completed:
    created = _event({"type": "response.created", "response": {"id": "r", "output": []}})
    delta = {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "content": []}}
    with RawServer(200, created + _event(delta), {"content-type": "text/event-stream"}, path="/responses") as server:
        client = OpenAIResponsesEndpoint("m", api_key="k", base_url=server.origin, stream=True, max_retries=0)
        with pytest.raises(EndpointTransportError, match=r"the stream from .* ended before response\.completed"):
            client.complete(agent.ModelRequest("", (agent.Message.user("q"),)))


def test_a_rate_limit_is_retried_and_the_answer_read(fake: FakeResponsesAPI) -> None:
    fake.add(Fail(429, "rate_limit_exceeded", "Slow down.", retry_after="0"), Answer("at last"))
    assert ask(endpoint(fake, stream=True), agent.Message.user("x")).message.text == "at last"
    assert fake.attempts == 2


def test_error_answers_keep_the_providers_message(fake: FakeResponsesAPI) -> None:
    fake.add(Fail(400, "invalid_request_error", "Invalid 'input[0]'."))
    with pytest.raises(EndpointStatusError) as caught:
        ask(endpoint(fake), agent.Message.user("x"))
    assert (caught.value.status, caught.value.type, caught.value.message) == (
        400,
        "invalid_request_error",
        "Invalid 'input[0]'.",
    )
    with pytest.raises(EndpointStatusError) as wrong_key:
        OpenAIResponsesEndpoint("m", api_key="sk-wrong-key-0000", base_url=fake.url).complete(
            agent.ModelRequest("", (agent.Message.user("x"),))
        )
    assert wrong_key.value.status == 401 and "sk-wrong-key-0000" not in str(wrong_key.value)


def test_a_function_call_output_without_its_call_is_refused(fake: FakeResponsesAPI) -> None:
    with pytest.raises(EndpointStatusError, match="No tool call found for function call output with call_id nope"):
        ask(endpoint(fake), agent.Message(agent.Role.USER, [C.tool_result("nope", "x")]))


@pytest.mark.parametrize("key", ["model", "input", "instructions", "tools", "stream", "store", "include",
                                 "max_output_tokens", "reasoning"])  # fmt: skip
def test_extra_body_cannot_set_what_the_endpoint_writes(key: str) -> None:
    with pytest.raises(ValueError, match=f"extra_body cannot set '{key}': OpenAIResponsesEndpoint writes it from"):
        OpenAIResponsesEndpoint("m", api_key="k", extra_body={key: 1})


def test_extra_body_and_a_reasoning_object_are_sent(fake: FakeResponsesAPI) -> None:
    fake.add(Answer("ok"))
    gpt = endpoint(fake, reasoning={"effort": "high", "summary": "auto"}, extra_body={"tool_choice": "auto"})
    ask(gpt, agent.Message.user("x"))
    body = fake.requests[0].body
    assert (body["reasoning"], body["tool_choice"]) == ({"effort": "high", "summary": "auto"}, "auto")
    with pytest.raises(TypeError, match="reasoning is the API's reasoning object"):
        OpenAIResponsesEndpoint("m", api_key="k", reasoning=3)  # type: ignore[arg-type]


def test_by_name_makes_one() -> None:
    endpoint = by_name("openai-responses:gpt-5", api_key="k")
    assert isinstance(endpoint, OpenAIResponsesEndpoint) and endpoint.model == "gpt-5"
    assert endpoint.base_url == "https://api.openai.com/v1"


def test_other_providers_raw_blocks_are_left_out_and_their_text_kept(fake: FakeResponsesAPI) -> None:
    fake.add(Answer("ok"))
    reply = agent.Message(agent.Role.ASSISTANT, [C.raw("anthropic", '{"type":"x"}', text="cited"), C.of_text("!")])
    ask(endpoint(fake), agent.Message.user("x"), reply, agent.Message.user("y"))
    assert fake.requests[0].body["input"][1] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "cited"}, {"type": "output_text", "text": "!"}],
    }


def _event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


MALFORMED_STREAMS: dict[str, list[dict[str, Any]]] = {
    "a delta for an item never added": [
        {"type": "response.output_text.delta", "output_index": 3, "content_index": 0, "delta": "x"}
    ],
    "a count that is not a number": [
        {"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": "9"}}}
    ],
    "an item without a type": [{"type": "response.output_item.added", "output_index": 0, "item": {"id": "x"}}],
    "arguments that are not text": [
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call"}},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": 5},
    ],
}


@pytest.mark.parametrize("name", MALFORMED_STREAMS)
def test_a_stream_that_is_not_the_apis_format_is_a_decoding_error(name: str) -> None:
    created = {"type": "response.created", "response": {"id": "r", "status": "in_progress", "output": []}}
    completed = {"type": "response.completed", "response": {"id": "r", "status": "completed", "output": []}}
    raw = b"".join(_event(data) for data in [created, *MALFORMED_STREAMS[name], completed])
    with RawServer(200, raw, {"content-type": "text/event-stream"}, path="/responses") as server:
        client = OpenAIResponsesEndpoint("m", api_key="k", base_url=server.origin, stream=True, max_retries=0)
        with pytest.raises(EndpointDecodingError, match="OpenAI sent an answer this library cannot read"):
            client.complete(agent.ModelRequest("", (agent.Message.user("q"),)))


def test_a_whole_answer_that_failed_is_a_status_error() -> None:
    failed = {"id": "r", "status": "failed", "output": [], "error": {"code": "server_error", "message": "It broke."}}
    with RawServer(200, json.dumps(failed).encode(), {"content-type": "application/json"}, path="/responses") as server:
        client = OpenAIResponsesEndpoint("m", api_key="k", base_url=server.origin, max_retries=0)
        with pytest.raises(EndpointStatusError) as caught:
            client.complete(agent.ModelRequest("", (agent.Message.user("q"),)))
    assert (caught.value.type, caught.value.message) == ("server_error", "It broke.")


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_message_with_a_phase_or_citations_goes_back_as_it_came(fake: FakeResponsesAPI, stream: bool) -> None:
    fake.add(Answer("Working on it.", phase="commentary", annotations=[CITATION]), Answer("ok"))
    gpt = endpoint(fake, stream=stream)
    first = ask(gpt, agent.Message.user("go"))
    assert first.message.text == "Working on it."
    [block] = first.message.content
    assert (block.type, block.name, block.text) == (agent.ContentType.RAW, "openai", "Working on it.")
    ask(gpt, agent.Message.user("go"), first.message, agent.Message.user("and?"))
    sent = fake.requests[1].body["input"][1]
    assert (sent["phase"], sent["content"][0]["annotations"]) == ("commentary", [CITATION])
    assert block.data.encode() in fake.raw_bodies[1]


def test_an_added_event_without_its_item_is_skipped_as_the_sdk_skips_it() -> None:
    item = {"id": "m", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}
    stream: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "r", "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": None},
        {"type": "response.output_item.done", "output_index": 1, "item": item},
        {"type": "response.completed", "response": {"id": "r", "status": "completed", "output": None}},
    ]
    response = assembled("OpenAI", Stream(), "response.completed", [b"".join(map(_event, stream))])
    assert (response.message.text, response.stop_reason) == ("hi", "end_turn")
