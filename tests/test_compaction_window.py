"""Compaction against fake providers that refuse a prompt over their context window (issue 29 part 1).

A 300-step tool run goes to the local Messages API and the local Chat Completions API,
each with a context window. With compaction on, no request is refused and the SQLite store
keeps every message of the run verbatim; without it, the same run is refused, with the
provider's own error, long before its end.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import requests

import agentsessions as agent
from agentsessions import events as ev
from agentsessions.endpoints import AnthropicEndpoint, OpenAIEndpoint, OpenAIResponsesEndpoint
from agentsessions.stores import sqlite
from agentsessions.testing.fakes import chat_completions as chat
from agentsessions.testing.fakes import messages, responses
from agentsessions.testing.fakes.prompt_cache import chat_prompt_tokens, prompt_tokens
from agentsessions.testing.fakes.server import FAKE_KEY, FakeServer

STEPS = 300
WINDOW = 16_000
COMPACTION = agent.Compaction(trigger_tokens=12_000, keep_tokens=4_000)
SYSTEM = "You read pages of the archive, one call a page."


def page(n: int) -> str:
    """Page ``n`` of the archive, about 75 tokens."""
    return f"page {n}: " + f"line {n} of the archive. " * 12


@agent.tool
def look(n: int) -> str:
    """Read page n of the archive."""
    return page(n)


@attrs.frozen
class Provider:
    """How to build a fake of one provider, its replies, and an endpoint for it."""

    fake: Callable[..., FakeServer]
    call: Callable[[int], object]
    answer: Callable[[str], object]
    endpoint: Callable[[FakeServer], agent.Endpoint]
    count: Callable[[dict[str, Any]], int]


ANTHROPIC = Provider(
    messages.FakeMessagesAPI,
    lambda i: messages.Reply([messages.tool_use(f"toolu_{i:03d}", "look", {"n": i})]),
    lambda text: messages.Reply([messages.text(text)]),
    lambda fake: AnthropicEndpoint("claude-test", api_key=FAKE_KEY, base_url=fake.base_url),
    prompt_tokens,
)
OPENAI = Provider(
    chat.FakeChatCompletionsAPI,
    lambda i: chat.Reply(tool_calls=[chat.Call(f"call_{i:03d}", "look", json.dumps({"n": i}))]),
    lambda text: chat.Reply(text),
    lambda fake: OpenAIEndpoint("gpt-test", api_key=FAKE_KEY, base_url=fake.base_url),
    chat_prompt_tokens,
)
RESPONSES = Provider(  # streamed: the Responses API refuses a streamed request inside the stream
    responses.FakeResponsesAPI,
    lambda i: responses.Answer(calls=[chat.Call(f"call_{i:03d}", "look", json.dumps({"n": i}))]),
    lambda text: responses.Answer(text),
    lambda fake: OpenAIResponsesEndpoint("gpt-test", api_key=FAKE_KEY, base_url=fake.base_url, stream=True),
    chat_prompt_tokens,
)
PROVIDERS = pytest.mark.parametrize(
    "provider", [ANTHROPIC, OPENAI, RESPONSES], ids=["anthropic", "openai", "responses-streamed"]
)
TOO_LONG = "Your input exceeds the context window of this model. Please adjust your input and try again."


@pytest.fixture
def store(tmp_path: Path) -> Iterator[sqlite.SQLiteStore]:
    opened = sqlite.open(str(tmp_path / "s.db"))
    yield opened
    opened.close()


def _script(provider: Provider) -> list[object]:
    return [*(provider.call(i) for i in range(1, STEPS)), provider.answer("Every page read.")]


def _expected(provider: Provider) -> list[agent.Message]:
    """The run's messages, summaries aside: the ask, then each call and its result, then the answer."""
    expected = [agent.Message.user("Read the archive.")]
    for i in range(1, STEPS):
        call_id = f"toolu_{i:03d}" if provider is ANTHROPIC else f"call_{i:03d}"
        expected.append(agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use(call_id, "look", f'{{"n": {i}}}')]))
        expected.append(agent.Message(agent.Role.USER, [agent.Content.tool_result(call_id, page(i))]))
    expected.append(agent.Message.assistant("Every page read."))
    return expected


def _plain(transcript: list[agent.Message]) -> list[agent.Message]:
    return [m for m in transcript if not any(b.type is agent.ContentType.COMPACTION for b in m.content)]


def _run(provider: Provider, fake: FakeServer, store: sqlite.SQLiteStore, **spec: Any) -> list[ev.Event]:
    seen: list[ev.Event] = []
    run = agent.Spec(tools=[look], system=SYSTEM, max_steps=STEPS, session=agent.open("long", store), **spec)
    agent.Runner().run(run, [agent.Message.user("Read the archive.")], provider.endpoint(fake), events=seen.append)
    return seen


