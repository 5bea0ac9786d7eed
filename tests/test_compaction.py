"""Compaction (issue 29 part 1): a summary in requests, every message kept in the store."""

from __future__ import annotations

import pytest

import agentsessions as agent
from agentsessions import events as ev
from agentsessions.compaction import request_messages
from agentsessions.endpoint import ModelRequest, ModelResponse, Usage
from agentsessions.endpoints import anthropic, openai, openai_responses
from agentsessions.stores.memory import MemoryStore

C = agent.Content


@agent.tool
def look(n: int) -> str:
    """Look at page n."""
    return f"page {n}: " + "x" * 400


class Model:
    """Calls ``look`` ``calls`` times, then answers; it reports its prompt as ~4 characters a token."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.requests: list[ModelRequest] = []
        self.summaries: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        tokens = sum(len(b.text) + len(b.input) for m in request.messages for b in m.content) // 4
        last = request.messages[-1].content[-1]
        if last.type is agent.ContentType.TEXT and last.text.startswith("Summarise"):
            self.summaries.append(request)
            return ModelResponse(
                agent.Message.assistant(f"summary of {len(request.messages)} messages"), "end_turn", Usage(tokens, 10)
            )
        self.requests.append(request)
        step = len(self.requests)
        if step > self.calls:
            return ModelResponse(agent.Message.assistant("done"), "end_turn", Usage(tokens, 5))
        call = agent.Message(agent.Role.ASSISTANT, [C.tool_use(f"t{step}", "look", f'{{"n": {step}}}')])
        return ModelResponse(call, "tool_use", Usage(tokens, 5))


def _run(model: Model, compaction: agent.Compaction | None, store: MemoryStore, events: list[ev.Event]) -> agent.Result:
    spec = agent.Spec(max_steps=100, tools=[look], session=agent.open("s", store), compaction=compaction)
    return agent.Runner().run(spec, [agent.Message.user("read the pages")], model, events=events.append)


def test_requests_carry_the_summary_and_the_store_keeps_every_message() -> None:
    store, seen = MemoryStore(), list[ev.Event]()
    model = Model(60)
    result = _run(model, agent.Compaction(trigger_tokens=2_000, keep_tokens=500), store, seen)
    assert result.text == "done"
    compacted = [e for e in seen if isinstance(e, ev.Compacted)]
    assert len(compacted) >= 2
    stored = store.messages("s")
    # Every tool call and result of the run is stored, in order, and nothing but summaries was added.
    calls = [b.id for m in stored for b in m.content if b.type is agent.ContentType.TOOL_USE]
    assert calls == [f"t{i}" for i in range(1, 61)]
    summaries = [m for m in stored if any(b.type is agent.ContentType.COMPACTION for b in m.content)]
    assert [m.content[0].covers for m in summaries] == [e.covers for e in compacted]
    assert [m.content[0].text for m in summaries] == [e.summary for e in compacted]
    for request in model.requests[-5:]:
        first = request.messages[0].content[0]
        assert first.type is agent.ContentType.COMPACTION
        # No tool result without its call in the same request.
        uses = {b.id for m in request.messages for b in m.content if b.type is agent.ContentType.TOOL_USE}
        results = {
            b.tool_use_id for m in request.messages for b in m.content if b.type is agent.ContentType.TOOL_RESULT
        }
        assert results <= uses
    largest = max(sum(len(b.text) + len(b.input) for m in r.messages for b in m.content) // 4 for r in model.requests)
    assert largest < 2_000 + 600  # the trigger, plus one step's growth

    plain = Model(60)
    _run(plain, None, MemoryStore(), [])
    biggest_plain = max(
        sum(len(b.text) + len(b.input) for m in r.messages for b in m.content) // 4 for r in plain.requests
    )
    assert biggest_plain > 2 * largest


class Failing:
    def complete(self, request: ModelRequest) -> ModelResponse:
        raise RuntimeError("summarizer down")


def test_a_failing_summarizer_changes_nothing_stored_and_the_run_goes_on() -> None:
    store, seen = MemoryStore(), list[ev.Event]()
    model = Model(10)
    result = _run(model, agent.Compaction(trigger_tokens=500, keep_tokens=200, summarizer=Failing()), store, seen)
    assert result.text == "done"
    failed = [e for e in seen if isinstance(e, ev.CompactionFailed)]
    assert failed and all(str(e.error) == "summarizer down" for e in failed)
    assert not any(isinstance(e, ev.Compacted) for e in seen)
    stored = store.messages("s")
    assert not any(b.type is agent.ContentType.COMPACTION for m in stored for b in m.content)
    assert stored == result.messages
    assert model.requests[-1].messages == tuple(stored[:-1])  # uncompacted: the whole transcript


def test_a_fork_before_the_summary_has_the_whole_history_and_a_resume_starts_at_the_summary() -> None:
    store = MemoryStore()
    _run(Model(12), agent.Compaction(trigger_tokens=800, keep_tokens=300), store, [])
    stored = store.messages("s")
    at = max(i for i, m in enumerate(stored) if m.content[0].type is agent.ContentType.COMPACTION)
    before = stored[:at]
    assert not any(b.type is agent.ContentType.COMPACTION for b in before[-1].content)
    resumed = Model(0)
    transcript = [*stored, agent.Message.user("one more thing")]
    agent.Runner().run(agent.Spec(tools=[look]), transcript, resumed)
    first = resumed.requests[0].messages
    assert first[0].content[0] == stored[at].content[0]
    assert first[-1] == agent.Message.user("one more thing")
    covers = stored[at].content[0].covers
    assert len(first) < len(transcript) - covers + 2


def test_a_conversation_compacted_with_one_provider_goes_on_with_another() -> None:
    transcript = [
        agent.Message.user("hi"),
        agent.Message(agent.Role.ASSISTANT, [C.tool_use("t1", "look", '{"n": 1}')]),
        agent.Message(agent.Role.USER, [C.tool_result("t1", "page 1")]),
        agent.Message(agent.Role.USER, [C.compaction("we read page 1", covers=1)]),
    ]
    view = request_messages(transcript, 3)
    request = ModelRequest("", view, (), 100)
    text = "Summary of the conversation so far:\n\nwe read page 1"
    body = anthropic.request_body("m", request, 100, stream=False, cache=False)
    assert body["messages"][0] == {"role": "user", "content": [{"type": "text", "text": text}]}
    assert openai.wire_messages("", view)[0] == {"role": "user", "content": text}
    items = openai_responses.wire_input(view)
    assert items[0]["content"] == [{"type": "input_text", "text": text}]


def test_compaction_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="keep_tokens"):
        agent.Compaction(trigger_tokens=100, keep_tokens=100)
    with pytest.raises(TypeError, match="summarizer"):
        agent.Compaction(summarizer="model")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        agent.Spec(compaction=5)  # type: ignore[arg-type]
