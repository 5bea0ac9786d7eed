"""Anthropic's Messages API (``POST /v1/messages``) as an :class:`~agentsessions.Endpoint`.

    endpoint = AnthropicEndpoint("claude-sonnet-4-5", stream=True)   # key from ANTHROPIC_API_KEY

How the transcript maps onto the wire:

- ``TEXT`` blocks are ``text`` blocks (empty ones are left out: the API rejects them);
  ``TOOL_USE`` is ``tool_use`` and ``TOOL_RESULT`` is ``tool_result`` with ``is_error``.
- Consecutive messages of one role are merged into one, as the API requires alternation.
- A tool call's ``input`` is our raw JSON text; the API wants an object, so it is parsed
  on the way out (text that is not a JSON object goes as ``{}``: the tool already told
  the model its arguments were unreadable, and the API refuses anything else).
- Non-finite numbers: a model may write a number no double can hold (``1e999``), and
  Python's JSON reader also takes ``NaN`` and ``Infinity``, which are not JSON. Every
  such number goes to the API as ``null``, never as ``Infinity`` (the API would refuse
  the whole request, and every later one of the conversation). In a streamed answer
  the model's text stays as it wrote it (``{"x": 1e999}``, and the tool gets
  ``float("inf")``); a non-streamed answer holds only the parsed object, where such a
  number is already ``null``, so its ``input`` reads ``{"x": null}``.
- Coming back, a streamed ``input`` is exactly the concatenation of the
  ``input_json_delta`` pieces (``"{}"`` when there were none, as the block started with
  an empty object). A non-streamed answer holds a parsed object, so only its
  serialisation can be kept: ``json.dumps(input, ensure_ascii=False)``, whose ``", "``
  and ``": "`` separators are the ones the API's own stream writes.
- Block types this library does not model (thinking, server tools) are skipped.
- ``stop_reason`` is the API's own, ``""`` when it gave none (a stream without
  ``message_delta``, an answer with ``null``): nothing is made up.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Unpack

import attrs

from agentsessions.endpoint import ModelRequest, ModelResponse, Usage
from agentsessions.endpoints._headers import check_headers
from agentsessions.endpoints._http import HTTPEndpoint, HTTPOptions, load_json
from agentsessions.messages import Content, ContentType, Message, Role
from agentsessions.tools import Tool

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"


class AnthropicEndpoint(HTTPEndpoint):
    """Claude through the Messages API.

    ``api_key`` defaults to ``$ANTHROPIC_API_KEY``. With ``stream=True`` the answer
    arrives as server-sent events. ``version`` is the ``anthropic-version`` header, and
    ``headers`` adds others such as ``anthropic-beta``. The other options
    (``max_tokens``, ``timeout``, ``max_retries``, ``backoff``, ``max_retry_wait``,
    ``retry_read_timeouts``, ``session``) are :class:`~agentsessions.endpoints._http.HTTPEndpoint`'s.
    Failures raise the :class:`~agentsessions.errors.EndpointError` tree.
    """

    provider = "Anthropic"
    key_variable = "ANTHROPIC_API_KEY"
    default_base_url = DEFAULT_BASE_URL
    path = "/v1/messages"
    last_event = "message_stop"

    def __init__(self, model: str, *, version: str = API_VERSION, **options: Unpack[HTTPOptions]) -> None:
        super().__init__(model, **options)
        self._headers = {**self._headers, **check_headers({"anthropic-version": version})}

    def _body(self, request: ModelRequest, max_tokens: int) -> dict[str, Any]:
        return request_body(self.model, request, max_tokens, stream=self.stream)

    def _auth(self) -> dict[str, str]:
        return {"x-api-key": self._key.reveal()}

    def _read(self, body: Mapping[str, Any]) -> ModelResponse:
        return read_message(body)

    def _assembly(self) -> _Stream:
        return _Stream()


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
        value = load_json(text)  # non-finite numbers become None: see the module docstring
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
        stop_reason=str(body.get("stop_reason") or ""),
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
    done: bool = False

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
            self.stop_reason = str(event["delta"].get("stop_reason") or self.stop_reason)
            # Its counts are cumulative, and newer API versions may resend input_tokens too.
            self.usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.done = True
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
            stop_reason=self.stop_reason,
            usage=Usage(int(self.usage.get("input_tokens") or 0), int(self.usage.get("output_tokens") or 0)),
        )
