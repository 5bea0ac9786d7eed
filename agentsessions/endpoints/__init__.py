"""Models the runner can talk to: ``ScriptedEndpoint`` offline, and real providers.

    from agentsessions.endpoints import AnthropicEndpoint, OpenAIEndpoint, by_name

``AnthropicEndpoint``, ``OpenAIEndpoint`` and ``OpenAIResponsesEndpoint`` (OpenAI's
Responses API) are imported on first use, so importing this package for
``ScriptedEndpoint`` does not import ``requests``. Failures raise the
``EndpointError`` tree (see :mod:`agentsessions.errors`): ``EndpointTransportError``
(also a ``ConnectionError``) and its ``EndpointTimeoutError`` (also a ``TimeoutError``)
when no answer came, ``EndpointStatusError`` when the provider answered with an error,
``EndpointDecodingError`` when the answer made no sense.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentsessions.endpoint import Endpoint
from agentsessions.endpoints.scripted import ScriptedEndpoint
from agentsessions.errors import (
    EndpointDecodingError,
    EndpointError,
    EndpointStatusError,
    EndpointTimeoutError,
    EndpointTransportError,
)

if TYPE_CHECKING:
    from agentsessions.endpoints.anthropic import AnthropicEndpoint
    from agentsessions.endpoints.openai import OpenAIEndpoint
    from agentsessions.endpoints.openai_responses import OpenAIResponsesEndpoint

__all__ = [
    "AnthropicEndpoint",
    "EndpointDecodingError",
    "EndpointError",
    "EndpointStatusError",
    "EndpointTimeoutError",
    "EndpointTransportError",
    "OpenAIEndpoint",
    "OpenAIResponsesEndpoint",
    "ScriptedEndpoint",
    "by_name",
]

_LAZY = {
    "AnthropicEndpoint": "agentsessions.endpoints.anthropic",
    "OpenAIEndpoint": "agentsessions.endpoints.openai",
    "OpenAIResponsesEndpoint": "agentsessions.endpoints.openai_responses",
}
_PROVIDERS = {
    "anthropic": "AnthropicEndpoint",
    "openai": "OpenAIEndpoint",
    "openai-responses": "OpenAIResponsesEndpoint",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def by_name(name: str, **options: Any) -> Endpoint:
    """The endpoint a ``"provider:model"`` string names, such as ``"anthropic:claude-sonnet-4-5"``.

    Providers are ``anthropic``, ``openai`` (Chat Completions, which also serves compatible
    servers through ``base_url=...``) and ``openai-responses`` (OpenAI's Responses API).
    ``options`` go to the endpoint's constructor. Anything else is a ``ValueError`` that
    lists what is accepted.
    """
    if not isinstance(name, str):
        raise TypeError(f"an endpoint name is a str such as 'anthropic:MODEL', got {type(name).__name__}")
    provider, colon, model = name.partition(":")
    if not colon or not model or provider not in _PROVIDERS:
        known = ", ".join(f"'{p}:MODEL'" for p in _PROVIDERS)
        raise ValueError(f"an endpoint name is one of {known}, got {name!r}")
    endpoint: Endpoint = __getattr__(_PROVIDERS[provider])(model, **options)
    return endpoint
