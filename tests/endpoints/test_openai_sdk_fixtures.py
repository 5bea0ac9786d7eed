"""The official OpenAI SDK's 12 recorded chat-completion streams, through the SDK and through ours.

tests/fixtures/openai/ holds the SDK's own recordings (its ``.inline-snapshot/external``
files). Each is served by a local server to both clients; text (or refusal), tool calls,
finish reason and usage must agree, however the bytes are cut, and ours reads all twelve
over one TCP connection.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("openai")  # before the imports that need them

import itertools
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState

import agentsessions as agent
from agentsessions.endpoints import OpenAIEndpoint
from agentsessions.endpoints.openai import _Stream
from agentsessions.testing.fakes.server import RawServer, Recordings
from tests.support import paths
from tests.support.sse_pieces import assembled

pytestmark = pytest.mark.slow  # every recording cut at every byte

FIXTURES = sorted((paths.FIXTURES / "openai").glob("*.sse"))
IDS = [path.stem for path in FIXTURES]
EVENT_STREAM = {"content-type": "text/event-stream"}
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
QUESTION = (agent.Message.user("hi"),)


def test_all_twelve_recordings_are_here() -> None:
    assert len(FIXTURES) == 12


def _sdks(raw: bytes) -> Any:
    with RawServer(200, raw, EVENT_STREAM, path="/chat/completions") as server:
        client = openai.OpenAI(base_url=server.origin, api_key="k", max_retries=0)
        state = ChatCompletionStreamState()
        for chunk in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            state.handle_chunk(chunk)
        return state.current_completion_snapshot


def _check(ours: agent.ModelResponse, theirs: Any) -> None:
    choice = theirs.choices[0]
    message = choice.message
    assert ours.message.text == (message.content or message.refusal or "")
    calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
    assert [(u.id, u.name, u.input) for u in ours.message.tool_uses] == calls
    assert ours.stop_reason == STOP_REASONS[choice.finish_reason]
    assert ours.model == theirs.model != "m"  # the model the recording names, not the one asked for
    usage = theirs.usage
    assert ours.usage == agent.Usage(usage.prompt_tokens, usage.completion_tokens)


def test_ours_agrees_with_the_sdk_on_every_recording_over_one_connection() -> None:
    recordings = [path.read_bytes() for path in FIXTURES]
    with Recordings(recordings, path="/chat/completions") as server:
        endpoint = OpenAIEndpoint("m", api_key="k", base_url=server.origin, stream=True)
        ours = [endpoint.complete(agent.ModelRequest("", QUESTION)) for _ in recordings]
        assert server.connections == 1
    for raw, mine in zip(recordings, ours, strict=True):
        _check(mine, _sdks(raw))


def _assembled(pieces: list[bytes]) -> agent.ModelResponse:
    return assembled("OpenAI", _Stream(), "[DONE]", pieces)


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_every_split_of_every_recording_gives_the_sdks_answer(path: Path) -> None:
    raw = path.read_bytes()
    whole = _assembled([raw])
    _check(whole, _sdks(raw))
    # Every byte of every recording but the one of 47 KB, cut at every 16th (the rest is Hypothesis's).
    for cut in range(1, len(raw), 1 if len(raw) < 20_000 else 16):
        assert _assembled([raw[:cut], raw[cut:]]) == whole, f"cut at byte {cut}"


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(FIXTURES), st.lists(st.integers(0, 100_000), max_size=60))
def test_any_number_of_cuts_gives_the_same_answer(path: Path, cuts: list[int]) -> None:
    raw = path.read_bytes()
    points = sorted({cut % len(raw) for cut in cuts} | {0, len(raw)})
    assert _assembled([raw[a:b] for a, b in itertools.pairwise(points)]) == _assembled([raw])
