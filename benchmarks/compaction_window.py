"""A long tool run with and without compaction: the largest request and the input tokens billed, side by side.

    python benchmarks/compaction_window.py [--steps 300] [--window 60000]

The run goes to the test suite's local servers (agentsessions.testing.fakes) with their token
counting on: one token per four bytes of JSON of each block (Messages API) or each tool and
message (Chat Completions), and each provider's documented prompt cache (the Messages API's
breakpoints, which AnthropicEndpoint places; Chat Completions' automatic cache of prompts of
1,024 tokens or more, read in steps of 128). Each step calls a tool whose result is about
400 tokens; the system prompt is about 1,500. Compaction's summaries come from a second
server of the same kind (its requests are billed too, and counted in the totals).

Printed per provider and mode: the largest request's prompt, the step at which a server
with ``--window`` tokens would have refused the run, and the input billed: every input
token (uncached, cache writes, cache reads), and for the Messages API the same priced at its
rates (writes 1.25x, reads 0.1x of the input price, the five-minute cache), in input-token
equivalents.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import agentsessions as agent
from agentsessions.endpoints import AnthropicEndpoint, OpenAIEndpoint, OpenAIResponsesEndpoint
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing.fakes import chat_completions as chat
from agentsessions.testing.fakes import messages, responses
from agentsessions.testing.fakes.prompt_cache import chat_prompt_tokens, prompt_tokens
from agentsessions.testing.fakes.server import FAKE_KEY, FakeServer

SYSTEM = "You are a careful research assistant. Cite the page each fact comes from. " * 80  # ~1,500 tokens


@agent.tool
def look(n: int) -> str:
    """Read page n of the archive."""
    return f"page {n}: " + f"finding {n} of the archive, with its source and date. " * 28


@attrs.frozen
class Billed:
    """What one run sent: the prompt of each request, and the input billed over all of them."""

    prompts: list[int]
    uncached: int
    written: int
    read: int
    summaries: int  # of the three above, what the summarizer's requests billed

    @property
    def total(self) -> int:
        return self.uncached + self.written + self.read

    @property
    def priced(self) -> float:
        return self.uncached + 1.25 * self.written + 0.1 * self.read


@attrs.frozen
class Provider:
    name: str
    fake: Callable[..., FakeServer]
    call: Callable[[int], object]
    answer: Callable[[str], object]
    endpoint: Callable[[FakeServer], agent.Endpoint]
    count: Callable[[dict[str, Any]], int]
    billed: Callable[[list[dict[str, Any]]], tuple[int, int, int]]  # (uncached, written, read)


def _anthropic_billed(usages: list[dict[str, Any]]) -> tuple[int, int, int]:
    return (
        sum(u["input_tokens"] for u in usages),
        sum(u["cache_creation_input_tokens"] for u in usages),
        sum(u["cache_read_input_tokens"] for u in usages),
    )


def _chat_billed(usages: list[dict[str, Any]]) -> tuple[int, int, int]:
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    return sum(u["prompt_tokens"] for u in usages) - cached, 0, cached


def _responses_billed(usages: list[dict[str, Any]]) -> tuple[int, int, int]:
    cached = sum(u["input_tokens_details"]["cached_tokens"] for u in usages)
    return sum(u["input_tokens"] for u in usages) - cached, 0, cached


PROVIDERS = (
    Provider(
        "Anthropic Messages",
        messages.FakeMessagesAPI,
        lambda i: messages.Reply([messages.tool_use(f"toolu_{i:03d}", "look", {"n": i})]),
        lambda text: messages.Reply([messages.text(text)]),
        lambda fake: AnthropicEndpoint("claude-test", api_key=FAKE_KEY, base_url=fake.base_url),
        prompt_tokens,
        _anthropic_billed,
    ),
    Provider(
        "OpenAI Chat Completions",
        chat.FakeChatCompletionsAPI,
        lambda i: chat.Reply(tool_calls=[chat.Call(f"call_{i:03d}", "look", json.dumps({"n": i}))]),
        lambda text: chat.Reply(text),
        lambda fake: OpenAIEndpoint("gpt-test", api_key=FAKE_KEY, base_url=fake.base_url),
        chat_prompt_tokens,
        _chat_billed,
    ),
    Provider(
        "OpenAI Responses",
        responses.FakeResponsesAPI,
        lambda i: responses.Answer(calls=[chat.Call(f"call_{i:03d}", "look", json.dumps({"n": i}))]),
        lambda text: responses.Answer(text),
        lambda fake: OpenAIResponsesEndpoint("gpt-test", api_key=FAKE_KEY, base_url=fake.base_url),
        chat_prompt_tokens,
        _responses_billed,
    ),
)
SUMMARY = "Summary: the pages read so far, each finding with its page, source and date. " * 10  # ~200 tokens


def measure(provider: Provider, steps: int, compaction: agent.Compaction | None) -> Billed:
    """One run of ``steps`` requests (the last answers in text), billed as the fake counts."""
    script = [*(provider.call(i) for i in range(1, steps)), provider.answer("Every page read.")]
    summaries = [provider.answer(SUMMARY) for _ in range(steps)]
    with provider.fake(script, count_tokens=True) as fake, provider.fake(summaries, count_tokens=True) as summarizer:
        if compaction is not None:
            compaction = attrs.evolve(compaction, summarizer=provider.endpoint(summarizer))
        spec = agent.Spec(
            tools=[look], system=SYSTEM, max_steps=steps, compaction=compaction, session=agent.open("b", MemoryStore())
        )
        agent.Runner().run(spec, [agent.Message.user("Read the archive.")], provider.endpoint(fake))
        prompts = [provider.count(seen.body) for seen in fake.requests]
        run = provider.billed(fake.usages)  # type: ignore[attr-defined]
        summarizing = provider.billed(summarizer.usages)  # type: ignore[attr-defined]
    uncached, written, read = (a + b for a, b in zip(run, summarizing, strict=True))
    return Billed(prompts, uncached, written, read, summaries=sum(summarizing))


def refused_at(prompts: list[int], window: int) -> str:
    """The step whose request a server with ``window`` tokens refuses, or that none is."""
    over = next((step for step, size in enumerate(prompts, 1) if size > window), None)
    return "never" if over is None else f"step {over}"


def main(argv: list[str] | None = None) -> None:
    """Print, per provider, the run without compaction beside the run with it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--window", type=int, default=60_000, help="the context window to compare against")
    parser.add_argument("--trigger", type=int, default=40_000)
    parser.add_argument("--keep", type=int, default=10_000)
    options = parser.parse_args(argv)
    rule = agent.Compaction(trigger_tokens=options.trigger, keep_tokens=options.keep)
    print(
        f"== compaction over a {options.steps}-step tool run (trigger {options.trigger:,}, keep {options.keep:,}; "
        f"window {options.window:,} tokens)"
    )
    header = f"  {'':46}{'largest request':>16}{'refused at':>12}{'input billed':>14}{'uncached':>11}"
    print(header + f"{'cache writes':>14}{'cache reads':>13}{'summaries':>11}{'priced':>12}")
    for provider in PROVIDERS:
        for label, compaction in (("without compaction", None), ("with compaction", rule)):
            billed = measure(provider, options.steps, compaction)
            priced = f"{billed.priced:>12,.0f}" if provider.name.startswith("Anthropic") else f"{'-':>12}"
            print(
                f"  {provider.name + ', ' + label:46}{max(billed.prompts):>16,}"
                f"{refused_at(billed.prompts, options.window):>12}{billed.total:>14,}{billed.uncached:>11,}"
                f"{billed.written:>14,}{billed.read:>13,}{billed.summaries:>11,}{priced}"
            )


if __name__ == "__main__":
    main()
