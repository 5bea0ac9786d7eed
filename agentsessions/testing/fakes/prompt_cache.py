"""The providers' prompt caches and token counts, as documented, for the fake servers and the benchmarks.

The Messages API's cache (:class:`PromptCache`):

A prompt is its blocks in the API's order: tools, then system, then each message's
blocks. A ``cache_control`` breakpoint on a block marks the prefix ending there as one to
cache. For each request:

- the cache is looked up at each breakpoint and at the 20 blocks before it; the longest
  prefix found cached is read (``cache_read_input_tokens``);
- the prefix up to the last breakpoint is written, less what was read
  (``cache_creation_input_tokens``), if it holds at least ``minimum`` tokens (1,024 for
  most Claude models); each breakpoint's prefix is cached from then on;
- the tokens after the last breakpoint are ``input_tokens``, billed at the full rate.

Entries never expire here (the API keeps them five minutes after their last use, which a
run's steps always are within). A block counts one token per four bytes of its JSON, at
least one; ``cache_control`` itself is not part of what is cached.
:func:`prompt_tokens` is a request's whole count, what a fake's context window is checked against.

Chat Completions' automatic cache (:class:`PrefixCache`), as OpenAI documents it: no
breakpoints; a prompt of 1,024 tokens or more is cached, and a later prompt that starts
with a cached one reads its longest cached start, in steps of 128 tokens. Here a prompt is
its tools, then its messages, each counted as one token per four bytes of its JSON (at
least one), and a cached start ends at a tool or message boundary
(:func:`chat_prompt_tokens` is the whole count). The Responses API's cache is the same, its
prompt being its instructions, tools and input items.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

LOOKBACK = 20


def _units(body: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    system = body.get("system")
    systems = system if isinstance(system, list) else ([{"type": "text", "text": system}] if system else [])
    units = [(tool, "tools") for tool in body.get("tools", [])] + [(block, "system") for block in systems]
    for message in body["messages"]:
        content = message["content"]
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        units += [(block, message["role"]) for block in blocks]
    return units


def tokens(block: dict[str, Any]) -> int:
    """What one block counts, its breakpoint aside."""
    return max(1, len(json.dumps({k: v for k, v in block.items() if k != "cache_control"})) // 4)


def prompt_tokens(body: dict[str, Any]) -> int:
    """Every token of a Messages API request's prompt (tools, system, messages), cache aside."""
    return sum(tokens(block) for block, _ in _units(body))


class PromptCache:
    """Prefixes cached so far, by the hash of their blocks, and the accounting of each request."""

    def __init__(self, minimum: int = 1024) -> None:
        self.minimum = minimum
        self.cached: set[str] = set()

    def account(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """``(read, written, uncached)`` tokens for the request ``body``, caching what it writes."""
        digests, totals, breakpoints = [], [], []
        digest, total = hashlib.sha256(), 0
        for index, (block, role) in enumerate(_units(body)):
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            digest.update(json.dumps([role, plain], sort_keys=True).encode("utf-8", "surrogatepass"))
            total += tokens(block)
            digests.append(digest.copy().hexdigest())
            totals.append(total)
            if "cache_control" in block:
                breakpoints.append(index)
        if not breakpoints:
            return 0, 0, total
        read = 0
        for point in breakpoints:
            for index in range(point, max(-1, point - LOOKBACK - 1), -1):
                if digests[index] in self.cached:
                    read = max(read, totals[index])
                    break
        last = totals[breakpoints[-1]]
        written = 0
        if last >= self.minimum:
            written = last - read
            self.cached.update(digests[point] for point in breakpoints if totals[point] >= self.minimum)
        return read, written, total - read - written


def _chat_units(body: dict[str, Any]) -> list[Any]:
    if "messages" not in body:  # the Responses API: instructions, tools, input items
        items = body.get("input", [])
        instructions = [{"instructions": body["instructions"]}] if body.get("instructions") else []
        return [*instructions, *body.get("tools", []), *(items if isinstance(items, list) else [items])]
    return [*body.get("tools", []), *body["messages"]]


def chat_prompt_tokens(body: dict[str, Any]) -> int:
    """Every token of a Chat Completions request's prompt (tools, then messages).

    A Responses API request counts the same way: its instructions, tools, then input items.
    """
    return sum(max(1, len(json.dumps(unit)) // 4) for unit in _chat_units(body))


class PrefixCache:
    """Chat Completions' automatic prompt cache: the starts of prompts seen, by hash, with their token counts."""

    MINIMUM = 1024
    STEP = 128

    def __init__(self) -> None:
        self.cached: dict[str, int] = {}

    def account(self, body: dict[str, Any]) -> tuple[int, int]:
        """``(prompt_tokens, cached_tokens)`` for the request ``body``, caching its starts."""
        digest, total, read, starts = hashlib.sha256(), 0, 0, []
        for unit in _chat_units(body):
            digest.update(json.dumps(unit, sort_keys=True).encode("utf-8", "surrogatepass"))
            total += max(1, len(json.dumps(unit)) // 4)
            key = digest.copy().hexdigest()
            if key in self.cached:
                read = total
            starts.append((key, total))
        if total >= self.MINIMUM:
            self.cached.update(starts)
        cached = read // self.STEP * self.STEP if read >= self.MINIMUM else 0
        return total, cached
