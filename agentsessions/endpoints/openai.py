"""OpenAI's Chat Completions API (``POST {base_url}/chat/completions``) as an :class:`~agentsessions.Endpoint`.

    endpoint = OpenAIEndpoint("gpt-4.1", stream=True)                  # key from OPENAI_API_KEY
    local = OpenAIEndpoint("qwen3", base_url="http://127.0.0.1:8000/v1", api_key="unused")

The same wire format is spoken by vLLM, Ollama, llama.cpp's server and many gateways,
so ``base_url`` is all it takes to use them. How the transcript maps onto the wire:

- The system prompt is a ``system`` message.
- An assistant message is one ``assistant`` message: its text as ``content`` (``null``
  when it only calls tools) and each ``TOOL_USE`` as a ``tool_calls`` entry whose
  ``function.arguments`` is our ``input`` byte for byte, both ways.
- A user message becomes one ``tool`` message per ``TOOL_RESULT`` (with its
  ``tool_call_id``), then one ``user`` message with its text, if any: a steer riding
  along with tool results comes after them, since tool messages must directly follow
  the call. The API has no error flag on tool messages; the result's text is what the
  model reads, and the library's tool layer already words failures as such.
- Several text blocks in one message go as a list of text parts; one goes as a string.
- A ``refusal`` arrives instead of ``content``; it becomes the answer's text all the same.
- ``finish_reason`` maps ``stop`` → ``end_turn``, ``tool_calls`` → ``tool_use``,
  ``length`` → ``max_tokens``; others are kept as they came, and none is ``""``. An
  answer that calls tools is ``tool_use`` whatever the server said (some local servers
  say ``stop``).
- Streamed, a tool call's ``id`` and ``name`` are taken once: OpenAI sends them in the
  call's first delta, some compatible servers again in every delta.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import attrs

from agentsessions.endpoint import ModelRequest, ModelResponse, Usage
from agentsessions.endpoints._http import HTTPEndpoint, HTTPOptions
from agentsessions.messages import Content, ContentType, Message, Role
from agentsessions.tools import Tool

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens"}


class OpenAIEndpoint(HTTPEndpoint):
    """A model behind the Chat Completions API: OpenAI's, or any server that speaks it.

    ``api_key`` defaults to ``$OPENAI_API_KEY`` (servers without keys accept any string).
    The token limit is sent as ``max_tokens_param``, ``"max_completion_tokens"`` by
    default (OpenAI's current name, required by its reasoning models); set
    ``"max_tokens"`` for servers that only know the older one. With ``stream=True``
    usage is requested with ``stream_options``. The other options (``max_tokens``,
    ``timeout``, ``max_retries``, ``backoff``, ``max_retry_wait``,
    ``retry_read_timeouts``, ``session``, ``headers``) work as for
    :class:`~agentsessions.endpoints.AnthropicEndpoint`.
    """

    provider = "OpenAI"
    key_variable = "OPENAI_API_KEY"
    default_base_url = DEFAULT_BASE_URL
    path = "/chat/completions"
    last_event = "[DONE]"

    def __init__(
        self, model: str, *, max_tokens_param: str = "max_completion_tokens", **options: Unpack[HTTPOptions]
    ) -> None:
        super().__init__(model, **options)
        self.max_tokens_param = max_tokens_param

    def _body(self, request: ModelRequest, max_tokens: int) -> dict[str, Any]:
        return {**request_body(self.model, request, stream=self.stream), self.max_tokens_param: max_tokens}

    def _auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._key.reveal()}"}

    def _read(self, body: Mapping[str, Any]) -> ModelResponse:
        return read_completion(body)

    def _assembly(self) -> _Stream:
        return _Stream()


def request_body(model: str, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
    """The JSON body of a Chat Completions call for ``request``, without the token limit."""
    body: dict[str, Any] = {"model": model, "messages": wire_messages(request.system, request.messages)}
    if request.tools:
        body["tools"] = [wire_tool(tool) for tool in request.tools]
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def wire_tool(tool: Tool) -> dict[str, Any]:
    """A tool definition as the API takes it."""
    function = {"name": tool.name, "description": tool.description, "parameters": dict(tool.input_schema)}
    return {"type": "function", "function": function}


def wire_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The system prompt and the transcript as API messages."""
    wire: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if message.role is Role.ASSISTANT:
            wire.append(_assistant(message))
        else:
            wire.extend(_user(message))
    return wire


def _text_content(texts: list[str]) -> str | list[dict[str, str]]:
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": text} for text in texts]


def _assistant(message: Message) -> dict[str, Any]:
    texts = [block.text for block in message.content if block.type is ContentType.TEXT]
    calls = [
        {"id": use.id, "type": "function", "function": {"name": use.name, "arguments": use.input}}
        for use in message.tool_uses
    ]
    wire: dict[str, Any] = {"role": "assistant", "content": _text_content(texts) if texts else None}
    if calls:
        wire["tool_calls"] = calls
    elif not texts:
        wire["content"] = ""
    return wire


def _user(message: Message) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": block.tool_use_id, "content": block.text}
        for block in message.content
        if block.type is ContentType.TOOL_RESULT
    ]
    texts = [block.text for block in message.content if block.type is ContentType.TEXT]
    if texts or not wire:
        wire.append({"role": "user", "content": _text_content(texts) if texts else ""})
    return wire


