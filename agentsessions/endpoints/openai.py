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
- ``IMAGE`` blocks are ``image_url`` parts (a ``data:`` URL built from ``media_type`` and
  ``data``, or the block's ``url``); a ``DOCUMENT`` with base64 ``data`` is a ``file`` part
  (``file_data``), one with only a ``url`` goes as a text part naming the link, since the
  API takes no document links. Images and documents a tool returned come in one ``user``
  message right after the tool messages (tool messages hold text only), each introduced
  by a text part naming its call.
- ``THINKING``, ``REDACTED_THINKING`` and every ``RAW`` block are left out: the API takes
  no reasoning back and has no blocks of its own to keep. A ``RAW`` block's text (another
  provider's cited text) goes as text. Reasoning a compatible server returns as
  ``reasoning_content`` (vLLM, DeepSeek, llama.cpp) comes in as a ``THINKING`` block
  without a signature.
- A ``refusal`` arrives instead of ``content``; it becomes the answer's text all the same.
- Usage: ``prompt_tokens`` less ``prompt_tokens_details.cached_tokens`` is
  ``input_tokens``; the cached tokens are ``cache_read_tokens`` (the API writes no cache
  it bills for).
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
from typing import Any, ClassVar, Literal, Unpack

import attrs

from agentsessions.endpoint import ModelRequest, ModelResponse, Usage
from agentsessions.endpoints._http import HTTPEndpoint, HTTPOptions, token_count
from agentsessions.messages import MEDIA, Content, ContentType, Message, Role, summary_text
from agentsessions.tools import Tool

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens"}
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class OpenAIEndpoint(HTTPEndpoint):
    """A model behind the Chat Completions API: OpenAI's, or any server that speaks it.

    ``api_key`` defaults to ``$OPENAI_API_KEY`` (servers without keys accept any string).
    The token limit is sent as ``max_tokens_param``, ``"max_completion_tokens"`` by
    default (OpenAI's current name, required by its reasoning models); set
    ``"max_tokens"`` for servers that only know the older one. ``reasoning_effort`` is
    sent as it is, when set (OpenAI's reasoning models). With ``stream=True`` usage is
    requested with ``stream_options``. ``extra_body`` adds body fields such as
    ``temperature`` or ``tool_choice``. The other options (``max_tokens``, ``timeout``,
    ``max_retries``, ``backoff``, ``max_retry_wait``, ``retry_read_timeouts``,
    ``session``, ``headers``) work as for :class:`~agentsessions.endpoints.AnthropicEndpoint`.
    """

    provider = "OpenAI"
    key_variable = "OPENAI_API_KEY"
    default_base_url = DEFAULT_BASE_URL
    path = "/chat/completions"
    last_event = "[DONE]"
    owned_keys: ClassVar[Mapping[str, str]] = {
        "model": "its model argument",
        "messages": "the transcript and Spec.system",
        "tools": "Spec.tools",
        "stream": "its stream option",
        "stream_options": "its stream option",
        "max_completion_tokens": "Spec.max_tokens (or its max_tokens option)",
        "max_tokens": "Spec.max_tokens (or its max_tokens option)",
        "reasoning_effort": "its reasoning_effort option",
    }

    def __init__(
        self,
        model: str,
        *,
        max_tokens_param: str = "max_completion_tokens",
        reasoning_effort: ReasoningEffort | str | None = None,
        **options: Unpack[HTTPOptions],
    ) -> None:
        super().__init__(model, **options)
        self.max_tokens_param = max_tokens_param
        if reasoning_effort is not None and (not isinstance(reasoning_effort, str) or not reasoning_effort):
            raise TypeError(f"reasoning_effort is a str such as 'low' or 'high', got {reasoning_effort!r:.80}")
        self.reasoning_effort = reasoning_effort

    def _body(self, request: ModelRequest, max_tokens: int) -> dict[str, Any]:
        body = {**request_body(self.model, request, stream=self.stream), self.max_tokens_param: max_tokens}
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        return body

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


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A message's content: one text as a string, anything else as a list of parts."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _text_parts(message: Message) -> list[dict[str, Any]]:
    # A RAW block's text (another provider's cited text) is text here; the rest of it is left out.
    return [
        {"type": "text", "text": summary_text(block) if block.type is ContentType.COMPACTION else block.text}
        for block in message.content
        if block.type is ContentType.TEXT
        or (block.type is ContentType.RAW and block.text)
        or block.type is ContentType.COMPACTION
    ]


def _assistant(message: Message) -> dict[str, Any]:
    texts = _text_parts(message)
    calls = [
        {"id": use.id, "type": "function", "function": {"name": use.name, "arguments": use.input}}
        for use in message.tool_uses
    ]
    wire: dict[str, Any] = {"role": "assistant", "content": _content(texts) if texts else None}
    if calls:
        wire["tool_calls"] = calls
    elif not texts:
        wire["content"] = ""
    return wire


def _user(message: Message) -> list[dict[str, Any]]:
    """One ``tool`` message per result, then a ``user`` message: the media tools returned, then the user's blocks."""
    wire: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if block.type is ContentType.TOOL_RESULT:
            wire.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": block.text})
        elif block.part_of_result:
            parts += [{"type": "text", "text": f"(returned by tool call {block.tool_use_id})"}, _media_part(block)]
    for block in message.content:
        if block.type in MEDIA and not block.part_of_result:
            parts.append(_media_part(block))
        elif block.type is ContentType.TEXT or (block.type is ContentType.RAW and block.text):
            parts.append({"type": "text", "text": block.text})
        elif block.type is ContentType.COMPACTION:
            parts.append({"type": "text", "text": summary_text(block)})
    if parts or not wire:
        wire.append({"role": "user", "content": _content(parts) if parts else ""})
    return wire


def _media_part(block: Content) -> dict[str, Any]:
    if block.type is ContentType.IMAGE:
        url = block.url or f"data:{block.media_type};base64,{block.data}"
        return {"type": "image_url", "image_url": {"url": url}}
    if block.data:
        file = {"filename": block.name or "document", "file_data": f"data:{block.media_type};base64,{block.data}"}
        return {"type": "file", "file": file}
    title = f" {block.name!r}" if block.name else ""
    return {"type": "text", "text": f"(a document{title}: {block.url})"}


def _arguments(value: object) -> str:
    # OpenAI sends a string, kept as is; a few compatible servers send the object itself.
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _usage(counts: object) -> Usage:
    if counts is None:
        return Usage()
    if not isinstance(counts, Mapping):
        raise TypeError(f"usage is {type(counts).__name__}, not an object")
    details = counts.get("prompt_tokens_details") or {}
    if not isinstance(details, Mapping):
        raise TypeError(f"usage.prompt_tokens_details is {type(details).__name__}, not an object")
    cached = token_count(details, "cached_tokens")
    return Usage(
        max(0, token_count(counts, "prompt_tokens") - cached), token_count(counts, "completion_tokens"), cached
    )


def _str_or_none(value: object, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{what} is {type(value).__name__}, not a string")
    return value


def _response(
    text: str, reasoning: str, calls: list[Content], finish_reason: object, usage: object, model: str
) -> ModelResponse:
    content = ([Content.thinking(reasoning)] if reasoning else []) + ([Content.of_text(text)] if text else []) + calls
    finish = _str_or_none(finish_reason, "finish_reason") or ""
    stop_reason = "tool_use" if calls else _STOP_REASONS.get(finish, finish)
    return ModelResponse(Message(Role.ASSISTANT, content), stop_reason=stop_reason, usage=_usage(usage), model=model)


def read_completion(body: Mapping[str, Any]) -> ModelResponse:
    """The :class:`ModelResponse` for a non-streamed completion (its first choice)."""
    choice = body["choices"][0]
    message = choice["message"]
    calls = [
        Content.tool_use(call["id"], call["function"]["name"], _arguments(call["function"]["arguments"]))
        for call in message.get("tool_calls") or []
    ]
    # A refusal comes instead of content; it is the model's answer all the same.
    text = _str_or_none(message.get("content"), "content") or _str_or_none(message.get("refusal"), "refusal") or ""
    reasoning = _str_or_none(message.get("reasoning_content"), "reasoning_content") or ""
    model = _str_or_none(body.get("model"), "model") or ""
    return _response(text, reasoning, calls, choice.get("finish_reason"), body.get("usage"), model)


@attrs.define
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = attrs.Factory(list)


@attrs.define
class _Stream:
    """The answer being assembled from chunks."""

    text: list[str] = attrs.Factory(list)
    reasoning: list[str] = attrs.Factory(list)
    calls: dict[int, _Call] = attrs.Factory(dict)
    finish_reason: str | None = None
    usage: object = None
    model: str = ""  # every chunk names it; the first that does counts
    done: bool = False  # never set: the stream's end is its [DONE] event

    def feed(self, chunk: Mapping[str, Any]) -> str:
        """Take one chunk; return the text it adds (``""`` for none)."""
        if chunk.get("usage") is not None:  # the last chunk, with choices empty, when include_usage is set
            self.usage = chunk["usage"]
        self.model = self.model or _str_or_none(chunk.get("model"), "model") or ""
        added = ""
        for choice in chunk.get("choices") or []:  # vLLM sends null in its usage chunk
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            piece = _str_or_none(delta.get("content"), "content") or _str_or_none(delta.get("refusal"), "refusal")
            if piece:
                added += piece
                self.text.append(piece)
            thought = _str_or_none(delta.get("reasoning_content"), "reasoning_content")
            if thought:
                self.reasoning.append(thought)
            for part in delta.get("tool_calls") or []:
                index = part["index"]
                if type(index) is not int:
                    raise TypeError(f"a tool call's index is {type(index).__name__}, not an integer")
                self._call_delta(self.calls.setdefault(index, _Call()), part)
            self.finish_reason = _str_or_none(choice.get("finish_reason"), "finish_reason") or self.finish_reason
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
        text, reasoning = "".join(self.text), "".join(self.reasoning)
        return _response(text, reasoning, calls, self.finish_reason, self.usage, self.model)