@PROVIDERS
def test_a_300_step_run_with_compaction_is_never_refused_and_the_store_keeps_every_message(
    provider: Provider, store: sqlite.SQLiteStore
) -> None:
    summaries = [provider.answer(f"Summary {n}: pages read so far, each as the tool returned it.") for n in range(60)]
    window = {"context_window": WINDOW}
    with provider.fake(_script(provider), **window) as fake, provider.fake(summaries, **window) as summarizer:
        compaction = attrs.evolve(COMPACTION, summarizer=provider.endpoint(summarizer))
        seen = _run(provider, fake, store, compaction=compaction)
        sizes = [provider.count(request.body) for request in fake.requests + summarizer.requests]
    assert fake.attempts == STEPS  # every request accepted, none refused or retried
    assert max(sizes) <= WINDOW
    compacted = [e for e in seen if isinstance(e, ev.Compacted)]
    assert len(compacted) >= 3 and summarizer.attempts == len(compacted)  # no summary request refused either
    stored = store.messages("long")
    assert _plain(stored) == _expected(provider)
    summary_messages = [m for m in stored if m not in _plain(stored)]
    assert [m.content[0].text for m in summary_messages] == [e.summary for e in compacted]
    assert [m.content[0].covers for m in summary_messages] == [e.covers for e in compacted]


@PROVIDERS
def test_the_same_run_without_compaction_is_refused_with_the_providers_error(
    provider: Provider, store: sqlite.SQLiteStore
) -> None:
    with provider.fake(_script(provider), context_window=WINDOW) as fake:
        with pytest.raises(agent.RunError) as raised:
            _run(provider, fake, store)
        refused = fake.requests[-1].body
    error = raised.value.__cause__
    assert isinstance(error, agent.EndpointStatusError)
    status = 200 if provider is RESPONSES else 400  # refused inside the stream: the stream's own status
    assert (error.status, error.type) == (status, "invalid_request_error")
    size = provider.count(refused)
    if provider is ANTHROPIC:
        assert error.message == f"prompt is too long: {size} tokens > {WINDOW} maximum"
    elif provider is RESPONSES:
        assert size > WINDOW
        assert error.message == TOO_LONG
    else:
        assert error.message == (
            f"This model's maximum context length is {WINDOW} tokens. However, your messages resulted in "
            f"{size} tokens. Please reduce the length of the messages."
        )
    assert fake.attempts < STEPS // 2  # refused once (a 400 is not retried), far from the end
    stored = store.messages("long")
    assert stored == _expected(provider)[: len(stored)]  # what was done before the refusal is kept


def _post(fake: FakeServer, body: dict[str, Any], headers: dict[str, str]) -> requests.Response:
    return requests.post(fake.origin + fake.path, json=body, headers=headers, timeout=5)


def test_the_messages_fake_refuses_a_prompt_over_its_window_with_the_apis_body() -> None:
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "word " * 400}]}
    headers = {"x-api-key": FAKE_KEY, "anthropic-version": "2023-06-01"}
    size = prompt_tokens(body)
    with messages.FakeMessagesAPI([messages.Reply([messages.text("ok")])], context_window=size) as fake:
        fake.context_window = size - 1
        over = _post(fake, body, headers)
        fake.context_window = size
        fitting = _post(fake, body, headers)
    assert over.status_code == 400
    message = f"prompt is too long: {size} tokens > {size - 1} maximum"
    assert over.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
        "request_id": "req_fake0001",
    }
    assert fitting.status_code == 200
    assert fitting.json()["usage"]["input_tokens"] == size  # the usage is the same count


def test_the_chat_completions_fake_refuses_a_prompt_over_its_window_with_the_apis_body() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "word " * 400}]}
    headers = {"authorization": f"Bearer {FAKE_KEY}"}
    size = chat_prompt_tokens(body)
    with chat.FakeChatCompletionsAPI([chat.Reply("ok")], context_window=size - 1) as fake:
        over = _post(fake, body, headers)
        fake.context_window = size
        fitting = _post(fake, body, headers)
    assert over.status_code == 400
    assert over.json() == {
        "error": {
            "message": f"This model's maximum context length is {size - 1} tokens. However, your messages resulted "
            f"in {size} tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    assert fitting.status_code == 200
    assert fitting.json()["usage"]["prompt_tokens"] == size


def test_the_chat_completions_fake_reads_a_repeated_start_from_its_cache_in_steps_of_128() -> None:
    first = [{"role": "user", "content": "word " * 1000}]
    headers = {"authorization": f"Bearer {FAKE_KEY}"}
    with chat.FakeChatCompletionsAPI([chat.Reply("ok"), chat.Reply("ok")], count_tokens=True) as fake:
        cold = _post(fake, {"model": "m", "messages": first}, headers).json()["usage"]
        again = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
        warm = _post(fake, {"model": "m", "messages": again}, headers).json()["usage"]
    start = chat_prompt_tokens({"messages": first})
    assert cold["prompt_tokens_details"]["cached_tokens"] == 0
    assert warm["prompt_tokens"] == chat_prompt_tokens({"messages": again})
    assert warm["prompt_tokens_details"]["cached_tokens"] == start // 128 * 128


def test_the_responses_fake_refuses_a_prompt_over_its_window_whole_and_in_a_stream() -> None:
    body = {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "word " * 400}]}]}
    headers = {"authorization": f"Bearer {FAKE_KEY}"}
    size = chat_prompt_tokens(body)
    error = {"message": TOO_LONG, "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}
    with responses.FakeResponsesAPI([responses.Answer("ok")], context_window=size - 1) as fake:
        whole = _post(fake, body, headers)
        streamed = _post(fake, {**body, "stream": True}, headers)
        fake.context_window = size
        fitting = _post(fake, body, headers)
    assert whole.status_code == 400
    assert whole.json() == {"error": error}
    assert streamed.status_code == 200
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "error"]
    assert events[-1] == {"type": "error", "sequence_number": 2, "error": error}
    assert fitting.json()["usage"]["input_tokens"] == size
