"""AnthropicEndpoint and the whole transcript: thinking, provider blocks, images, caching, options."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.endpoints import AnthropicEndpoint, EndpointDecodingError, ScriptedEndpoint
from agentsessions.stores import sqlite
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing.fakes.messages import FakeMessagesAPI, Reply, block_events, sign, text, thinking, tool_use

KEY = "sk-ant-test-blocks"
C = agent.Content
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
SERVER_TOOL = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "eclipse 2026"}}
SEARCH_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": [
        {"type": "web_search_result", "title": "Eclipses", "url": "https://example.com/e", "encrypted_content": "Eo8B"}
    ],
}
CITED = {
    "type": "text",
    "text": "The next one is in August.",
    "citations": [{"type": "web_search_result_location", "url": "https://example.com/e", "cited_text": "August"}],
}


@pytest.fixture
def fake() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(api_key=KEY) as server:
        yield server


def endpoint(fake: FakeMessagesAPI, **options: Any) -> AnthropicEndpoint:
    return AnthropicEndpoint("claude-test", api_key=KEY, base_url=fake.origin, backoff=0, **options)


@agent.tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: 21 °C"


def thinking_run(fake: FakeMessagesAPI, session: agent.Session | None, *, stream: bool) -> agent.Result:
    fake.add(
        Reply(
            [
                thinking("The user wants the weather; I should call the tool."),
                tool_use("toolu_1", "weather", {"city": "Bern"}),
            ]
        ),
        Reply([thinking("It is warm."), text("Bern: 21 °C.")]),
    )
    spec = agent.Spec(tools=[weather], session=session)
    return agent.Runner().run(
        spec, [agent.Message.user("Weather in Bern?")], endpoint(fake, stream=stream, thinking=2048)
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_thinking_run_with_a_tool_sends_its_signed_thinking_back_in_place(
    fake: FakeMessagesAPI, stream: bool
) -> None:
    result = thinking_run(fake, None, stream=stream)
    assert result.text == "Bern: 21 °C."
    reasoning = "The user wants the weather; I should call the tool."
    assert result.messages[1].content[0] == C.thinking(reasoning, sign(reasoning))
    second = fake.requests[1].body
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert second["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": reasoning,
        "signature": sign(reasoning),
    }


def test_without_the_thinking_block_the_api_refuses_the_second_request(fake: FakeMessagesAPI) -> None:
    # What the fake enforces is the API's rule, the one that made such runs fail in step 2.
    fake.add(Reply([text("ok")]))
    reply = agent.Message(agent.Role.ASSISTANT, [C.tool_use("toolu_1", "weather", '{"city": "Bern"}')])
    transcript = (
        agent.Message.user("Weather?"),
        reply,
        agent.Message(agent.Role.USER, [C.tool_result("toolu_1", "21")]),
    )
    with pytest.raises(
        agent.EndpointStatusError, match="Expected `thinking` or `redacted_thinking`, but found `tool_use`"
    ):
        endpoint(fake, thinking=2048).complete(agent.ModelRequest("", transcript))


@pytest.mark.parametrize("opener", ["memory", "sqlite"])
def test_a_thinking_transcript_saved_in_a_store_resumes_on_another_endpoint_call(
    fake: FakeMessagesAPI, opener: str, tmp_path: Path
) -> None:
    store = MemoryStore() if opener == "memory" else sqlite.open(str(tmp_path / "s.db"))
    session = agent.open("thinking", store)
    first = thinking_run(fake, session, stream=True)
    assert session.messages() == first.messages
    fake.add(Reply([thinking("Still warm."), text("Yes, still.")]))
    resumed = [*session.messages(), agent.Message.user("Still?")]
    agent.Runner().run(agent.Spec(tools=[weather], session=session), resumed, endpoint(fake, thinking=2048))
    sent = fake.requests[-1].body["messages"]
    assert [b["type"] for b in sent[1]["content"]] == ["thinking", "tool_use"]
    assert [b["type"] for b in sent[3]["content"]] == ["thinking", "text"]


def test_redacted_thinking_goes_back_as_it_came(fake: FakeMessagesAPI) -> None:
    fake.add(
        Reply([{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}, text("ok")]), Reply([text("ok")])
    )
    first = endpoint(fake).complete(agent.ModelRequest("", (agent.Message.user("hi"),)))
    assert first.message.content[0] == C.redacted_thinking("EmwKAhgBEgy3va3pzix/LafPsn4a")
    endpoint(fake).complete(
        agent.ModelRequest("", (agent.Message.user("hi"), first.message, agent.Message.user("again")))
    )
    assert fake.requests[1].body["messages"][1]["content"][0] == {
        "type": "redacted_thinking",
        "data": "EmwKAhgBEgy3va3pzix/LafPsn4a",
    }


def test_a_thinking_block_without_a_signature_is_refused_before_the_request(fake: FakeMessagesAPI) -> None:
    unsigned = agent.Message(agent.Role.ASSISTANT, [C.thinking("from another provider"), C.of_text("hi")])
    with pytest.raises(ValueError, match="THINKING block without a signature"):
        endpoint(fake).complete(agent.ModelRequest("", (agent.Message.user("a"), unsigned, agent.Message.user("b"))))
    assert fake.requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_server_tool_blocks_and_cited_text_come_as_raw_and_go_back_verbatim_in_place(
    fake: FakeMessagesAPI, stream: bool
) -> None:
    fake.add(
        Reply([text("Searching."), SERVER_TOOL, SEARCH_RESULT, CITED], stop_reason="end_turn"), Reply([text("ok")])
    )
    answer = endpoint(fake, stream=stream).complete(agent.ModelRequest("", (agent.Message.user("When?"),)))
    kinds = [block.type for block in answer.message.content]
    assert kinds == [agent.ContentType.TEXT, agent.ContentType.RAW, agent.ContentType.RAW, agent.ContentType.RAW]
    raws = answer.message.content[1:]
    assert all(block.name == "anthropic" for block in raws)
    assert [json.loads(block.data) for block in raws] == [SERVER_TOOL, SEARCH_RESULT, CITED]
    assert answer.message.text == "Searching.The next one is in August."  # the cited text reads as text
    later = (agent.Message.user("When?"), answer.message, agent.Message.user("thanks"))
    endpoint(fake).complete(agent.ModelRequest("", later))
    sent = fake.requests[1].body["messages"][1]["content"]
    assert sent[1:] == [SERVER_TOOL, SEARCH_RESULT, CITED]


COMPACTION = {
    "type": "compaction",
    "content": "The user asked when the next eclipse is; a search found August 2026, cited.",
    "encrypted_content": "EqQBCkYIBRgCKkDfinal",
}


def test_a_compaction_streamed_in_pieces_is_the_block_whole_and_goes_back_whole(fake: FakeMessagesAPI) -> None:
    # Streamed, the summary comes as several compaction_delta pieces, the last with
    # content null: the block must come out as the whole answer's, not as its last piece.
    fake.add(Reply([COMPACTION, text("In August.")]), Reply([COMPACTION, text("In August.")]), Reply([text("ok")]))
    asked = agent.ModelRequest("", (agent.Message.user("When?"),))
    whole = endpoint(fake).complete(asked)
    streamed = endpoint(fake, stream=True).complete(asked)
    pieces = [event["delta"] for event in block_events(0, COMPACTION) if event["type"] == "content_block_delta"]
    assert len(pieces) > 3 and pieces[-1]["content"] is None
    assert streamed.message == whole.message
    assert json.loads(streamed.message.content[0].data) == COMPACTION
    later = (agent.Message.user("When?"), streamed.message, agent.Message.user("thanks"))
    endpoint(fake).complete(agent.ModelRequest("", later))
    assert fake.requests[2].body["messages"][1]["content"][0] == COMPACTION


def test_a_raw_blocks_text_goes_into_the_body_byte_for_byte(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("ok")]))
    raw = '{"type":"compaction","content":"Summary \u00e9",  "encrypted_content":"Ep8B",\n "n": 1.50}'
    message = agent.Message(agent.Role.ASSISTANT, [C.raw("anthropic", raw)])
    endpoint(fake, cache=False).complete(
        agent.ModelRequest("", (agent.Message.user("a"), message, agent.Message.user("b")))
    )
    assert raw.encode() in fake.raw_bodies[0]


def test_another_providers_raw_blocks_are_left_out_their_text_kept(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("ok")]))
    reasoning = C.raw("openai", '{"type":"reasoning","id":"rs_1","encrypted_content":"x"}')
    cited = C.raw("openai", '{"type":"message","content":[]}', text="It is August.")
    message = agent.Message(agent.Role.ASSISTANT, [reasoning, cited])
    endpoint(fake, cache=False).complete(
        agent.ModelRequest("", (agent.Message.user("a"), message, agent.Message.user("b")))
    )
    assert fake.requests[0].body["messages"][1]["content"] == [{"type": "text", "text": "It is August."}]


@pytest.mark.parametrize("stream", [False, True])
def test_a_pause_turn_sends_the_transcript_back_and_the_run_goes_on(fake: FakeMessagesAPI, stream: bool) -> None:
    fake.add(Reply([text("Searching."), SERVER_TOOL], stop_reason="pause_turn"), Reply([SEARCH_RESULT, CITED]))
    result = agent.Runner().run(agent.Spec(), [agent.Message.user("When?")], endpoint(fake, stream=stream))
    assert (result.steps, result.stop_reason, result.text) == (2, "end_turn", "The next one is in August.")
    continued = fake.requests[1].body["messages"]
    assert continued[-1]["role"] == "assistant" and continued[-1]["content"][-1]["type"] == "server_tool_use"


def test_images_and_documents_go_with_base64_url_and_text_sources(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("a cat")]))
    notes = base64.b64encode(b"plain notes").decode()
    message = agent.Message.user(
        "what is this?",
        C.image(media_type="image/png", data=PNG),
        C.image(url="https://example.com/cat.jpg"),
        C.document(media_type="application/pdf", data="JVBERi0=", name="report"),
        C.document(media_type="text/plain", data=notes),
        C.document(url="https://example.com/a.pdf"),
    )
    endpoint(fake, cache=False).complete(agent.ModelRequest("", (message,)))
    assert fake.requests[0].body["messages"][0]["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
            "title": "report",
        },
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain notes"}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
    ]


@agent.tool
def screenshot(page: str) -> list[agent.Content]:
    """A screenshot of a page."""
    return [C.of_text(f"screenshot of {page}"), C.image(media_type="image/png", data=PNG)]


def test_a_tools_images_go_inside_its_tool_result(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([tool_use("toolu_1", "screenshot", {"page": "/"})]), Reply([text("looks fine")]))
    agent.Runner().run(agent.Spec(tools=[screenshot]), [agent.Message.user("look")], endpoint(fake, cache=False))
    assert fake.requests[1].body["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [
                {"type": "text", "text": "screenshot of /"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            ],
        }
    ]


def test_the_cache_breakpoints_are_on_tools_system_and_the_transcript_never_more_than_four(
    fake: FakeMessagesAPI,
) -> None:
    fake.add(Reply([tool_use("toolu_1", "weather", {"city": "Bern"})]), Reply([text("21")]))
    spec = agent.Spec(tools=[weather, screenshot], system="You report weather.")
    agent.Runner().run(spec, [agent.Message.user("Weather?")], endpoint(fake))
    first, second = (seen.body for seen in fake.requests)
    cached = {"type": "ephemeral"}
    assert first["system"] == [{"type": "text", "text": "You report weather.", "cache_control": cached}]
    assert [t.get("cache_control") for t in first["tools"]] == [None, cached]
    assert first["messages"][0]["content"][0]["cache_control"] == cached
    marked = [b for m in second["messages"] for b in m["content"] if "cache_control" in b]
    assert marked == [second["messages"][0]["content"][0], second["messages"][2]["content"][0]]


def test_cache_false_sends_no_breakpoint(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("ok")]))
    endpoint(fake, cache=False).complete(agent.ModelRequest("Be brief.", (agent.Message.user("a"),), (weather,)))
    assert "cache_control" not in json.dumps(fake.requests[0].body)
    assert fake.requests[0].body["system"] == "Be brief."


def test_thinking_blocks_are_never_marked_for_the_cache(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("ok")]))
    reasoning = "hm"
    prefill = agent.Message(agent.Role.ASSISTANT, [C.of_text("Sure"), C.thinking(reasoning, sign(reasoning))])
    endpoint(fake).complete(agent.ModelRequest("", (agent.Message.user("a"), prefill)))
    assert fake.requests[0].body["messages"][1]["content"][0]["cache_control"] == {"type": "ephemeral"}


def test_usage_counts_cache_reads_and_writes_apart_and_the_run_sums_them() -> None:
    with FakeMessagesAPI(api_key=KEY, count_tokens=True) as fake:
        fake.add(
            *[Reply([tool_use(f"toolu_{i}", "weather", {"city": "Bern" * 200})]) for i in range(3)], Reply([text("ok")])
        )
        spec = agent.Spec(tools=[weather], system="You report weather. " * 400, max_steps=4)
        result = agent.Runner().run(spec, [agent.Message.user("Weather?")], endpoint(fake))
    usages = [
        agent.Usage(
            u["input_tokens"], u["output_tokens"], u["cache_read_input_tokens"], u["cache_creation_input_tokens"]
        )
        for u in fake.usages
    ]
    assert usages[0].cache_read_tokens == 0 and usages[0].cache_write_tokens > 1024
    assert all(u.cache_read_tokens > 0 and u.input_tokens == 0 for u in usages[1:])
    assert result.usage == sum(usages, agent.Usage())


@pytest.mark.parametrize(("body", "complaint"), [
    ({"temperature": 0.2, "tool_choice": {"type": "auto"}, "metadata": {"user_id": "u1"}}, ""),
    ({"messages": []}, "extra_body cannot set 'messages': AnthropicEndpoint writes it from the transcript"),
    ({"max_tokens": 5}, "cannot set 'max_tokens'"),
    ({"thinking": {"type": "enabled"}}, "writes it from its thinking option"),
    ({"model": "x"}, "writes it from its model argument"),
    ({"stream": True}, "from its stream option"),
    ({"system": "x"}, "from Spec.system"),
    ({"tools": []}, "from Spec.tools"),
])  # fmt: skip
def test_extra_body_is_merged_and_the_endpoints_own_keys_are_refused(
    fake: FakeMessagesAPI, body: dict[str, Any], complaint: str
) -> None:
    if complaint:
        with pytest.raises(ValueError, match=complaint):
            endpoint(fake, extra_body=body)
        return
    fake.add(Reply([text("ok")]))
    endpoint(fake, extra_body=body).complete(agent.ModelRequest("", (agent.Message.user("a"),)))
    assert {k: fake.requests[0].body[k] for k in body} == body


def test_thinking_takes_a_budget_or_the_apis_object(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("ok")]))
    endpoint(fake, thinking={"type": "adaptive"}).complete(agent.ModelRequest("", (agent.Message.user("a"),)))
    assert fake.requests[0].body["thinking"] == {"type": "adaptive"}
    for bad in (0, True, "lots", 1.5):
        with pytest.raises((TypeError, ValueError), match="thinking is"):
            endpoint(fake, thinking=bad)


@pytest.mark.parametrize(
    "usage",
    [{"input_tokens": "n/a", "output_tokens": 1}, {"input_tokens": 1.5}, [1, 2], {"cache_read_input_tokens": True}],
)
@pytest.mark.parametrize("stream", [False, True])
def test_a_malformed_usage_is_a_decoding_error_whole_or_streamed(usage: object, stream: bool) -> None:
    from agentsessions.testing.fakes.server import RawServer

    message = {
        "type": "message",
        "role": "assistant",
        "content": [text("hi")],
        "stop_reason": "end_turn",
        "usage": usage,
    }
    if stream:
        events = [
            {"type": "message_start", "message": {**message, "content": [], "usage": {"input_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": text("hi")},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage},
            {"type": "message_stop"},
        ]
        raw = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()  # type: ignore[index]
        headers = {"content-type": "text/event-stream"}
    else:
        raw, headers = json.dumps(message).encode(), {"content-type": "application/json"}
    with RawServer(200, raw, headers, path="/v1/messages") as server:
        client = AnthropicEndpoint("claude-test", api_key=KEY, base_url=server.origin, stream=stream, max_retries=0)
        with pytest.raises(EndpointDecodingError, match="usage"):
            client.complete(agent.ModelRequest("", (agent.Message.user("a"),)))


def test_the_scripted_endpoint_passes_new_blocks_through_the_loop() -> None:
    reply = agent.Message(agent.Role.ASSISTANT, [C.thinking("hm", "s"), C.of_text("done")])
    result = agent.Runner().run(agent.Spec(), [agent.Message.user("a")], ScriptedEndpoint([reply]))
    assert result.text == "done" and result.messages[-1] == reply
