"""What the HTTP endpoints share: the session, retries, timeouts, errors, and reading answers.

Every request goes through :class:`HTTPClient.post`, and every answer through
:meth:`HTTPClient.read_whole` or :meth:`HTTPClient.read_stream`. They return the
provider's answer or raise one of the :class:`~agentsessions.errors.EndpointError` tree:

- no complete answer (refused, reset, dropped, cut short): :class:`EndpointTransportError`,
  ``status=0``, chained ``from`` the ``requests`` exception; :class:`EndpointTimeoutError`
  when it was a timeout;
- the provider's error answer, or an error event inside a stream: :class:`EndpointStatusError`
  with its HTTP status, error type, message and request id;
- an answer that is not the provider's format: :class:`EndpointDecodingError`.

Nothing here ever logs, formats or raises a header value or a request body: the API
key travels only in the headers handed to ``post``, and keys and headers are checked
when an endpoint is made, so ``requests`` never has a reason to quote one.
"""

from __future__ import annotations

import abc
import json
import logging
import math
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, ClassVar, Protocol, Self, TypedDict, cast

import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import ConnectionPool
from urllib3.exceptions import ReadTimeoutError
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

from agentsessions.endpoint import ModelRequest, ModelResponse
from agentsessions.endpoints._headers import check_headers, resolve_key
from agentsessions.endpoints._sse import ServerSentEvent, parse_sse
from agentsessions.errors import (
    EndpointDecodingError,
    EndpointError,
    EndpointStatusError,
    EndpointTimeoutError,
    EndpointTransportError,
)

log = logging.getLogger("agentsessions.endpoints")

Timeout = float | tuple[float, float]
"""Seconds to wait: one number for both, or ``(connect, read)``. ``read`` is the longest
silence between two bytes, so it bounds a stalled stream, not a long one."""

DEFAULT_TIMEOUT: tuple[float, float] = (5.0, 600.0)

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})
"""Answers worth another try: timeouts, rate limits, server trouble, and Anthropic's overload."""

MALFORMED = (KeyError, IndexError, TypeError, ValueError, AttributeError)
"""What reading a provider's JSON raises when a field is missing or of another type."""

_MAX_ERROR_TEXT = 500
_REQUEST_ID_HEADERS = ("request-id", "x-request-id")  # Anthropic's, then OpenAI's and most gateways'


# Retries


class _Retry(Retry):
    # urllib3 also retries 413 and 503 whenever they carry Retry-After; we retry exactly the
    # statuses above, so a request that is too large fails at once instead of after a wait.
    RETRY_AFTER_STATUS_CODES = frozenset()
    retry_read_timeouts = False

    def new(self, **kw: Any) -> Self:
        retry = super().new(**kw)
        retry.retry_read_timeouts = self.retry_read_timeouts
        return retry

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> Self:
        if isinstance(error, ReadTimeoutError) and method == "POST" and not self.retry_read_timeouts:
            # The request went out and may be running still: sending it again may pay for it twice.
            raise error.with_traceback(_stacktrace)
        return super().increment(method, url, response, error, _pool, _stacktrace)


def retry_policy(max_retries: int, backoff: float, max_wait: float, *, read_timeouts: bool = False) -> Retry:
    """The urllib3 ``Retry`` every endpoint mounts: POST included, Retry-After honoured.

    Retried: connections that fail or drop before an answer, and the statuses in
    :data:`RETRY_STATUSES`. A read timeout (the request went out, no answer came in
    time) only with ``read_timeouts``, since the provider may have done, and billed,
    the work. ``backoff`` is urllib3's factor (waits of 0, 2·backoff, 4·backoff...
    seconds) and ``max_wait`` caps both that and any Retry-After the server asks for.
    """
    retry = _Retry(
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
    retry.retry_read_timeouts = read_timeouts
    return retry


def _check_timeout(timeout: object) -> Timeout:
    values = timeout if isinstance(timeout, tuple) else (timeout,)
    if not 1 <= len(values) <= 2 or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf") for v in values
    ):
        raise ValueError(f"timeout must be a positive number of seconds or a (connect, read) pair, got {timeout!r}")
    return cast(Timeout, timeout)


# JSON


def _finite_or_none(number: str) -> float | None:
    value = float(number)
    return value if math.isfinite(value) else None


