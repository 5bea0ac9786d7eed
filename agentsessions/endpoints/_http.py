"""What the HTTP endpoints share: the session, retries, timeouts, error mapping and SSE.

Every request goes through :class:`HTTPClient.post`, which either returns a 2xx
response or raises :class:`~agentsessions.errors.EndpointError`:

- a provider's error response keeps its HTTP status, error type and message;
- no response at all (refused, dropped, timed out) is ``status=0``, chained ``from``
  the ``requests`` exception.

Nothing here ever logs, formats or raises a header value or a request body: the
API key travels only in the headers handed to ``post``.
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Self, cast

import attrs
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from agentsessions.errors import EndpointError

log = logging.getLogger("agentsessions.endpoints")

Timeout = float | tuple[float, float]
"""Seconds to wait: one number for both, or ``(connect, read)``. ``read`` is the longest
silence between two bytes, so it bounds a stalled stream, not a long one."""

DEFAULT_TIMEOUT: tuple[float, float] = (5.0, 600.0)

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})
"""Answers worth another try: timeouts, rate limits, server trouble, and Anthropic's overload."""

_MAX_ERROR_TEXT = 500
_LINE_END = re.compile(r"\r\n|\r|\n")


class Secret:
    """A credential that never shows itself: its repr and str are a placeholder.

    Kept inside the endpoints instead of the plain key, so a debugger, a ``vars()`` dump
    or an f-string cannot print it by accident; only :meth:`reveal` gives it out.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The credential itself, for the one header that carries it."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('<hidden>')"

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("an API key is not pickled; construct the endpoint again where it is needed")


def resolve_key(given: str | None, env_var: str) -> Secret:
    """``given``, else the environment variable; a clear ``ValueError`` naming it when both are missing."""
    key = given if given is not None else os.environ.get(env_var)
    if not key:
        raise ValueError(f"no API key: pass api_key=... or set the environment variable {env_var}")
    if not isinstance(key, str):
        raise TypeError(f"api_key must be a str, got {type(key).__name__}")
    return Secret(key)


class _Retry(Retry):
    # urllib3 also retries 413 and 503 whenever they carry Retry-After; we retry exactly the
    # statuses above, so a request that is too large fails at once instead of after a wait.
    RETRY_AFTER_STATUS_CODES = frozenset()


def retry_policy(max_retries: int, backoff: float, max_wait: float) -> Retry:
    """The urllib3 ``Retry`` every endpoint mounts: POST included, Retry-After honoured.

    ``backoff`` is urllib3's factor (waits of 0, 2·backoff, 4·backoff... seconds) and
    ``max_wait`` caps both that and any Retry-After the server asks for.
    """
    return _Retry(
        total=max_retries,
        backoff_factor=backoff,
        backoff_max=max_wait,
        retry_after_max=int(max_wait),
        status_forcelist=RETRY_STATUSES,
        # Model calls are POSTs; a repeated one costs tokens but has no other effect.
        allowed_methods=Retry.DEFAULT_ALLOWED_METHODS | {"POST"},
        respect_retry_after_header=True,
        # Once retries run out, hand back the last answer so its error body reaches the caller.
        raise_on_status=False,
    )


def _check_timeout(timeout: object) -> Timeout:
    values = timeout if isinstance(timeout, tuple) else (timeout,)
    if not 1 <= len(values) <= 2 or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf") for v in values
    ):
        raise ValueError(f"timeout must be a positive number of seconds or a (connect, read) pair, got {timeout!r}")
    return cast(Timeout, timeout)


class HTTPClient:
    """One endpoint's connection to its provider.

    Without ``session`` the client makes its own ``requests.Session`` with the retrying
    adapter mounted, and :meth:`close` closes it. A caller's session is used as it is:
    its adapters (and so its retry policy) are the caller's choice, and it stays open.
    """

    def __init__(
        self,
        provider: str,
        base_url: str,
        *,
        session: requests.Session | None,
        timeout: Timeout,
        max_retries: int,
        backoff: float,
        max_retry_wait: float,
    ) -> None:
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.timeout = _check_timeout(timeout)
        self.owns_session = session is None
        if session is None:
            session = requests.Session()
            adapter = HTTPAdapter(max_retries=retry_policy(max_retries, backoff, max_retry_wait))
            session.mount("https://", adapter)
            session.mount("http://", adapter)
        self.session = session

    def post(
        self, path: str, headers: Mapping[str, str], body: Mapping[str, Any], *, stream: bool
    ) -> requests.Response:
        """POST ``body`` as JSON; return the 2xx response or raise :class:`EndpointError`."""
        url = self.base_url + path
        # ASCII-only JSON: any str survives, lone surrogates included, whatever the server's charset.
        data = json.dumps(body).encode("ascii")
        started = time.monotonic()
        log.debug("POST %s (%s, stream=%s)", url, self.provider, stream)
        try:
            response = self.session.post(
                url,
                data=data,
                headers={**headers, "content-type": "application/json"},
                timeout=self.timeout,
                stream=stream,
                # requests drops only Authorization on a redirect to another host, not x-api-key;
                # and it would turn the POST into a GET. A redirect is reported instead.
                allow_redirects=False,
            )
        except requests.RequestException as error:
            raise transport_error(url, error) from error
        log.debug("%s answered %d in %.2f s", url, response.status_code, time.monotonic() - started)
        if response.status_code >= 300:
            with response:
                raise error_from_response(response)
        return response

    def read_json(self, response: requests.Response) -> dict[str, Any]:
        """The body of a non-streamed answer as a JSON object, or :class:`EndpointError`."""
        try:
            with response:
                content = response.content
        except requests.RequestException as error:
            raise transport_error(response.url, error) from error
        try:
            body = json.loads(content)
        except ValueError as error:
            raise self.malformed(response.status_code, f"the body is not JSON ({error})") from error
        if not isinstance(body, dict):
            raise self.malformed(response.status_code, "the body is not a JSON object")
        return body

    def malformed(self, status: int, detail: str, error: Exception | None = None) -> EndpointError:
        """The error for an answer that does not follow the provider's format; ``detail`` says where."""
        why = f" ({type(error).__name__}: {error})" if error is not None else ""
        return EndpointError(f"{self.provider} sent an answer this library cannot read: {detail}{why}", status=status)

    def event_json(self, event: ServerSentEvent, status: int) -> dict[str, Any]:
        """A streamed event's data as a JSON object, or :class:`EndpointError`."""
        try:
            body = json.loads(event.data)
        except ValueError as error:
            raise self.malformed(status, f"a {event.event} event whose data is not JSON ({error})") from error
        if not isinstance(body, dict):
            raise self.malformed(status, f"a {event.event} event whose data is not a JSON object")
        return body

    def close(self) -> None:
        """Close the session if this client made it; a caller's session is left open."""
        if self.owns_session:
            self.session.close()


