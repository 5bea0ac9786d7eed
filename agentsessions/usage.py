"""Tokens a model call consumed: :class:`Usage`, shared by endpoints, runs and stores' session records."""

from __future__ import annotations

import attrs

__all__ = ["NO_USAGE", "Usage"]


@attrs.frozen
class Usage:
    """Tokens a model call consumed, as the provider counted them.

    ``input_tokens`` counts the input read neither from the provider's prompt cache nor
    into it (Anthropic's meaning; for Chat Completions, ``prompt_tokens`` less its cached
    tokens); ``cache_read_tokens`` the input read from the cache, ``cache_write_tokens``
    the input written to it. Adding two ``Usage`` adds all four counts.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


NO_USAGE = Usage()
"""No tokens: the one shared default (a ``Usage`` never changes)."""