def load_json(text: str | bytes) -> Any:
    """JSON as Python, where a number a double cannot hold (``1e999``) and ``NaN``/``Infinity`` are ``None``.

    So nothing read can be written back as ``Infinity``, which is not JSON.
    """
    return json.loads(text, parse_float=_finite_or_none, parse_constant=lambda _: None)


class Verbatim:
    """JSON text that goes into a request body exactly as it is (a provider's own block, kept raw).

    :meth:`HTTPClient.post` writes it in place of the object, byte for byte; it was checked
    to be JSON when its block was made.
    """

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


_NON_UTF8 = re.compile("[\ud800-\udfff]")


def _spliced(value: Any, **dumps_options: Any) -> str:
    """``value`` as JSON text, each :class:`Verbatim` in it written as its own text."""
    verbatim: list[str] = []
    marker = f"agentsessions-verbatim-{secrets.token_hex(8)}-"

    def place(found: object) -> str:
        if not isinstance(found, Verbatim):
            raise TypeError(f"{type(found).__name__} is not JSON")
        verbatim.append(found.text)
        return f"{marker}{len(verbatim) - 1}"

    text = json.dumps(value, allow_nan=False, default=place, **dumps_options)
    if not verbatim:
        return text
    # One pass over the text, however many there are: a long transcript holds many.
    return re.sub(f'"{marker}([0-9]+)"', lambda match: verbatim[int(match.group(1))], text)


def encode_body(body: Mapping[str, Any]) -> bytes:
    """``body`` as JSON bytes, each :class:`Verbatim` in it written as its own text.

    The rest is ASCII-only JSON, so any str survives whatever the server's charset, lone
    surrogates included; a verbatim text goes as UTF-8, except a surrogate in it (which
    UTF-8 cannot carry), written as its JSON escape: the same JSON.
    """
    try:
        text = _spliced(body)
    except ValueError as error:
        raise ValueError("the request holds a number JSON cannot write (inf or nan)") from error
    return _NON_UTF8.sub(_escape, text).encode() if not text.isascii() else text.encode()


def dump_verbatim(value: Any) -> str:
    """``value`` as compact JSON text, non-ASCII kept, each :class:`Verbatim` in it written as its own text."""
    return _spliced(value, ensure_ascii=False, separators=(",", ":"))


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def token_count(counts: Mapping[str, Any], key: str) -> int:
    """A provider's token count: an integer, 0 when it is missing or null; anything else is malformed."""
    value = counts.get(key)
    if value is None:
        return 0
    if type(value) is not int:
        raise TypeError(f"usage.{key} is {value!r:.40}, not an integer")
    return value


def str_field(block: Mapping[str, Any], key: str, default: str | None = None) -> str:
    """``block[key]``, a string (``default`` when missing or null, if one is given); else ``TypeError``."""
    value = block.get(key, default) if default is not None else block[key]
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise TypeError(f"a {block.get('type')} object's {key} is {type(value).__name__}, not a string")
    return value


# Reading answers


