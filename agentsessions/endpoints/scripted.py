"""An offline, deterministic model for tests and examples."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import attrs

from agentsessions.endpoint import ModelRequest, ModelResponse
from agentsessions.errors import EndpointError
from agentsessions.messages import ContentType, Message, Role

Reply = Message | ModelResponse | Callable[[ModelRequest], Message | ModelResponse]


class ScriptedEndpoint:
    """Answers each request with the next reply of a script.

    A reply is an assistant :class:`Message`, or a callable that takes the
    :class:`ModelRequest` and returns one (so replies can depend on what tools returned).
    A :class:`ModelResponse` (or a callable returning one) scripts the stop reason and the
    usage too; a bare message stops with ``"tool_use"`` when it calls tools, else ``"end_turn"``.
    Every request seen is kept in ``requests``. ``model`` names the model the replies say
    answered (``ModelResponse.model``, unless a scripted response names its own), and, like
    a real endpoint's ``model``, the one telemetry reports as asked for. Running out of replies is an
    :class:`EndpointError`, as a provider's failure would be; a reply that is not a
    ``Message`` (or a function that returns something else) is the script's mistake, a
    ``TypeError``.
    """

    def __init__(self, replies: Iterable[Reply], *, model: str = "") -> None:
        if not isinstance(model, str):
            raise TypeError(f"model must be a str, got {type(model).__name__}")
        self.model = model
        self._replies = list(replies)
        for index, reply in enumerate(self._replies):
            if not isinstance(reply, (Message, ModelResponse)) and not callable(reply):
                raise TypeError(
                    f"scripted reply {index + 1} must be a Message or a function returning one, "
                    f"got {type(reply).__name__}: {reply!r:.80}"
                )
        self._lock = threading.Lock()
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Record the request and return the next scripted reply."""
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
        if index >= len(self._replies):
            raise EndpointError(f"the script has {len(self._replies)} replies; request {index + 1} has none")
        reply = self._replies[index]
        message = reply if isinstance(reply, (Message, ModelResponse)) else reply(request)
        if isinstance(message, ModelResponse):
            return message if message.model or not self.model else attrs.evolve(message, model=self.model)
        if not isinstance(message, Message):
            # The script's author's mistake, not a provider's failure: a TypeError, as for any bad argument.
            raise TypeError(
                f"scripted reply {index + 1} is a function that returned {type(message).__name__}, "
                f"not a Message: {message!r:.80}"
            )
        if message.role is not Role.ASSISTANT:
            raise EndpointError(f"scripted reply {index + 1} is a {message.role.value} message")
        calls = any(block.type is ContentType.TOOL_USE for block in message.content)
        return ModelResponse(message, "tool_use" if calls else "end_turn", model=self.model)
