"""Feed a recorded stream to an endpoint's reader in chosen pieces, as a socket would hand them over."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import requests

import agentsessions as agent
from agentsessions.endpoints._http import DEFAULT_TIMEOUT, HTTPClient, retry_policy


class _Pieces:
    """A response body that arrives in the given pieces."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces: Iterator[bytes] = iter(pieces)

    def read(self, _: int | None = None) -> bytes:
        return next(self._pieces, b"")


def assembled(provider: str, stream: Any, last_event: str, pieces: list[bytes]) -> agent.ModelResponse:
    """What ``stream`` (an endpoint's stream reader) makes of a body arriving as ``pieces``."""
    response = requests.Response()
    response.status_code, response.raw, response.url = 200, _Pieces(pieces), "http://127.0.0.1/"
    client = HTTPClient(
        provider, "http://127.0.0.1", session=None, timeout=DEFAULT_TIMEOUT, retry=retry_policy(0, 0, 0)
    )
    return client.read_stream(response, stream, None, last_event)