class Assembly(Protocol):
    """A provider's answer being put together from stream events; :meth:`HTTPClient.read_stream` drives it."""

    @property
    def done(self) -> bool:
        """The provider's last event arrived (OpenAI's streams end instead with ``[DONE]``)."""
        ...

    def feed(self, data: Mapping[str, Any]) -> str:
        """Take one event's data; return the text it adds (``""`` for none). Raises one of :data:`MALFORMED`."""
        ...

    def response(self) -> ModelResponse:
        """The finished answer."""
        ...


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
        retry: Retry,
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.timeout = _check_timeout(timeout)
        self.owns_session = session is None
        if session is None:
            session = requests.Session()
            adapter = HTTPAdapter(max_retries=retry)
            session.mount("https://", adapter)
            session.mount("http://", adapter)
        self.session = session

    def post(
        self, path: str, headers: Mapping[str, str], body: Mapping[str, Any], *, stream: bool
    ) -> requests.Response:
        """POST ``body`` as JSON; return the 2xx response or raise :class:`EndpointError`."""
        url = self.base_url + path
        try:
            data = encode_body(body)
        except ValueError as error:
            raise ValueError(f"{error} (the request to {url})") from error
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
        except requests.exceptions.InvalidHeader:
            # Its message quotes the header's value, which may be a key: neither shown nor chained.
            raise ValueError(f"requests refused a header of the request to {url}") from None
        except requests.RequestException as error:
            raise transport_error(url, error) from error
        log.debug("%s answered %d in %.2f s", url, response.status_code, time.monotonic() - started)
        if response.status_code >= 300:
            with response:
                raise error_from_response(response)
        return response

    def read_whole(
        self, response: requests.Response, read: Callable[[Mapping[str, Any]], ModelResponse]
    ) -> ModelResponse:
        """A non-streamed answer: its JSON body, turned into a response by the provider's ``read``."""
        try:
            with response:
                content = response.content
        except requests.RequestException as error:
            raise transport_error(response.url, error) from error
        try:
            body = load_json(content)
        except ValueError as error:
            raise self.malformed(response.status_code, f"the body is not JSON ({error})") from error
        if not isinstance(body, dict):
            raise self.malformed(response.status_code, "the body is not a JSON object")
        try:
            return read(body)
        except MALFORMED as error:
            raise self.malformed(response.status_code, "the answer", error) from error

    def read_stream(
        self, response: requests.Response, assembly: Assembly, on_text: Callable[[str], object] | None, last: str
    ) -> ModelResponse:
        """A streamed answer, each piece of text handed to ``on_text`` as it arrives; ``last`` names its end."""
        with response:
            events = iter_sse(response)
            for event in events:
                # OpenAI's last event is [DONE], which is not JSON; the Messages API's is message_stop.
                finished = event.data == "[DONE]"
                if not finished:
                    text = self._feed(assembly, event, response)
                    # Outside _feed: whatever the listener raises is its own error, not a malformed stream.
                    if text and on_text is not None:
                        on_text(text)
                    finished = assembly.done
                if finished:
                    _drain(events, response)
                    try:
                        return assembly.response()
                    except MALFORMED as error:
                        raise self.malformed(response.status_code, "the streamed answer", error) from error
        raise EndpointTransportError(f"the stream from {self.base_url} ended before {last}")

    def _feed(self, assembly: Assembly, event: ServerSentEvent, response: requests.Response) -> str:
        status = response.status_code
        try:
            data = load_json(event.data)
        except ValueError as error:
            if not event.ended:  # the stream stopped in the middle of this event
                raise EndpointTransportError(f"the stream from {self.base_url} was cut inside an event") from error
            raise self.malformed(status, f"a {event.event} event whose data is not JSON ({error})") from error
        if not isinstance(data, dict):
            raise self.malformed(status, f"a {event.event} event whose data is not a JSON object")
        # Anthropic's error event is {"type": "error", "error": {...}}; OpenAI's chunk is {"error": {...}};
        # the Responses API's are {"type": "error", "message": ...} and response.failed.
        if data.get("type") in ("error", "response.failed") or data.get("error"):
            raise stream_error(data, response)
        try:
            return assembly.feed(data)
        except MALFORMED as error:
            raise self.malformed(status, f"a {event.event} event", error) from error

    def malformed(self, status: int, detail: str, error: Exception | None = None) -> EndpointDecodingError:
        """The error for an answer that does not follow the provider's format; ``detail`` says where."""
        why = f" ({type(error).__name__}: {error})" if error is not None else ""
        message = f"{self.provider} sent an answer this library cannot read: {detail}{why}"
        return EndpointDecodingError(message, status=status)

    def close(self) -> None:
        """Close the session if this client made it; a caller's session is left open."""
        if self.owns_session:
            self.session.close()


DRAIN_SECONDS = 0.25
"""How long the end of a body may take to come after the answer's last event, before the connection is dropped."""


