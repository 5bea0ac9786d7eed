"""OpenAIResponsesEndpoint and the official SDK on the same bytes: a recorded answer, and streams of the SDK's types.

The SDK keeps one Responses body recorded from the live API (tests/fixtures/openai_responses/)
and no recorded Responses streams. So the streams here are built by the fake server
(agentsessions/testing/fakes/responses.py), and every event of every stream is first validated against the
SDK's own ``ResponseStreamEvent`` types. Each is served by a local server to the SDK's
``ResponseStreamState`` accumulation (what ``client.responses.stream`` runs) and to ours; text,
function calls, reasoning and other items, usage and the stop reason must agree, however
the bytes are cut, and ours reads them all over one TCP connection. An ``error`` event and a
``response.failed`` reach the SDK as events and ours as ``EndpointStatusError``: same message, same code.
"""

from __future__ import annotations

from tests.support.paths import FIXTURES
from tests.support.servers import skip_without

skip_without("openai")  # before the imports that need them

import itertools
import json
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai import omit
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

import agentsessions as agent
from agentsessions.endpoints import OpenAIResponsesEndpoint
from agentsessions.endpoints._responses_read import Stream
from agentsessions.testing.fakes.chat_completions import Call
from agentsessions.testing.fakes.responses import Answer, FakeResponsesAPI, events
from agentsessions.testing.fakes.server import RawServer, Recordings
from tests.support.sse_pieces import assembled

