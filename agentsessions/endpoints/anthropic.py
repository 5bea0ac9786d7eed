"""Anthropic's Messages API (``POST /v1/messages``) as an :class:`~agentsessions.Endpoint`.

    endpoint = AnthropicEndpoint("claude-sonnet-4-5", stream=True, thinking=4096)   # key from ANTHROPIC_API_KEY

How the transcript maps onto the wire:

- ``TEXT`` blocks are ``text`` blocks (empty ones are left out: the API rejects them);
  ``TOOL_USE`` is ``tool_use`` and ``TOOL_RESULT`` is ``tool_result`` with ``is_error``.
- ``THINKING`` and ``REDACTED_THINKING`` are ``thinking`` (with its ``signature``) and
  ``redacted_thinking`` blocks, sent back exactly as they came, in their place: the API
  needs a turn's thinking back with its tool calls. A thinking block without a signature
  (another provider's reasoning) cannot be sent, and is refused before the request.
- ``IMAGE`` and ``DOCUMENT`` are ``image`` and ``document`` blocks with a ``base64`` or a
  ``url`` source (a ``text/plain`` document goes as a ``text`` source). Those a tool
  returned (they carry its ``tool_use_id``) go inside that ``tool_result``, after its text.
- ``RAW`` blocks of provider ``"anthropic"`` go back byte for byte, in place: server tool
  calls and their results, cited text, compaction, and whatever the API adds later, all
  arrive as ``RAW``. Another provider's ``RAW`` block is left out (its text, if it has
  any, goes as a text block).
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
- ``stop_reason`` is the API's own, ``""`` when it gave none (a stream without
  ``message_delta``, an answer with ``null``): nothing is made up. ``pause_turn`` makes
  the run send the transcript back for the API to go on.

Server-side compaction (``compaction=True``, or a :class:`ServerCompaction` with a trigger
and instructions) sends the ``compact-2026-01-12`` beta header and the
``context_management`` edit ``compact_20260112``. When the input passes the trigger the API
summarises what came before into a ``compaction`` block at the start of its answer, kept
in the transcript as a ``RAW`` block like any other (the store keeps every message). The
API ignores everything before the last compaction block, so each request starts at the
assistant message that holds it: the messages before it stay stored but are not sent. The
tokens the API spent compacting (``usage.iterations`` of type ``compaction``, which the
top-level counts leave out) are added into the answer's :class:`~agentsessions.Usage`.

Prompt caching (``cache=True``, the default) puts ``cache_control`` breakpoints on the last
tool, the system prompt, the end of the previous request's transcript and the end of this
one's: each request reads from the cache what the one before wrote, and writes only what
is new. Four at most, the API's limit. ``Usage.cache_read_tokens`` and
``cache_write_tokens`` say what it saved.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Unpack

import attrs

from agentsessions.endpoint import ModelRequest, ModelResponse
from agentsessions.endpoints._anthropic_read import Stream, dump_input, read_message
from agentsessions.endpoints._headers import check_headers
from agentsessions.endpoints._http import HTTPEndpoint, HTTPOptions, Verbatim, load_json
from agentsessions.messages import MEDIA, Content, ContentType, Message, summary_text
from agentsessions.tools import Tool

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
PROVIDER = "anthropic"
"""The name its ``RAW`` blocks carry."""

EPHEMERAL = {"type": "ephemeral"}
_CACHEABLE = frozenset({"text", "tool_use", "tool_result", "image", "document"})  # thinking cannot be marked
COMPACTION_BETA = "compact-2026-01-12"
"""The ``anthropic-beta`` value that turns server-side compaction on."""
COMPACTION_EDIT = "compact_20260112"
MIN_TRIGGER_TOKENS = 50_000
"""The smallest ``input_tokens`` trigger the API accepts."""

__all__ = [
    "AnthropicEndpoint",
    "ServerCompaction",
    "dump_input",
    "read_message",
    "request_body",
    "start_at_last_compaction",
    "wire_messages",
]


def _trigger(_: ServerCompaction, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be an int or None, got {value!r:.80}")
    if value < MIN_TRIGGER_TOKENS:
        raise ValueError(f"{attribute.name} must be at least {MIN_TRIGGER_TOKENS} (the API's minimum), got {value}")


def _instructions(_: ServerCompaction, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise TypeError(f"{attribute.name} must be a non-empty str or None, got {value!r:.80}")


@attrs.frozen
class ServerCompaction:
    """The Messages API's server-side compaction, as ``AnthropicEndpoint(compaction=...)`` takes it.

    ``trigger_tokens``: compact once the input reaches this many tokens (the API's
    default, 150,000, when ``None``; at least 50,000). ``instructions``: what the summary
    must keep, added to the API's own summarisation prompt (``None``: the API's alone).
    """

    trigger_tokens: int | None = attrs.field(default=None, validator=_trigger)
    instructions: str | None = attrs.field(default=None, validator=_instructions)

    def edit(self) -> dict[str, Any]:
        """The ``compact_20260112`` edit of ``context_management.edits``."""
        edit: dict[str, Any] = {"type": COMPACTION_EDIT}
        if self.trigger_tokens is not None:
            edit["trigger"] = {"type": "input_tokens", "value": self.trigger_tokens}
        if self.instructions is not None:
            edit["instructions"] = self.instructions
        return edit


class AnthropicEndpoint(HTTPEndpoint):
    """Claude through the Messages API.

    ``api_key`` defaults to ``$ANTHROPIC_API_KEY``. With ``stream=True`` the answer
    arrives as server-sent events. ``thinking`` asks for extended thinking: an ``int`` is
    a budget of tokens (``{"type": "enabled", "budget_tokens": N}``), a ``dict`` is sent as
    it is (adaptive modes). ``cache`` places prompt-cache breakpoints (see the module
    docstring); ``cache=False`` sends none. ``version`` is the ``anthropic-version``
    header, and ``headers`` adds others such as ``anthropic-beta``. ``compaction`` turns on
    server-side compaction (see the module docstring): ``True`` for the API's defaults, or a
    :class:`ServerCompaction`. ``extra_body`` adds
    body fields such as ``temperature``, ``tool_choice`` or ``metadata``. The other
    options (``max_tokens``, ``timeout``, ``max_retries``, ``backoff``, ``max_retry_wait``,
    ``retry_read_timeouts``, ``session``) are :class:`~agentsessions.endpoints._http.HTTPEndpoint`'s.
    Failures raise the :class:`~agentsessions.errors.EndpointError` tree.
    """

    provider = "Anthropic"
    key_variable = "ANTHROPIC_API_KEY"
    default_base_url = DEFAULT_BASE_URL
    path = "/v1/messages"
    last_event = "message_stop"
    owned_keys: ClassVar[Mapping[str, str]] = {
        "model": "its model argument",
        "messages": "the transcript",
        "system": "Spec.system",
        "tools": "Spec.tools",
        "stream": "its stream option",
        "max_tokens": "Spec.max_tokens (or its max_tokens option)",
        "thinking": "its thinking option",
    }

    def __init__(
        self,
        model: str,
        *,
        version: str = API_VERSION,
        thinking: int | Mapping[str, Any] | None = None,
        cache: bool = True,
        compaction: bool | ServerCompaction = False,
        **options: Unpack[HTTPOptions],
    ) -> None:
        super().__init__(model, **options)
        self._headers = {**self._headers, **check_headers({"anthropic-version": version})}
        self.thinking = _thinking(thinking)
        if not isinstance(cache, bool):
            raise TypeError(f"cache must be True or False, got {cache!r:.80}")
        self.cache = cache
        self.compaction = _compaction(compaction)
        if self.compaction is not None:
            if "context_management" in self.extra_body:
                raise ValueError(
                    "extra_body cannot set 'context_management' with compaction on: AnthropicEndpoint writes it"
                )
            beta = _with_beta(self._headers, COMPACTION_BETA)
            self._headers = {name: value for name, value in self._headers.items() if name.lower() != "anthropic-beta"}
            self._headers["anthropic-beta"] = beta

    def _body(self, request: ModelRequest, max_tokens: int) -> dict[str, Any]:
        if self.compaction is not None:
            request = attrs.evolve(request, messages=start_at_last_compaction(request.messages))
        body = request_body(self.model, request, max_tokens, stream=self.stream, cache=self.cache)
        if self.thinking is not None:
            body["thinking"] = self.thinking
        if self.compaction is not None:
            body["context_management"] = {"edits": [self.compaction.edit()]}
        return body

    def _auth(self) -> dict[str, str]:
        return {"x-api-key": self._key.reveal()}

    def _read(self, body: Mapping[str, Any]) -> ModelResponse:
        return read_message(body)

    def _assembly(self) -> Stream:
        return Stream()


def _thinking(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"thinking is a budget of tokens above 0, got {value}")
        return {"type": "enabled", "budget_tokens": value}
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"thinking is a token budget (int) or the API's thinking object (dict), got {value!r:.80}")


def _compaction(value: object) -> ServerCompaction | None:
    if isinstance(value, ServerCompaction):
        return value
    if value is True:
        return ServerCompaction()
    if value is False or value is None:
        return None
    raise TypeError(f"compaction must be True, False or a ServerCompaction, got {value!r:.80}")


def _with_beta(headers: Mapping[str, str], beta: str) -> str:
    """The ``anthropic-beta`` header with ``beta`` added to those the caller asked for (comma-separated)."""
    given = next((value for name, value in headers.items() if name.lower() == "anthropic-beta"), "")
    names = [name.strip() for name in given.split(",") if name.strip()]
    return ",".join(names if beta in names else [*names, beta])


def start_at_last_compaction(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """``messages`` from the one holding the last ``compaction`` block on (all of them if none has one).

    The API drops everything before the last compaction block, so sending it is waste;
    the store still holds it. Scanned from the end: a request pays for what follows the
    last compaction, not for the whole history.
    """
    for index in range(len(messages) - 1, -1, -1):
        if any(_is_compaction(block) for block in messages[index].content):
            return messages[index:]
    return messages


def _is_compaction(block: Content) -> bool:
    if block.type is not ContentType.RAW or block.name != PROVIDER or "compaction" not in block.data:
        return False
    try:
        kept = json.loads(block.data)
    except ValueError:
        return False
    return isinstance(kept, dict) and kept.get("type") == "compaction"


def request_body(model: str, request: ModelRequest, max_tokens: int, *, stream: bool, cache: bool) -> dict[str, Any]:
    """The JSON body of a Messages API call for ``request``."""
    messages = wire_messages(request.messages)
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if request.system:
        body["system"] = (
            [{"type": "text", "text": request.system, "cache_control": EPHEMERAL}] if cache else request.system
        )
    if request.tools:
        body["tools"] = [wire_tool(tool) for tool in request.tools]
        if cache:
            body["tools"][-1]["cache_control"] = EPHEMERAL
    if cache:
        _mark_transcript(messages)
    if stream:
        body["stream"] = True
    return body


def _mark_transcript(messages: list[dict[str, Any]]) -> None:
    """Breakpoints at the end of the transcript and where the previous request's ended.

    The previous request ended with the last user message before the model's latest reply;
    a breakpoint there reads exactly the prefix that request wrote, however many blocks
    this step added (the API looks back only 20 blocks from a breakpoint).
    """
    if not messages:
        return
    _mark_last_block(messages[-1])
    replies = [i for i, message in enumerate(messages) if message["role"] == "assistant"]
    if replies and replies[-1] > 0:
        _mark_last_block(messages[replies[-1] - 1])


def _mark_last_block(message: dict[str, Any]) -> None:
    for block in reversed(message["content"]):
        if isinstance(block, dict) and block.get("type") in _CACHEABLE:
            block["cache_control"] = EPHEMERAL
            return


def wire_tool(tool: Tool) -> dict[str, Any]:
    """A tool definition as the API takes it."""
    return {"name": tool.name, "description": tool.description, "input_schema": dict(tool.input_schema)}


def wire_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The transcript as API messages, one role at a time."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        blocks = _wire_blocks(message.content)
        if wire and wire[-1]["role"] == message.role.value:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": message.role.value, "content": blocks})
    return wire


def _wire_blocks(content: Sequence[Content]) -> list[Any]:
    """One message's blocks as the API's; media a tool returned go inside its result."""
    blocks: list[Any] = []
    results: dict[str, dict[str, Any]] = {}
    for block in content:
        if block.type is ContentType.TOOL_RESULT:
            results[block.tool_use_id] = wired = _tool_result(block)
            blocks.append(wired)
        elif block.type in MEDIA and block.tool_use_id in results:
            _attach(results[block.tool_use_id], _media(block))
        else:
            wired_block = _wire_block(block)
            if wired_block is not None:
                blocks.append(wired_block)
    return blocks


def _tool_result(block: Content) -> dict[str, Any]:
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id}
    if block.text:  # content is optional; an empty string is not worth a rejection
        result["content"] = block.text
    if block.is_error:
        result["is_error"] = True
    return result


def _attach(result: dict[str, Any], media: dict[str, Any]) -> None:
    content = result.get("content")
    if not isinstance(content, list):
        content = [{"type": "text", "text": content}] if content else []
        result["content"] = content
    content.append(media)


def _wire_block(block: Content) -> Any:
    kind = block.type
    if kind is ContentType.TEXT:
        return {"type": "text", "text": block.text} if block.text else None
    if kind is ContentType.TOOL_USE:
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": _input_object(block.input)}
    if kind is ContentType.THINKING:
        if not block.signature:
            raise ValueError(
                "the transcript holds a THINKING block without a signature (reasoning from another provider, or "
                "made by hand), which the Messages API refuses; remove it before sending the transcript to Anthropic"
            )
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    if kind is ContentType.REDACTED_THINKING:
        return {"type": "redacted_thinking", "data": block.data}
    if kind in MEDIA:
        return _media(block)
    if kind is ContentType.COMPACTION:
        return {"type": "text", "text": summary_text(block)}
    if kind is ContentType.RAW:
        if block.name == PROVIDER:
            return Verbatim(block.data)
        return {"type": "text", "text": block.text} if block.text else None
    return _tool_result(block)


def _media(block: Content) -> dict[str, Any]:
    wired: dict[str, Any] = {"type": block.type.value, "source": _source(block)}
    if block.type is ContentType.DOCUMENT and block.name:
        wired["title"] = block.name
    return wired


def _source(block: Content) -> dict[str, Any]:
    if block.url:
        return {"type": "url", "url": block.url}
    if block.type is ContentType.DOCUMENT and block.media_type == "text/plain":
        return {"type": "text", "media_type": "text/plain", "data": _plain_text(block.data)}
    return {"type": "base64", "media_type": block.media_type, "data": block.data}


def _plain_text(data: str) -> str:
    try:
        return base64.b64decode(data, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as error:
        raise ValueError(f"a text/plain DOCUMENT's data is not base64 of UTF-8 text: {error}") from None


def _input_object(text: str) -> dict[str, Any]:
    try:
        value = load_json(text)  # non-finite numbers become None: see the module docstring
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