def _arguments(value: object) -> str:
    # OpenAI sends a string, kept as is; a few compatible servers send the object itself.
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _response(text: str, calls: list[Content], finish_reason: str | None, usage: Mapping[str, Any]) -> ModelResponse:
    content = ([Content.of_text(text)] if text else []) + calls
    stop_reason = "tool_use" if calls else _STOP_REASONS.get(finish_reason or "", finish_reason or "")
    return ModelResponse(
        Message(Role.ASSISTANT, content),
        stop_reason=stop_reason,
        usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
    )


def read_completion(body: Mapping[str, Any]) -> ModelResponse:
    """The :class:`ModelResponse` for a non-streamed completion (its first choice)."""
    choice = body["choices"][0]
    message = choice["message"]
    calls = [
        Content.tool_use(call["id"], call["function"]["name"], _arguments(call["function"]["arguments"]))
        for call in message.get("tool_calls") or []
    ]
    # A refusal comes instead of content; it is the model's answer all the same.
    text = message.get("content") or message.get("refusal") or ""
    return _response(text, calls, choice.get("finish_reason"), body.get("usage") or {})


@attrs.define
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = attrs.Factory(list)


@attrs.define
class _Stream:
    """The answer being assembled from chunks."""

    text: list[str] = attrs.Factory(list)
    calls: dict[int, _Call] = attrs.Factory(dict)
    finish_reason: str | None = None
    usage: Mapping[str, Any] = attrs.Factory(dict)
    done: bool = False  # never set: the stream's end is its [DONE] event

    def feed(self, chunk: Mapping[str, Any]) -> str:
        """Take one chunk; return the text it adds (``""`` for none)."""
        if chunk.get("usage"):  # the last chunk, with choices empty, when include_usage is set
            self.usage = chunk["usage"]
        added = ""
        for choice in chunk.get("choices") or []:  # vLLM sends null in its usage chunk
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            piece = delta.get("content") or delta.get("refusal")
            if piece:
                added += piece
                self.text.append(piece)
            for part in delta.get("tool_calls") or []:
                self._call_delta(self.calls.setdefault(part["index"], _Call()), part)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        return added

    @staticmethod
    def _call_delta(call: _Call, part: Mapping[str, Any]) -> None:
        # The arguments come in pieces; the id and name come whole, in the first delta from
        # OpenAI and in every delta from some compatible servers: the first one counts.
        call.id = call.id or str(part.get("id") or "")
        function = part.get("function") or {}
        call.name = call.name or str(function.get("name") or "")
        if function.get("arguments") is not None:
            call.arguments.append(_arguments(function["arguments"]))

    def response(self) -> ModelResponse:
        """The finished answer, tool calls in index order."""
        calls = [
            Content.tool_use(call.id, call.name, "".join(call.arguments))
            for call in (self.calls[i] for i in sorted(self.calls))
        ]
        return _response("".join(self.text), calls, self.finish_reason, self.usage)
