"""OpenAIEndpoint and the whole transcript: images, a tool's media, cached tokens, reasoning, options, bad streams."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.endpoints import EndpointDecodingError, OpenAIEndpoint
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing.fakes.chat_completions import Call, FakeChatCompletionsAPI, Reply
from agentsessions.testing.fakes.server import FakeServer, Handler, RawServer

KEY = "sk-openai-blocks"
C = agent.Content
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.fixture
def fake() -> Iterator[FakeChatCompletionsAPI]:
    with FakeChatCompletionsAPI(api_key=KEY) as server:
        yield server


def endpoint(fake: FakeChatCompletionsAPI, **options: Any) -> OpenAIEndpoint:
    return OpenAIEndpoint("gpt-test", api_key=KEY, base_url=fake.url, backoff=0, **options)


def ask(client: OpenAIEndpoint, *messages: agent.Message) -> agent.ModelResponse:
    return client.complete(agent.ModelRequest("", messages))


def test_images_go_as_image_url_parts_and_documents_as_file_parts(fake: FakeChatCompletionsAPI) -> None:
    fake.add(Reply("a cat"))
    message = agent.Message.user(
        "what is this?",
        C.image(media_type="image/png", data=PNG),
        C.image(url="https://example.com/cat.jpg"),
        C.document(media_type="application/pdf", data="JVBERi0=", name="report.pdf"),
        C.document(url="https://example.com/a.pdf", name="a"),
    )
    ask(endpoint(fake), message)
    assert fake.requests[0].body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "file", "file": {"filename": "report.pdf", "file_data": "data:application/pdf;base64,JVBERi0="}},
        {"type": "text", "text": "(a document 'a': https://example.com/a.pdf)"},
    ]}]  # fmt: skip


@agent.tool
def screenshot(page: str) -> list[agent.Content]:
    """A screenshot of a page."""
    return [C.of_text(f"screenshot of {page}"), C.image(media_type="image/png", data=PNG)]


def test_a_tools_images_come_in_a_user_message_right_after_the_tool_messages(fake: FakeChatCompletionsAPI) -> None:
    fake.add(Reply(tool_calls=[Call("call_1", "screenshot", '{"page": "/"}')]), Reply("looks fine"))
    session = agent.open("s", MemoryStore())
    session.steer("and be quick")
    agent.Runner().run(agent.Spec(tools=[screenshot], session=session), [agent.Message.user("look")], endpoint(fake))
    sent = fake.requests[1].body["messages"]
    assert sent[2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "screenshot of /"},
        {"role": "user", "content": [
            {"type": "text", "text": "(returned by tool call call_1)"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ]},
    ]  # fmt: skip
    assert sent[0]["content"] == [{"type": "text", "text": "look"}, {"type": "text", "text": "and be quick"}]


def test_thinking_redacted_thinking_and_raw_blocks_are_left_out_never_an_error(fake: FakeChatCompletionsAPI) -> None:
    fake.add(Reply("ok"))
    reply = agent.Message(
        agent.Role.ASSISTANT,
        [
            C.thinking("hm", "sig"),
            C.redacted_thinking("b3A="),
            C.raw("anthropic", '{"type":"server_tool_use","id":"s","name":"web_search","input":{}}'),
            C.raw("anthropic", '{"type":"text","text":"cited","citations":[]}', text="cited"),
            C.of_text(" answer"),
        ],
    )
    ask(endpoint(fake), agent.Message.user("q"), reply, agent.Message.user("more"))
    assert fake.requests[0].body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "cited"}, {"type": "text", "text": " answer"}],
    }


@pytest.mark.parametrize("stream", [False, True])
def test_cached_prompt_tokens_are_cache_reads_and_not_input(fake: FakeChatCompletionsAPI, stream: bool) -> None:
    fake.add(Reply("ok", prompt_tokens=2006, completion_tokens=300, cached_tokens=1920))
    assert ask(endpoint(fake, stream=stream), agent.Message.user("q")).usage == agent.Usage(86, 300, 1920, 0)


@pytest.mark.parametrize("stream", [False, True])
def test_a_compatible_servers_reasoning_content_comes_as_unsigned_thinking(
    fake: FakeChatCompletionsAPI, stream: bool
) -> None:
    fake.add(Reply("42", reasoning_content="Six times seven."), Reply("ok"))
    answer = ask(endpoint(fake, stream=stream), agent.Message.user("q"))
    assert answer.message.content == (C.thinking("Six times seven."), C.of_text("42"))
    assert answer.message.text == "42"
    ask(endpoint(fake), agent.Message.user("q"), answer.message, agent.Message.user("more"))
    assert fake.requests[1].body["messages"][1] == {"role": "assistant", "content": "42"}


def test_reasoning_effort_is_sent_when_set(fake: FakeChatCompletionsAPI) -> None:
    fake.add(Reply("a"), Reply("b"))
    ask(endpoint(fake, reasoning_effort="high"), agent.Message.user("q"))
    ask(endpoint(fake), agent.Message.user("q"))
    assert fake.requests[0].body["reasoning_effort"] == "high"
    assert "reasoning_effort" not in fake.requests[1].body
    with pytest.raises(TypeError, match="reasoning_effort"):
        endpoint(fake, reasoning_effort=3)


@pytest.mark.parametrize(("body", "complaint"), [
    ({"temperature": 0, "tool_choice": "required", "seed": 7}, ""),
    ({"messages": []}, "extra_body cannot set 'messages': OpenAIEndpoint writes it from the transcript"),
    ({"max_completion_tokens": 9}, "cannot set 'max_completion_tokens'"),
    ({"max_tokens": 9}, "cannot set 'max_tokens'"),
    ({"stream_options": {}}, "from its stream option"),
    ({"reasoning_effort": "low"}, "from its reasoning_effort option"),
    ({"temperature": float("nan")}, "extra_body must be JSON"),
])  # fmt: skip
def test_extra_body_is_merged_and_its_own_keys_refused(
    fake: FakeChatCompletionsAPI, body: dict[str, Any], complaint: str
) -> None:
    if complaint:
        with pytest.raises(ValueError, match=complaint):
            endpoint(fake, extra_body=body)
        return
    fake.add(Reply("ok"))
    ask(endpoint(fake, extra_body=body), agent.Message.user("q"))
    assert {k: fake.requests[0].body[k] for k in body} == body


def _stream_of(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"


def _choice(delta: dict[str, Any], finish: object = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


MALFORMED_STREAMS = {
    "usage is not an object": _stream_of(_choice({"content": "hi"}, "stop"), {"choices": [], "usage": "lots"}),
    "a token count is not an integer": _stream_of(
        _choice({"content": "hi"}, "stop"), {"choices": [], "usage": {"prompt_tokens": "7", "completion_tokens": 1}}
    ),
    "finish_reason is not a string": _stream_of(_choice({"content": "hi"}, 3)),
    "tool-call indexes of mixed types": _stream_of(
        _choice({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}]}),
        _choice(
            {"tool_calls": [{"index": "1", "id": "b", "function": {"name": "g", "arguments": "{}"}}]}, "tool_calls"
        ),
    ),
    "content is not a string": _stream_of(_choice({"content": ["hi"]}, "stop")),
}


@pytest.mark.parametrize("name", MALFORMED_STREAMS)
def test_a_malformed_stream_is_a_decoding_error_like_a_malformed_answer(name: str) -> None:
    with RawServer(
        200, MALFORMED_STREAMS[name], {"content-type": "text/event-stream"}, path="/chat/completions"
    ) as server:
        client = OpenAIEndpoint("m", api_key="k", base_url=server.origin, stream=True, max_retries=0)
        with pytest.raises(EndpointDecodingError, match="OpenAI sent an answer this library cannot read"):
            client.complete(agent.ModelRequest("", (agent.Message.user("q"),)))


class _HeldOpen(FakeServer):
    """Streams an answer and ``[DONE]``, then keeps the body open until the test ends."""

    path = "/chat/completions"

    def __init__(self) -> None:
        super().__init__([None] * 3, api_key="k")
        self.release = threading.Event()

    def check(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        """Everything is accepted."""

    def error_body(self, fail: Any, param: str | None, request_id: str) -> object:
        """Never sent."""
        raise NotImplementedError

    def reply(self, handler: Handler, body: dict[str, Any], answer: object) -> None:
        """The answer and [DONE], then nothing until released."""
        handler.start_stream()
        handler.send_event(json.dumps(_choice({"content": "done"}, "stop")))
        handler.send_event("[DONE]")
        self.release.wait(120)
        handler.end_stream()


def test_the_answer_is_complete_at_done_even_when_the_server_holds_the_body_open() -> None:
    with _HeldOpen() as server:
        client = OpenAIEndpoint("m", api_key="k", base_url=server.origin, stream=True, max_retries=0)
        answers: list[agent.ModelResponse] = []
        worker = threading.Thread(
            target=lambda: answers.append(client.complete(agent.ModelRequest("", (agent.Message.user("q"),))))
        )
        worker.start()
        worker.join(30)  # the read timeout is 600 s: a client that waits for the body's end waits that long
        returned_while_held = not worker.is_alive()
        server.release.set()
        worker.join()
    assert returned_while_held
    assert answers and answers[0].message.text == "done"