def _drain(events: Iterator[ServerSentEvent], response: requests.Response) -> None:
    # Reading the body to its end (the chunked body's last, empty chunk) is what hands the
    # connection back to the pool; closing it unread would close the connection instead.
    # The answer is whole already, so a server that holds the body open must not make us
    # wait for the read timeout: the wait is short, and the next request sets its own.
    connection = getattr(response.raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        sock.settimeout(DRAIN_SECONDS)
    try:
        for _ in events:
            pass
    except EndpointError:
        response.close()  # the answer is whole; the connection is merely not reused


class HTTPOptions(TypedDict, total=False):
    """The constructor options both HTTP endpoints take; see :class:`HTTPEndpoint`."""

    api_key: str | None
    base_url: str
    session: requests.Session | None
    max_tokens: int | None
    stream: bool
    timeout: Timeout
    max_retries: int
    backoff: float
    max_retry_wait: float
    retry_read_timeouts: bool
    headers: Mapping[str, str] | None
    extra_body: Mapping[str, Any] | None


class HTTPEndpoint(abc.ABC):
    """What both providers' endpoints share: the options, the request cycle and the session's lifetime.

    ``api_key`` defaults to the provider's environment variable. ``max_tokens``, when
    set, replaces the request's own limit. With ``stream=True`` each piece of text goes
    to ``request.on_text`` as it arrives; the final :class:`ModelResponse` is the same
    as without streaming. ``timeout`` is seconds, one number or ``(connect, read)``.
    Failed calls are retried ``max_retries`` times (408, 429, 5xx, 529, and connections
    that fail or drop before an answer) with exponential ``backoff``, honouring
    Retry-After up to ``max_retry_wait`` seconds. A request whose answer does not come
    within the read timeout is not sent again, since the provider may be doing (and
    billing) the work: ``retry_read_timeouts=True`` sends it again all the same.
    ``session`` is a ``requests.Session`` of your own (then its adapters decide
    retries). ``headers`` adds headers. ``extra_body`` is merged into every request's JSON
    body (``temperature``, ``tool_choice``, ``metadata``...); a key the endpoint writes itself
    is a ``ValueError`` here, naming the option that sets it. Use one in a ``with`` block,
    or call :meth:`close`, to close the HTTP session it made.
    """

    provider: ClassVar[str]
    key_variable: ClassVar[str]
    default_base_url: ClassVar[str]
    path: ClassVar[str]
    last_event: ClassVar[str]
    owned_keys: ClassVar[Mapping[str, str]]
    """The body's keys the endpoint writes itself, each with what sets it (for ``extra_body``'s errors)."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        session: requests.Session | None = None,
        max_tokens: int | None = None,
        stream: bool = False,
        timeout: Timeout = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_retry_wait: float = 60.0,
        retry_read_timeouts: bool = False,
        headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.model = model
        self.max_tokens = max_tokens
        self.stream = stream
        self._key = resolve_key(api_key, self.key_variable)
        self._headers = check_headers(headers or {})
        self.extra_body = self._check_extra_body(extra_body)
        retry = retry_policy(max_retries, backoff, max_retry_wait, read_timeouts=retry_read_timeouts)
        url = self.default_base_url if base_url is None else base_url
        self._http = HTTPClient(self.provider, url, session=session, timeout=timeout, retry=retry)

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send the transcript to the provider and return the model's answer."""
        limit = self.max_tokens if self.max_tokens is not None else request.max_tokens
        body = self._body(request, limit)
        if self.extra_body:
            body.update(self.extra_body)
        response = self._http.post(self.path, {**self._headers, **self._auth()}, body, stream=self.stream)
        if self.stream:
            return self._http.read_stream(response, self._assembly(), request.on_text, self.last_event)
        return self._http.read_whole(response, self._read)

    def _check_extra_body(self, extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
        if extra_body is None:
            return {}
        if not isinstance(extra_body, Mapping) or not all(isinstance(key, str) for key in extra_body):
            raise TypeError(f"extra_body must be a mapping with str keys, got {type(extra_body).__name__}")
        for key in extra_body:
            if key in self.owned_keys:
                raise ValueError(
                    f"extra_body cannot set {key!r}: {type(self).__name__} writes it from {self.owned_keys[key]}"
                )
        try:
            json.dumps(extra_body, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ValueError(f"extra_body must be JSON: {error}") from None
        return dict(extra_body)

    @abc.abstractmethod
    def _body(self, request: ModelRequest, max_tokens: int) -> dict[str, Any]:
        """The request's JSON body."""

    @abc.abstractmethod
    def _auth(self) -> dict[str, str]:
        """The headers that carry the key."""

    @abc.abstractmethod
    def _read(self, body: Mapping[str, Any]) -> ModelResponse:
        """The answer in a non-streamed body."""

    @abc.abstractmethod
    def _assembly(self) -> Assembly:
        """A new, empty answer to assemble a stream into."""

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


# Errors


def transport_error(url: str, error: requests.RequestException) -> EndpointTransportError:
    """No complete answer arrived; a timeout is :class:`EndpointTimeoutError`. The caller chains it ``from error``."""
    timed_out = isinstance(error, requests.Timeout) or "timed out" in str(error).lower()
    kind, what = (EndpointTimeoutError, "timed out") if timed_out else (EndpointTransportError, "failed")
    return kind(f"the request to {url} {what}: {_why(error)}", status=0)


def _why(error: requests.RequestException) -> str:
    """Why no connection was made, in words, when the cause is one a reader can act on.

    requests wraps urllib3's error, which wraps the socket's, and each message quotes the
    repr of the one inside: a refused port reads as three nested reprs. The socket's own
    error says it in a line. Anything else keeps requests' words.
    """
    for inner in _causes(error):
        if isinstance(inner, ConnectionRefusedError):
            return "the connection was refused: nothing listens there (check base_url, and that the server is running)"
        if isinstance(inner, socket.gaierror):
            return f"the host name does not resolve ({inner.strerror or inner}): check base_url"
    return f"{type(error).__name__}: {error}"


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and every error it wraps: chained, as urllib3's ``reason``, or among its ``args``."""
    todo, seen = [error], set()
    while todo:
        inner = todo.pop(0)
        if id(inner) in seen:
            continue
        seen.add(id(inner))
        yield inner
        wrapped = (inner.__cause__, inner.__context__, getattr(inner, "reason", None), *inner.args)
        todo += [item for item in wrapped if isinstance(item, BaseException)]


def _request_id(response: requests.Response, body: object) -> str:
    for name in _REQUEST_ID_HEADERS:
        if response.headers.get(name):
            return str(response.headers[name])
    found = body.get("request_id") if isinstance(body, dict) else None  # Anthropic's error bodies carry it too
    return found if isinstance(found, str) else ""


def error_from_response(response: requests.Response) -> EndpointStatusError:
    """Turn an error answer into :class:`EndpointStatusError`, keeping the provider's type, message and request id.

    Anthropic and OpenAI both send ``{"error": {"type": ..., "message": ...}}``; compatible
    servers sometimes send ``{"error": "text"}`` or ``{"message": ..., "type": ...}``. Anything
    else is reported by its first few hundred characters.
    """
    status = response.status_code
    if 300 <= status < 400:
        where = response.headers.get("location", "nowhere")
        message = f"redirected to {where}; point base_url there if it is right"
        return EndpointStatusError(message, status=status, request_id=_request_id(response, None))
    try:
        body = load_json(response.content)
    except (ValueError, requests.RequestException):
        body = None
    request_id = _request_id(response, body)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, str):
            return EndpointStatusError(error, status=status, request_id=request_id)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            kind = str(error.get("type") or error.get("code") or "")
            return EndpointStatusError(error["message"], status=status, type=kind, request_id=request_id)
    text = response.text.strip() if body is None else json.dumps(body)
    message = text[:_MAX_ERROR_TEXT] or response.reason or "no message"
    return EndpointStatusError(message, status=status, request_id=request_id)


def stream_error(body: Mapping[str, Any], response: requests.Response) -> EndpointStatusError:
    """An ``error`` object that arrived inside a stream, after a 2xx status line."""
    error = body.get("error")
    if error is None and body.get("type") == "response.failed":
        failed = body.get("response")
        error = failed.get("error") if isinstance(failed, dict) else None
        error = error if isinstance(error, dict) else {"message": "the response failed"}
        error = {"message": error.get("message", ""), "type": error.get("code")}
    elif error is None and isinstance(body.get("message"), str):  # the Responses API's error event: fields at the top
        error = {"message": body["message"], "type": body.get("code")}
    status, request_id = response.status_code, _request_id(response, body)
    if isinstance(error, dict):
        kind = str(error.get("type") or "")
        return EndpointStatusError(str(error.get("message", "")), status=status, type=kind, request_id=request_id)
    return EndpointStatusError(str(error), status=status, request_id=request_id)


def iter_sse(response: requests.Response) -> Iterator[ServerSentEvent]:
    """The events of a streamed answer; a broken stream becomes :class:`EndpointTransportError`."""
    # chunk_size=None hands over each HTTP chunk as it arrives, which is how the providers
    # flush their events; a stream without chunked encoding arrives whole, and still parses.
    chunks = response.iter_content(chunk_size=None)
    try:
        yield from parse_sse(chunks)
    except requests.RequestException as error:
        raise transport_error(response.url, error) from error
