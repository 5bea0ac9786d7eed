"""What prompt caching saves over a 40-step tool run, against a server that accounts as the Messages API does.

    python benchmarks/prompt_cache_cost.py [--steps 40]

The run goes to the test suite's local Messages API (agentsessions.testing.FakeMessagesAPI) with its
token counting on: the prompt cache the API documents (agentsessions/testing/fakes/prompt_cache.py), a
1,024-token minimum, lookups at each breakpoint and 20 blocks back. Each step sends the
whole transcript again; what is *new* in a request is what the request before did not
send. The figure is the input billed at the full rate or more (uncached input and cache
writes) divided by the new tokens: 1.0 means each token is paid for once. Without caching
it grows with the square of the steps. The priced figure weighs writes at 1.25 and reads
at 0.1 of the input price (the API's five-minute cache) against sending every prompt
uncached.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

# Run as a script too: the test suite (a package at the repository's top) must be importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import agentsessions as agent
from agentsessions.endpoints import AnthropicEndpoint
from agentsessions.testing.fakes.messages import FakeMessagesAPI, Reply, text, tool_use
from agentsessions.testing.fakes.prompt_cache import PromptCache

KEY = "sk-ant-benchmark"
SYSTEM = "You are a careful research assistant. Cite what each tool returns. " * 120  # about 2,000 tokens


@agent.tool
def lookup(topic: str) -> str:
    """Look a topic up in the archive."""
    return f"Archive entry on {topic}: " + "a paragraph of findings. " * 30


def _prompt_tokens(body: dict[str, Any]) -> int:
    """Every token of a request's prompt, as the server counts them, cache aside."""
    return PromptCache(minimum=10**9).account(body)[2]


def measure(steps: int, cache: bool) -> tuple[float, float]:
    """``(billed at full rate / new, priced / priced uncached)`` for one run of ``steps`` requests."""
    replies = [Reply([tool_use(f"toolu_{i:03d}", "lookup", {"topic": f"topic {i}"})]) for i in range(steps - 1)]
    with FakeMessagesAPI([*replies, Reply([text("Done.")])], api_key=KEY, count_tokens=True) as fake:
        endpoint = AnthropicEndpoint("claude-test", api_key=KEY, base_url=fake.origin, cache=cache)
        spec = agent.Spec(tools=[lookup], system=SYSTEM, max_steps=steps)
        agent.Runner().run(spec, [agent.Message.user("Survey the archive.")], endpoint)
        prompts = [_prompt_tokens(seen.body) for seen in fake.requests]
        usages = fake.usages
    new = prompts[-1]  # each request repeats the one before it, with what is new appended
    full = sum(u["input_tokens"] + u["cache_creation_input_tokens"] for u in usages)
    priced = sum(
        u["input_tokens"] + 1.25 * u["cache_creation_input_tokens"] + 0.1 * u["cache_read_input_tokens"] for u in usages
    )
    return full / new, priced / sum(prompts)


def main(argv: list[str] | None = None) -> None:
    """Print both figures with caching on and off."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    steps = parser.parse_args(argv).steps
    print(f"== prompt caching over a {steps}-step run (input billed at full rate / new tokens; goal <= 1.2)")
    for cache in (True, False):
        billed, priced = measure(steps, cache)
        print(f"  cache={cache!s:5}  {billed:6.2f}x the new tokens   priced at {priced:.2f} of sending it uncached")


if __name__ == "__main__":
    main()
