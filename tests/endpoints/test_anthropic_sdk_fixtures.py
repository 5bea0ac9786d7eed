"""The official Anthropic SDK's recorded streams, replayed through the SDK and through ours: the same blocks.

The streams in tests/fixtures/anthropic/ are the SDK's own test fixtures (its
``tests/lib/streaming/fixtures`` and ``tests/fixtures/fable-fallback``): text, tool calls,
thinking with its signature, server tools and their results, compaction, fallback and
refusal blocks. Each is served by a local HTTP server to both clients, and every block
the SDK assembles is compared with ours: modelled blocks field by field, every other
block (kept as ``RAW``) as the whole JSON object. Ours must also come out the same
however the bytes are cut.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("anthropic", "jiter")  # before the imports that need them

import itertools
import json
from pathlib import Path
from typing import Any

import anthropic
import jiter  # the SDK's partial JSON parser
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentsessions as agent
from agentsessions.endpoints import AnthropicEndpoint
from agentsessions.endpoints._anthropic_read import Stream
from agentsessions.testing.fakes.server import RawServer
from tests.support import paths
from tests.support.sse_pieces import assembled

pytestmark = pytest.mark.slow  # every recording cut at every byte

FIXTURES = sorted((paths.FIXTURES / "anthropic").glob("*.sse"))
IDS = [path.stem for path in FIXTURES]
EVENT_STREAM = {"content-type": "text/event-stream"}


def test_every_fixture_is_here() -> None:
    assert len(FIXTURES) == 10


def _ours(raw: bytes) -> agent.ModelResponse:
    with RawServer(200, raw, EVENT_STREAM, path="/v1/messages") as server:
        endpoint = AnthropicEndpoint("claude-test", api_key="k", base_url=server.origin, stream=True, max_retries=0)
        return endpoint.complete(agent.ModelRequest("", (agent.Message.user("hi"),)))


def _sdks(raw: bytes) -> Any:
    with RawServer(200, raw, EVENT_STREAM, path="/v1/messages") as server:
        client = anthropic.Anthropic(base_url=server.origin, api_key="k", max_retries=0)
        # The beta stream, which accumulates every delta (compaction too); the other stream drops some.
        with client.beta.messages.stream(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            return stream.get_final_message()


def _streamed_inputs(raw: bytes) -> dict[int, str]:
    """Each block's input_json_delta pieces joined, read straight from the recording."""
    joined: dict[int, str] = {}
    for line in raw.decode().splitlines():
        if line.startswith("data:") and '"input_json_delta"' in line:
            event = json.loads(line[5:])
            joined[event["index"]] = joined.get(event["index"], "") + event["delta"]["partial_json"]
    return joined


def _check_block(ours: agent.Content, theirs: dict[str, Any], streamed: str | None) -> None:
    kind = theirs["type"]
    if ours.type is agent.ContentType.RAW:
        assert ours.name == "anthropic"
        assert json.loads(ours.data) == theirs
        assert ours.text == (theirs["text"] if kind == "text" else "")
    elif kind == "text":
        assert (ours.type, ours.text) == (agent.ContentType.TEXT, theirs["text"])
        assert not theirs.get("citations")
    elif kind == "thinking":
        assert ours == agent.Content.thinking(theirs["thinking"], theirs["signature"])
    elif kind == "tool_use":
        assert (ours.type, ours.id, ours.name) == (agent.ContentType.TOOL_USE, theirs["id"], theirs["name"])
        assert ours.input == (streamed or "{}")  # the model's text, exactly
        # The SDK parses as it goes, and a cut-off input only partly: the same JSON, as far as it goes.
        assert jiter.from_json(ours.input.encode(), partial_mode=True) == theirs["input"]
    else:
        raise AssertionError(f"a {kind} block came back as {ours.type}")


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_ours_and_the_sdk_assemble_the_same_blocks_usage_and_stop_reason(path: Path) -> None:
    raw = path.read_bytes()
    ours, theirs = _ours(raw), _sdks(raw)
    streamed = _streamed_inputs(raw)
    blocks = [block.to_dict() for block in theirs.content]
    assert len(ours.message.content) == len(blocks)
    for index, (mine, sdk) in enumerate(zip(ours.message.content, blocks, strict=True)):
        _check_block(mine, sdk, streamed.get(index))
    assert ours.stop_reason == theirs.stop_reason
    assert ours.model == theirs.model != "claude-test"  # the model the recording names, not the one asked for
    usage = theirs.usage
    assert ours.usage == agent.Usage(
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_input_tokens or 0,
        usage.cache_creation_input_tokens or 0,
    )


def test_the_fixtures_cover_every_kind_of_block() -> None:
    kinds = {json.loads(b.data)["type"] if b.type is agent.ContentType.RAW else b.type.value
             for path in FIXTURES for b in _ours(path.read_bytes()).message.content}  # fmt: skip
    assert {
        "text",
        "thinking",
        "tool_use",
        "server_tool_use",
        "web_search_tool_result",
        "compaction",
        "fallback",
    } <= kinds


def _assembled(pieces: list[bytes]) -> agent.ModelResponse:
    return assembled("Anthropic", Stream(), "message_stop", pieces)


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_every_split_of_every_fixture_gives_the_same_answer(path: Path) -> None:
    raw = path.read_bytes()
    whole = _assembled([raw])
    assert whole == _ours(raw)
    for cut in range(1, len(raw)):
        assert _assembled([raw[:cut], raw[cut:]]) == whole, f"cut at byte {cut}"


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(FIXTURES), st.lists(st.integers(0, 10_000), max_size=40))
def test_any_number_of_cuts_gives_the_same_answer(path: Path, cuts: list[int]) -> None:
    raw = path.read_bytes()
    points = sorted({cut % len(raw) for cut in cuts} | {0, len(raw)})
    pieces = [raw[a:b] for a, b in itertools.pairwise(points)]
    assert _assembled(pieces) == _assembled([raw])
