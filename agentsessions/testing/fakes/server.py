"""What the fake provider servers share: a real HTTP server on 127.0.0.1 and a script.

A fake serves one scripted answer per accepted request, in order. Requests it rejects
(bad key, a body the real API would refuse) are answered with the provider's error and
consume nothing. Every request is recorded, rejected or not, with its headers and body.

Answers every provider understands are defined here: :class:`Fail` (an error answer in
the provider's format), :class:`Drop` (close the connection without a word) and
:class:`Stall` (say nothing for a while, then drop). Each fake adds its own reply type.

Like the real APIs, a fake refuses a body that is not strict JSON (``NaN``, ``Infinity``,
or a number too large for a double such as ``1e999``), gives every answer a request id
in its provider's header, and keeps connections alive: :attr:`FakeServer.connections`
counts the TCP connections it accepted.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
from collections import deque
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import attrs

FAKE_KEY = "sk-fake-key"
"""The key a fake server accepts unless given another; the endpoint must send the same one."""


@attrs.frozen
class Fail:
    """An error answer: status, the provider's error type and message, optional Retry-After.

    ``code`` is the error's ``code`` where the provider's format has one (OpenAI's, such as
    ``context_length_exceeded``); the Messages API's has none.
    """

    status: int
    type: str
    message: str
    retry_after: str | None = None
    code: str | None = None


@attrs.frozen
class Drop:
    """Close the connection without answering."""


@attrs.frozen
class Stall:
    """Answer nothing for ``seconds``, then close the connection."""

    seconds: float


@attrs.frozen
class Seen:
    """A request as the server received it; header names are lower case."""

    path: str
    headers: dict[str, str]
    body: Any


class Rejected(Exception):
    """Raised by a fake's checks: the request is answered with this error, as the real API would."""

    def __init__(self, status: int, type: str, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.fail = Fail(status, type, message, code=code)
        self.param = param


class Handler(BaseHTTPRequestHandler):
    """Hands every POST to the owning :class:`FakeServer`."""

    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, like the real APIs
    # Headers and body go out as separate writes: with Nagle's algorithm on, the body waits
    # for the client's delayed ACK of the headers (40 ms on Linux), for every request.
    disable_nagle_algorithm = True
    server: _Server
    extra_headers: dict[str, str]  # set per request by FakeServer.handle: the request id

    def do_POST(self) -> None:
        """Every provider call is a POST."""
        self.server.fake.handle(self)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test output is not the place for an access log

    def send_json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        """Send a whole JSON answer."""
        data = dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in {**self.extra_headers, **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self) -> None:
        """Send the status line and headers of a chunked ``text/event-stream``."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for name, value in self.extra_headers.items():
            self.send_header(name, value)
        self.end_headers()

    def send_event(self, data: str, event: str | None = None) -> None:
        """Send one server-sent event, cut in two HTTP chunks so clients meet partial lines."""
        text = (f"event: {event}\n" if event else "") + f"data: {data}\n\n"
        raw = text.encode()
        middle = len(raw) // 2  # may well fall inside a UTF-8 sequence: so much the better
        for part in (raw[:middle], raw[middle:]):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))

    def end_stream(self) -> None:
        """Send the last, empty chunk."""
        self.wfile.write(b"0\r\n\r\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeServer

    def get_request(self) -> tuple[socket.socket, Any]:
        accepted = super().get_request()
        with self.fake._lock:
            self.fake.connections += 1
        return accepted

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-answer (timeouts, drops) is what some tests are about


class FakeServer:
    """A provider's API on an OS-assigned port of 127.0.0.1, answering from ``script``.

    Use it as a context manager. Subclasses implement :meth:`check` (authentication and
    request validation, raising :class:`Rejected`), :meth:`error_body` and :meth:`reply`,
    and name the header that carries the request id.
    """

    path = "/"
    request_id_header = "request-id"

    def __init__(self, script: Iterable[object] = (), *, api_key: str = FAKE_KEY) -> None:
        self.api_key = api_key
        self.script: deque[object] = deque(script)
        self.requests: list[Seen] = []
        self.raw_bodies: list[bytes] = []  # each request's body as it arrived, byte for byte
        self.connections = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.fake = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def base_url(self) -> str:
        """What to give the endpoint as its ``base_url``."""
        return self.origin

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def add(self, *answers: object) -> None:
        """Append answers to the script."""
        with self._lock:
            self.script.extend(answers)

    @property
    def attempts(self) -> int:
        """How many requests arrived, accepted or not."""
        return len(self.requests)

    def handle(self, handler: Handler) -> None:
        """Record the request, check it, and send the next scripted answer."""
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length)
        try:
            body = json.loads(raw, parse_constant=_not_json, parse_float=_finite)
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in handler.headers.items()}
        with self._lock:
            self.requests.append(Seen(handler.path, headers, body))
            self.raw_bodies.append(raw)
            request_id = f"req_fake{len(self.requests):04d}"
        handler.extra_headers = {self.request_id_header: request_id}
        try:
            if handler.path != self.path:
                raise Rejected(404, "not_found_error", f"Not found: {handler.path}")
            if not isinstance(body, dict):
                raise Rejected(400, "invalid_request_error", "The request body is not valid JSON.")
            self.check(headers, body)
        except Rejected as rejected:
            self.refuse(handler, body, rejected, request_id)
            return
        with self._lock:
            answer = self.script.popleft() if self.script else Fail(500, "api_error", "the fake has no answer left")
        self.answer(handler, body, answer, request_id)

    def refuse(self, handler: Handler, body: object, rejected: Rejected, request_id: str) -> None:
        """Answer a request :meth:`check` refused: the provider's error body with its status."""
        handler.send_json(rejected.fail.status, self.error_body(rejected.fail, rejected.param, request_id))

    def answer(self, handler: Handler, body: dict[str, Any], answer: object, request_id: str) -> None:
        """Send ``answer``, one of the shared kinds or the subclass's reply."""
        if isinstance(answer, Fail):
            headers = {"retry-after": answer.retry_after} if answer.retry_after is not None else {}
            handler.send_json(answer.status, self.error_body(answer, None, request_id), headers)
        elif isinstance(answer, Drop):
            self.drop(handler)
        elif isinstance(answer, Stall):
            self._stopping.wait(answer.seconds)
            self.drop(handler)
        else:
            self.reply(handler, body, answer)

    @staticmethod
    def drop(handler: Handler) -> None:
        """Close the connection now, whatever has been sent."""
        handler.close_connection = True
        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)

    def check(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        """Raise :class:`Rejected` for what the real API refuses."""
        raise NotImplementedError

    def error_body(self, fail: Fail, param: str | None, request_id: str) -> object:
        """The provider's JSON error body."""
        raise NotImplementedError

    def reply(self, handler: Handler, body: dict[str, Any], answer: object) -> None:
        """Send a model reply, whole or streamed as ``body`` asks."""
        raise NotImplementedError


class RawServer(FakeServer):
    """Answers every request at ``path`` with one fixed status, headers and body, as a proxy or a local server might."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None, *, path: str) -> None:
        super().__init__([None] * 10, api_key="any")
        self.path = path
        self.status, self.raw, self.extra = status, body, headers or {}

    def check(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        """Everything is accepted."""

    def error_body(self, fail: Fail, param: str | None, request_id: str) -> object:
        """Never sent: a raw server only answers with its own body."""
        raise NotImplementedError

    def reply(self, handler: Handler, body: dict[str, Any], answer: object) -> None:
        """The fixed answer, with a content-length and no request id."""
        handler.send_response(self.status)
        handler.send_header("content-length", str(len(self.raw)))
        for name, value in self.extra.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(self.raw)


class Recordings(FakeServer):
    """Answers each request at ``path`` with the next recorded stream, as a chunked body, keeping the connection."""

    def __init__(self, recordings: list[bytes], *, path: str) -> None:
        super().__init__(recordings, api_key="k")
        self.path = path

    def check(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        """Everything is accepted."""

    def error_body(self, fail: Fail, param: str | None, request_id: str) -> object:
        """Never sent."""
        raise NotImplementedError

    def reply(self, handler: Handler, body: dict[str, Any], answer: object) -> None:
        """The recording's bytes, as chunks of 700 bytes."""
        assert isinstance(answer, bytes)
        handler.start_stream()
        for start in range(0, len(answer), 700):
            piece = answer[start : start + 700]
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        handler.end_stream()


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def _finite(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(f"{number} is out of range")  # as serde_json and most strict parsers say
    return value


def _raw_numbers(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return _INFINITE[value > 0] if not math.isnan(value) else value
    if isinstance(value, dict):
        return {key: _raw_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_raw_numbers(item) for item in value]
    return value


_INFINITE = {True: "\x00+1e999\x00", False: "\x00-1e999\x00"}


def dumps(value: Any, *, ensure_ascii: bool = True) -> str:
    """JSON as a real API writes it: an infinite float as the number ``1e999``, never ``Infinity``.

    ``1e999`` is valid JSON that a model may write; ``Infinity`` is not JSON at all.
    """
    text = json.dumps(_raw_numbers(value), ensure_ascii=ensure_ascii)
    for marker in _INFINITE.values():
        text = text.replace(json.dumps(marker, ensure_ascii=ensure_ascii), marker.strip("\x00+"))
    return text


def pieces(text: str, size: int = 4) -> list[str]:
    """``text`` cut into pieces of ``size`` characters, as a model streams it."""
    return [text[i : i + size] for i in range(0, len(text), size)]
