"""Anthropic's Messages API (``POST /v1/messages``) as an :class:`~agentsessions.Endpoint`.

    endpoint = AnthropicEndpoint("claude-sonnet-4-5", stream=True)   # key from ANTHROPIC_API_KEY

How the transcript maps onto the wire:

- ``TEXT`` blocks are ``text`` blocks (empty ones are left out: the API rejects them);
  ``TOOL_USE`` is ``tool_use`` and ``TOOL_RESULT`` is ``tool_result`` with ``is_error``.
- Consecutive messages of one role are merged into one, as the API requires alternation.
- A tool call's ``input`` is our raw JSON text; the API wants an object, so it is parsed
  on the way out (text that is not a JSON object goes as ``{}``: the tool already told
  the model its arguments were unreadable, and the API refuses anything else).
- Coming back, a streamed ``input`` is exactly the concatenation of the
  ``input_json_delta`` pieces (``"{}"`` when there were none, as the block started with
  an empty object). A non-streamed answer holds a parsed object, so only its
  serialisation can be kept: ``json.dumps(input, ensure_ascii=False)``, whose ``", "``
  and ``": "`` separators are the ones the API's own stream writes.
- Block types this library does not model (thinking, server tools) are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import requests

from agentsessions.endpoint import ModelRequest, ModelResponse, Usage
from agentsessions.endpoints._http import (
    DEFAULT_TIMEOUT,
    HTTPClient,
    HTTPEndpoint,
    Timeout,
    iter_sse,
    resolve_key,
    stream_error,
)
from agentsessions.errors import EndpointError
from agentsessions.messages import Content, ContentType, Message, Role
from agentsessions.tools import Tool

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
_MALFORMED = (KeyError, IndexError, TypeError, ValueError, AttributeError)


class AnthropicEndpoint(HTTPEndpoint):
    """Claude through the Messages API.

    ``api_key`` defaults to ``$ANTHROPIC_API_KEY``. ``max_tokens``, when set, replaces
    the request's own limit. With ``stream=True`` the answer arrives as server-sent
    events and each piece of text goes to ``request.on_text`` as it comes; the final
    :class:`ModelResponse` is the same as without streaming. ``timeout`` is seconds,
    one number or ``(connect, read)``. Failed calls are retried ``max_retries`` times
    (408, 429, 5xx, 529 and dropped connections) with exponential ``backoff``,
    honouring Retry-After up to ``max_retry_wait`` seconds. ``session`` is a
    ``requests.Session`` of your own (then its adapters decide retries). ``headers``
    adds headers such as ``anthropic-beta``. Provider errors raise :class:`EndpointError`.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        session: requests.Session | None = None,
        max_tokens: int | None = None,
        stream: bool = False,
        timeout: Timeout = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_retry_wait: float = 60.0,
        headers: Mapping[str, str] | None = None,
        version: str = API_VERSION,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.stream = stream
        self._key = resolve_key(api_key, "ANTHROPIC_API_KEY")
        self._headers = {**(headers or {}), "anthropic-version": version}
        self._http = HTTPClient(
            "Anthropic",
            base_url,
            session=session,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_retry_wait=max_retry_wait,
        )

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send the transcript to ``/v1/messages`` and return Claude's answer."""
        limit = self.max_tokens if self.max_tokens is not None else request.max_tokens
        body = request_body(self.model, request, limit, stream=self.stream)
        headers = {**self._headers, "x-api-key": self._key.reveal()}
        response = self._http.post("/v1/messages", headers, body, stream=self.stream)
        if self.stream:
            with response:
                return self._read_stream(response, request.on_text)
        status = response.status_code
        try:
            return read_message(self._http.read_json(response))
        except _MALFORMED as error:
            raise self._http.malformed(status, "the message", error) from error

    def _read_stream(self, response: requests.Response, on_text: Callable[[str], object] | None) -> ModelResponse:
        status = response.status_code
        stream = _Stream()
        for event in iter_sse(response):
            data = self._http.event_json(event, status)
            if data.get("type") == "error":
                raise stream_error(data, status)
            try:
                text = stream.feed(data)
            except _MALFORMED as error:
                raise self._http.malformed(status, f"a {data.get('type')} event", error) from error
            # Outside the try: whatever the listener raises is its own error, not a malformed stream.
            if text and on_text is not None:
                on_text(text)
            if stream.stopped:
                return stream.response()
        raise EndpointError(f"the stream from {self.base_url} ended before message_stop", status=0)


