"""The boundary to the model: one method, ``complete(request) -> response``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import attrs

from agentsessions.messages import Message, Role
from agentsessions.tools import Tool
from agentsessions.usage import NO_USAGE
from agentsessions.usage import Usage as Usage  # re-exported: endpoints and runs name it here


@attrs.frozen
class ModelRequest:
    """What the runner asks the model: the transcript so far, the tools and the system prompt.

    ``on_text`` is set by the runner when someone listens for events; a streaming
    endpoint calls it with each piece of text as it arrives. Others ignore it.
    """

    system: str
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    max_tokens: int = 4096
    on_text: Callable[[str], object] | None = attrs.field(default=None, eq=False, repr=False)


def _is_assistant(_: object, __: attrs.Attribute[Message], value: Message) -> None:
    if not isinstance(value, Message) or value.role is not Role.ASSISTANT:
        raise ValueError(f"ModelResponse.message must be an assistant Message, got {value!r:.80}")


@attrs.frozen
class ModelResponse:
    """The model's reply: an assistant message, why it stopped, and what it cost.

    ``model`` is the model the provider says answered (the response's own ``model`` field,
    which may name a dated version of the model asked for); ``""`` when it says none.
    """

    message: Message = attrs.field(validator=_is_assistant)
    stop_reason: str = "end_turn"
    usage: Usage = NO_USAGE
    model: str = attrs.field(default="", validator=attrs.validators.instance_of(str), kw_only=True)


@runtime_checkable
class Endpoint(Protocol):
    """A model. Implementations raise :class:`agentsessions.EndpointError` for provider errors."""

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request."""
        ...