RECORDED = FIXTURES / "openai_responses" / "output_text.json"
QUESTION = (agent.Message.user("hi"),)
SEARCH = {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "ü"}}
ANSWERS = {
    "text": Answer("Hello there, in pieces: ünïcödé ✓ and \u2028 too."),
    "reasoning, text and calls": Answer(
        "Two calls.",
        [Call("call_a", "f", '{"z":1,"a":[1, 2],"z":3}'), Call("call_b", "g", '{"city": "Zürich"}')],
        reasoning="I should call f, then g ✓",
    ),
    "calls only": Answer(calls=[Call("call_e", "now", "{}")], reasoning="quick"),
    "a server tool's item": Answer("Found it.", extra=SEARCH),
    "refusal": Answer(refusal="I can't help with that."),
    "max output tokens": Answer("Cut sh", reasoning="long", incomplete="max_output_tokens"),
    "cached": Answer("cheap", input_tokens=2000, output_tokens=3, cached_tokens=1536, cache_write_tokens=400),
    "phase and citations": Answer(
        "Bern, says the web.",
        phase="final_answer",
        annotations=[{"type": "url_citation", "start_index": 0, "end_index": 4, "url": "https://x.test", "title": "B"}],
        extra=SEARCH,
    ),
}
STOP = {"max_output_tokens": "max_tokens"}
EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _stream(answer: Answer) -> bytes:
    """The SSE bytes the fake sends for ``answer`` (as the second answer of its run: ids end in 0002)."""
    fake = FakeResponsesAPI(api_key="k")
    body = {"model": "gpt-test", "include": ["reasoning.encrypted_content"], "store": False}
    response = fake._response(body, answer, 2)
    out = []
    for sequence, (kind, data) in enumerate(events(response, answer)):
        data = {**data, "sequence_number": sequence}
        EVENT.validate_python(data)  # the SDK's own event type, or the test fails here
        out.append(f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n")
    return "".join(out).encode()


STREAMS = {name: _stream(answer) for name, answer in ANSWERS.items()}


def _sdks_stream(raw: bytes) -> Any:
    # The SDK's accumulation (ResponseStreamState, what client.responses.stream runs); its
    # get_final_response() knows only response.completed, so the last event's response is taken.
    with RawServer(200, raw, {"content-type": "text/event-stream"}, path="/responses") as server:
        client = openai.OpenAI(base_url=server.origin, api_key="k", max_retries=0)
        state = ResponseStreamState(input_tools=omit, text_format=omit)
        final = None
        for event in client.responses.create(model="m", input="hi", stream=True):
            for handled in state.handle_event(event):
                if handled.type in ("response.completed", "response.incomplete"):
                    final = handled.response
        return final


def _plain(item: Any) -> bool:
    """A message without a phase or citations: the one kind of item ours reads into plain TEXT blocks."""
    parts = item.content if item.type == "message" else []
    return item.type == "message" and item.phase is None and not any(getattr(p, "annotations", None) for p in parts)


def _unparsed(item: dict[str, Any]) -> dict[str, Any]:
    """An item as the server sent it: the SDK's parse() adds ``parsed`` to each text part."""
    if item.get("type") != "message":
        return item
    return {**item, "content": [{k: v for k, v in part.items() if k != "parsed"} for part in item["content"]]}


def _check(ours: agent.ModelResponse, theirs: Any) -> None:
    assert ours.message.text == "".join(
        part.text if part.type == "output_text" else part.refusal
        for item in theirs.output
        if item.type == "message"
        for part in item.content
    )
    calls = [(item.call_id, item.name, item.arguments) for item in theirs.output if item.type == "function_call"]
    assert [(use.id, use.name, use.input) for use in ours.message.tool_uses] == calls
    others = [_unparsed(item.to_dict()) for item in theirs.output if item.type != "function_call" and not _plain(item)]
    raw = [block for block in ours.message.content if block.type is agent.ContentType.RAW]
    assert [json.loads(block.data) for block in raw] == others
    assert ours.model == theirs.model
    usage, details = theirs.usage, theirs.usage.input_tokens_details
    written = getattr(details, "cache_write_tokens", 0) or 0
    fresh = usage.input_tokens - details.cached_tokens - written
    assert ours.usage == agent.Usage(fresh, usage.output_tokens, details.cached_tokens, written)
    if calls:
        assert ours.stop_reason == "tool_use"
    elif theirs.status == "incomplete":
        assert ours.stop_reason == STOP.get(theirs.incomplete_details.reason, theirs.incomplete_details.reason)
    else:
        assert (theirs.status, ours.stop_reason) == ("completed", "end_turn")


def test_the_recorded_answer_reads_as_the_sdk_reads_it() -> None:
    raw = RECORDED.read_bytes()
    with RawServer(200, raw, {"content-type": "application/json"}, path="/responses") as server:
        theirs = openai.OpenAI(base_url=server.origin, api_key="k", max_retries=0).responses.create(
            model="gpt-4o-mini", input="What's the weather like in SF?"
        )
        ours = OpenAIResponsesEndpoint("gpt-4o-mini", api_key="k", base_url=server.origin).complete(
            agent.ModelRequest("", QUESTION)
        )
    assert ours.message.text == theirs.output_text and ours.message.text.startswith("I can't provide real-time")
    _check(ours, theirs)
    assert ours.usage == agent.Usage(14, 50)
    assert ours.model == "gpt-4o-mini-2024-07-18"  # the dated model that answered, not the alias asked for


def test_every_stream_is_made_of_the_sdks_event_types() -> None:
    for raw in STREAMS.values():
        Response.model_validate(json.loads(raw.decode().split("data: ")[-1])["response"])
    assert len(STREAMS) == 8


def test_ours_agrees_with_the_sdk_on_every_stream_over_one_connection() -> None:
    recordings = list(STREAMS.values())
    with Recordings(recordings, path="/responses") as server:
        endpoint = OpenAIResponsesEndpoint("m", api_key="k", base_url=server.origin, stream=True)
        ours = [endpoint.complete(agent.ModelRequest("", QUESTION)) for _ in recordings]
        assert server.connections == 1
    for raw, mine in zip(recordings, ours, strict=True):
        _check(mine, _sdks_stream(raw))


def _assembled(pieces: list[bytes]) -> agent.ModelResponse:
    return assembled("OpenAI", Stream(), "response.completed", pieces)


@pytest.mark.parametrize("name", STREAMS)
def test_every_split_of_every_stream_gives_the_sdks_answer(name: str) -> None:
    raw = STREAMS[name]
    whole = _assembled([raw])
    _check(whole, _sdks_stream(raw))
    for cut in range(1, len(raw)):
        assert _assembled([raw[:cut], raw[cut:]]) == whole, f"cut at byte {cut}"


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(list(STREAMS.values())), st.lists(st.integers(0, 100_000), max_size=60))
def test_any_number_of_cuts_gives_the_same_answer(raw: bytes, cuts: list[int]) -> None:
    points = sorted({cut % len(raw) for cut in cuts} | {0, len(raw)})
    assert _assembled([raw[a:b] for a, b in itertools.pairwise(points)]) == _assembled([raw])


@pytest.mark.parametrize(
    "broken", [Answer("partial", error_after=5), Answer("partial", fail_after=5)], ids=["error", "failed"]
)
def test_an_error_event_and_a_failed_response_say_what_the_sdk_sees(broken: Answer) -> None:
    with FakeResponsesAPI([broken, broken], api_key="k") as fake:
        client = openai.OpenAI(base_url=fake.url, api_key="k", max_retries=0)
        seen = [event for event in client.responses.create(model="m", input="hi", stream=True)]
        ours = OpenAIResponsesEndpoint("m", api_key="k", base_url=fake.url, stream=True, max_retries=0)
        with pytest.raises(agent.EndpointStatusError) as caught:
            ours.complete(agent.ModelRequest("", QUESTION))
    last: Any = seen[-1]  # an `error` event or a `response.failed`: the SDK's union does not narrow on .type
    error = last if last.type == "error" else last.response.error
    assert (caught.value.message, caught.value.type) == (error.message, error.code)
    assert [event.type for event in seen][:2] == ["response.created", "response.in_progress"]