def request_body(model: str, request: ModelRequest, max_tokens: int, *, stream: bool) -> dict[str, Any]:
    """The JSON body of a Messages API call for ``request``."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": wire_messages(request.messages)}
    if request.system:
        body["system"] = request.system
    if request.tools:
        body["tools"] = [wire_tool(tool) for tool in request.tools]
    if stream:
        body["stream"] = True
    return body


def wire_tool(tool: Tool) -> dict[str, Any]:
    """A tool definition as the API takes it."""
    return {"name": tool.name, "description": tool.description, "input_schema": dict(tool.input_schema)}


def wire_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The transcript as API messages, one role at a time."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        blocks = [block for block in map(_wire_block, message.content) if block is not None]
        if wire and wire[-1]["role"] == message.role.value:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": message.role.value, "content": blocks})
    return wire


def _wire_block(block: Content) -> dict[str, Any] | None:
    if block.type is ContentType.TEXT:
        return {"type": "text", "text": block.text} if block.text else None
    if block.type is ContentType.TOOL_USE:
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": _input_object(block.input)}
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id}
    if block.text:  # content is optional; an empty string is not worth a rejection
        result["content"] = block.text
    if block.is_error:
        result["is_error"] = True
    return result


def _input_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def dump_input(value: object) -> str:
    """A received ``input`` object as text, written the way the API's stream writes it."""
    return json.dumps(value, ensure_ascii=False)


def read_message(body: Mapping[str, Any]) -> ModelResponse:
    """The :class:`ModelResponse` for a non-streamed Messages API answer."""
    # A whole block is a start event with nothing streamed after it, so both paths share _content.
    blocks = [_content(block, "") for block in body["content"]]
    usage = body.get("usage") or {}
    return ModelResponse(
        Message(Role.ASSISTANT, [block for block in blocks if block is not None]),
        stop_reason=body.get("stop_reason") or "end_turn",
        usage=Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)),
    )


def _content(start: Mapping[str, Any], streamed: str) -> Content | None:
    if start["type"] == "text":
        return Content.of_text(start["text"] + streamed)
    if start["type"] == "tool_use":
        return Content.tool_use(start["id"], start["name"], streamed or dump_input(start.get("input", {})))
    return None


@attrs.define
class _Block:
    start: Mapping[str, Any]
    parts: list[str] = attrs.Factory(list)


@attrs.define
class _Stream:
    """The answer being assembled from stream events."""

    blocks: dict[int, _Block] = attrs.Factory(dict)
    stop_reason: str = ""
    usage: dict[str, Any] = attrs.Factory(dict)
    stopped: bool = False

    def feed(self, event: Mapping[str, Any]) -> str:
        """Take one event; return the text it adds (``""`` for none)."""
        kind = event["type"]
        if kind == "message_start":
            self.usage.update(event["message"].get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[event["index"]] = _Block(event["content_block"])
        elif kind == "content_block_delta":
            return self._delta(self.blocks[event["index"]], event["delta"])
        elif kind == "message_delta":
            self.stop_reason = event["delta"].get("stop_reason") or self.stop_reason
            # Its counts are cumulative, and newer API versions may resend input_tokens too.
            self.usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.stopped = True
        return ""  # ping, content_block_stop and event types added later carry nothing we keep

    @staticmethod
    def _delta(block: _Block, delta: Mapping[str, Any]) -> str:
        if delta["type"] == "text_delta":
            block.parts.append(delta["text"])
            return str(delta["text"])
        if delta["type"] == "input_json_delta":
            block.parts.append(delta["partial_json"])
        return ""

    def response(self) -> ModelResponse:
        """The finished answer, blocks in index order."""
        blocks = [_content(self.blocks[i].start, "".join(self.blocks[i].parts)) for i in sorted(self.blocks)]
        return ModelResponse(
            Message(Role.ASSISTANT, [block for block in blocks if block is not None]),
            stop_reason=self.stop_reason or "end_turn",
            usage=Usage(int(self.usage.get("input_tokens") or 0), int(self.usage.get("output_tokens") or 0)),
        )