class HTTPEndpoint:
    """What both providers' endpoints share: a model name, an :class:`HTTPClient` and its lifetime.

    Use one in a ``with`` block, or call :meth:`close`, to close the HTTP session it made.
    """

    model: str
    _http: HTTPClient

    @property
    def base_url(self) -> str:
        """Where requests go, without the trailing slash."""
        return self._http.base_url

    def __repr__(self) -> str:
        # The model and the address only: never the key or a header.
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the HTTP session, if the endpoint made it."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def transport_error(url: str, error: requests.RequestException) -> EndpointError:
    """``status=0``: no complete answer arrived. The caller chains it ``from error``."""
    timed_out = isinstance(error, requests.Timeout) or "timed out" in str(error).lower()
    what = "timed out" if timed_out else "failed"
    return EndpointError(f"the request to {url} {what}: {type(error).__name__}: {error}", status=0)


def error_from_response(response: requests.Response) -> EndpointError:
    """Turn an error answer into :class:`EndpointError`, keeping the provider's type and message.

    Anthropic and OpenAI both send ``{"error": {"type": ..., "message": ...}}``; compatible
    servers sometimes send ``{"error": "text"}`` or ``{"message": ..., "type": ...}``. Anything
    else is reported by its first few hundred characters.
    """
    status = response.status_code
    if 300 <= status < 400:
        where = response.headers.get("location", "nowhere")
        return EndpointError(f"redirected to {where}; point base_url there if it is right", status=status)
    try:
        body = json.loads(response.content)
    except (ValueError, requests.RequestException):
        body = None
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, str):
            return EndpointError(error, status=status)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            kind = error.get("type") or error.get("code") or ""
            return EndpointError(error["message"], status=status, type=str(kind))
    text = response.text.strip() if body is None else json.dumps(body)
    return EndpointError(text[:_MAX_ERROR_TEXT] or response.reason or "no message", status=status)


def stream_error(body: Mapping[str, Any], status: int) -> EndpointError:
    """An ``error`` object that arrived inside a stream, after a 2xx status line."""
    error = body.get("error")
    if isinstance(error, dict):
        return EndpointError(str(error.get("message", "")), status=status, type=str(error.get("type") or ""))
    return EndpointError(str(error), status=status)


@attrs.frozen
class ServerSentEvent:
    """One dispatched event of a ``text/event-stream``: its name (``"message"`` by default) and data."""

    event: str
    data: str


def _lines(chunks: Iterable[bytes]) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    buffer = ""
    for chunk in chunks:
        buffer += decoder.decode(chunk)
        start = 0
        for end in _LINE_END.finditer(buffer):
            if end.group() == "\r" and end.end() == len(buffer):
                break  # maybe the first half of a CRLF that the next chunk completes
            yield buffer[start : end.start()]
            start = end.end()
        buffer = buffer[start:]
    # Only terminated lines count; an unterminated last line is an incomplete event.
    yield from _LINE_END.split(buffer + decoder.decode(b"", final=True))[:-1]


def parse_sse(chunks: Iterable[bytes]) -> Iterator[ServerSentEvent]:
    """Events from the raw bytes of an event stream, cut anywhere.

    Follows the WHATWG rules the providers rely on: lines end in CRLF, LF or CR (and
    nothing else, though JSON may hold a raw U+2028); ``data:`` lines join with
    newlines; a blank line dispatches; a line starting with ``:`` is a comment; ``id``
    and ``retry`` are ignored. A last event without its blank line is dropped.
    """
    event = ""
    data: list[str] = []
    for line in _lines(chunks):
        if not line:
            if data:
                yield ServerSentEvent(event or "message", "\n".join(data))
            event, data = "", []
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value


def iter_sse(response: requests.Response) -> Iterator[ServerSentEvent]:
    """The events of a streamed answer; a broken stream becomes :class:`EndpointError` (``status=0``)."""
    # chunk_size=None hands over each HTTP chunk as it arrives, which is how the providers
    # flush their events; a stream without chunked encoding arrives whole, and still parses.
    chunks = response.iter_content(chunk_size=None)
    try:
        yield from parse_sse(chunks)
    except requests.RequestException as error:
        raise transport_error(response.url, error) from error
