"""AnthropicEndpoint(compaction=...): the Messages API's server-side compaction, against the local fake API.

The beta header and ``context_management`` as the API documents them, the compaction
block whole and streamed, kept in the stored transcript, each later request starting at
the last compaction block, and the compaction's own tokens counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.endpoints import AnthropicEndpoint, EndpointStatusError
from agentsessions.endpoints.anthropic import ServerCompaction, start_at_last_compaction
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing.fakes.messages import FakeMessagesAPI, Reply, text, tool_use

KEY = "sk-ant-test-compaction"


def compaction(summary: str) -> dict[str, Any]:
    return {"type": "compaction", "content": summary, "encrypted_content": f"Ep{len(summary)}final"}


@pytest.fixture
def fake() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(api_key=KEY) as server:
        yield server


def endpoint(fake: FakeMessagesAPI, **options: Any) -> AnthropicEndpoint:
    return AnthropicEndpoint("claude-test", api_key=KEY, base_url=fake.origin, backoff=0, **options)


@agent.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def test_compaction_true_sends_the_beta_header_and_the_default_edit(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("ok")]))
    endpoint(fake, compaction=True).complete(agent.ModelRequest("", (agent.Message.user("hi"),)))
    seen = fake.requests[0]
    assert seen.headers["anthropic-beta"] == "compact-2026-01-12"
    assert seen.body["context_management"] == {"edits": [{"type": "compact_20260112"}]}


def test_a_trigger_and_instructions_go_as_the_edit_and_other_betas_are_kept(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("ok")]))
    config = ServerCompaction(trigger_tokens=60_000, instructions="Keep every file path.")
    chosen = endpoint(fake, compaction=config, headers={"Anthropic-Beta": "context-1m-2025-08-07"})
    chosen.complete(agent.ModelRequest("", (agent.Message.user("hi"),)))
    seen = fake.requests[0]
    assert seen.headers["anthropic-beta"] == "context-1m-2025-08-07,compact-2026-01-12"
    assert seen.body["context_management"]["edits"] == [
        {
            "type": "compact_20260112",
            "trigger": {"type": "input_tokens", "value": 60_000},
            "instructions": "Keep every file path.",
        }
    ]


def test_without_compaction_nothing_of_it_is_sent(fake: FakeMessagesAPI) -> None:
    fake.add(Reply([text("ok")]))
    endpoint(fake).complete(agent.ModelRequest("", (agent.Message.user("hi"),)))
    assert "anthropic-beta" not in fake.requests[0].headers
    assert "context_management" not in fake.requests[0].body


def test_the_fake_refuses_the_edit_without_the_beta_header_and_a_trigger_below_the_minimum(
    fake: FakeMessagesAPI,
) -> None:
    fake.add(Reply([text("never")]), Reply([text("never")]))
    edit = {"edits": [{"type": "compact_20260112"}]}
    with pytest.raises(EndpointStatusError, match="compact-2026-01-12"):
        endpoint(fake, extra_body={"context_management": edit}).complete(
            agent.ModelRequest("", (agent.Message.user("hi"),))
        )
    low = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 49_999}}]}
    with pytest.raises(EndpointStatusError, match="greater than or equal to 50000"):
        endpoint(
            fake, headers={"anthropic-beta": "compact-2026-01-12"}, extra_body={"context_management": low}
        ).complete(agent.ModelRequest("", (agent.Message.user("hi"),)))


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        ("yes", TypeError, "compaction must be True, False or a ServerCompaction"),
        (1, TypeError, "compaction must be True, False or a ServerCompaction"),
    ],
)
def test_a_compaction_that_is_not_a_setting_is_refused(value: object, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        AnthropicEndpoint("claude-test", api_key=KEY, compaction=value)  # type: ignore[arg-type]


def test_a_server_compactions_fields_are_checked() -> None:
    with pytest.raises(ValueError, match="trigger_tokens must be at least 50000"):
        ServerCompaction(trigger_tokens=10_000)
    with pytest.raises(TypeError, match="trigger_tokens must be an int or None"):
        ServerCompaction(trigger_tokens=True)
    with pytest.raises(TypeError, match="instructions must be a non-empty str or None"):
        ServerCompaction(instructions="  ")
    with pytest.raises(ValueError, match="extra_body cannot set 'context_management' with compaction on"):
        AnthropicEndpoint("claude-test", api_key=KEY, compaction=True, extra_body={"context_management": {}})


@pytest.mark.parametrize("stream", [False, True])
def test_a_run_keeps_every_compaction_and_each_request_starts_at_the_last(fake: FakeMessagesAPI, stream: bool) -> None:
    first, second = compaction("The user asked for a, b."), compaction("Looked up a, b and c.")
    fake.add(
        Reply([tool_use("toolu_1", "lookup", {"key": "a"})]),
        Reply([first, tool_use("toolu_2", "lookup", {"key": "b"})], compaction_usage=(70_000, 900)),
        Reply([tool_use("toolu_3", "lookup", {"key": "c"})]),
        Reply([second, tool_use("toolu_4", "lookup", {"key": "d"})], compaction_usage=(71_000, 950)),
        Reply([text("All four looked up.")]),
    )
    session = agent.open("compacted", MemoryStore())
    spec = agent.Spec(system="Be brief.", tools=[lookup], session=session)
    chosen = endpoint(fake, compaction=True, stream=stream)
    result = agent.Runner().run(spec, [agent.Message.user("Look up a to d.")], chosen)
    assert (result.steps, result.text) == (5, "All four looked up.")

    # The store keeps every message, the compaction blocks in place, verbatim.
    stored = session.messages()
    assert len(stored) == 10
    kept = [
        json.loads(block.data) for message in stored for block in message.content if block.type is agent.ContentType.RAW
    ]
    assert kept == [first, second]

    bodies = [seen.body for seen in fake.requests]
    assert all(body["context_management"] == {"edits": [{"type": "compact_20260112"}]} for body in bodies)
    # Before any compaction, and on the step that compacts, the whole transcript goes.
    assert [len(body["messages"]) for body in bodies[:2]] == [1, 3]
    # After one, the request starts at the assistant message holding the last compaction block.
    for body, summary in ((bodies[2], first), (bodies[3], first), (bodies[4], second)):
        opening = body["messages"][0]
        assert opening["role"] == "assistant" and opening["content"][0] == summary
    assert [len(body["messages"]) for body in bodies[2:]] == [2, 4, 2]
    assert bodies[4]["messages"][1]["content"][0]["tool_use_id"] == "toolu_4"
    # The system prompt and the tools still go whole, with their cache breakpoints.
    assert all(body["system"][0]["cache_control"] == {"type": "ephemeral"} for body in bodies)
    assert all(body["tools"][-1]["cache_control"] == {"type": "ephemeral"} for body in bodies)
    # And the end of the transcript is still marked for the cache.
    assert all(body["messages"][-1]["content"][-1].get("cache_control") for body in bodies)


@pytest.mark.parametrize("stream", [False, True])
def test_the_compactions_tokens_are_counted_with_the_answers(fake: FakeMessagesAPI, stream: bool) -> None:
    fake.add(
        Reply([compaction("Summary."), text("ok")], input_tokens=40, output_tokens=9, compaction_usage=(80_000, 700))
    )
    response = endpoint(fake, compaction=True, stream=stream).complete(
        agent.ModelRequest("", (agent.Message.user("hi"),))
    )
    assert fake.usages[0]["iterations"][0]["type"] == "compaction"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (40 + 80_000, 9 + 700)
    assert json.loads(response.message.content[0].data) == compaction("Summary.")


def test_a_transcript_without_compaction_is_sent_whole() -> None:
    messages = (agent.Message.user("a"), agent.Message.assistant("b"), agent.Message.user("c"))
    assert start_at_last_compaction(messages) == messages
    other = agent.Message(
        agent.Role.ASSISTANT, [agent.Content.raw("openai", '{"type":"compaction","encrypted_content":"x"}')]
    )
    assert start_at_last_compaction((agent.Message.user("a"), other)) == (agent.Message.user("a"), other)
