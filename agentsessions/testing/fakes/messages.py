"""A local Anthropic Messages API: the real wire format, the real checks, a scripted model.

    with FakeMessagesAPI([Reply([text("Hi")])], api_key=KEY) as fake:
        endpoint = AnthropicEndpoint("claude-test", api_key=KEY, base_url=fake.origin)

Replies are written as the API's content blocks. Streamed, a tool call's input goes out
as pieces of ``dumps(input, ensure_ascii=False)``, the same text the non-streamed
answer's object serialises to (an infinite float is the number ``1e999`` in both), so
the two transcripts must come out identical (the real API's stream writes its JSON with
the same ``", "`` and ``": "`` separators).

The checks are the ones the real API makes on what this library sends: the key and
version headers, roles that alternate, tool results that answer the tool calls just
before them (and every call answered), non-empty text, objects as tool input, and, for
models without prefill (``prefill=False``), a conversation that ends with the user.
With thinking enabled, the last assistant message of a tool loop must start with its
thinking block, and every thinking block must carry the signature this fake gave it
(:func:`thinking` signs). At most four ``cache_control`` breakpoints, never on thinking.

Streamed, each block type goes as the API sends it: text as ``text_delta`` pieces (a
cited one with a ``citations_delta`` per citation first), thinking as ``thinking_delta``
pieces and one ``signature_delta``, the input of ``tool_use``, ``server_tool_use`` and
``mcp_tool_use`` as ``input_json_delta`` pieces, a compaction's summary as
``compaction_delta`` pieces (each with an interim ``encrypted_content``, then a last one
with ``content: null`` and the final ``encrypted_content``, as the SDK's
``compaction_multi_delta_response`` recording has it), every other block whole in its start.

Server-side compaction: a ``context_management`` edit ``compact_20260112`` (its trigger an
``input_tokens`` count of at least 50,000) is refused without the ``compact-2026-01-12``
beta header. A :class:`Reply` with
``compaction_usage`` reports the compaction's tokens as the API does, in ``usage.iterations``
(left out of the top-level counts). The refusal wordings are this fake's own.

``count_tokens=True`` makes the usage the fake's own count, with the prompt cache the API
documents: see :class:`PromptCache`.

``context_window=M`` refuses, after every other check, a request whose prompt counts more
than ``M`` tokens, as the API does: HTTP 400, ``invalid_request_error``, ``prompt is too
long: N tokens > M maximum``. The count is :func:`prompt_tokens`: one token per four bytes of
each block's JSON (tools, system, messages), at least one a block; deterministic, and the
same count the usage reports (a window turns ``count_tokens`` on).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from agentsessions.testing.fakes.prompt_cache import PromptCache, prompt_tokens
from agentsessions.testing.fakes.server import FAKE_KEY, Fail, FakeServer, Handler, Rejected, dumps, pieces

PREFILL_REFUSED = (
    "This model does not support assistant message prefill. The conversation must end with a user message."
)


def text(value: str) -> dict[str, Any]:
    """A text block."""
    return {"type": "text", "text": value}


def tool_use(id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    """A tool_use block."""
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def sign(reasoning: str) -> str:
    """The signature this fake gives a thinking block (the API's is opaque; this one is checkable)."""
    return "sig_" + hashlib.sha256(reasoning.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def thinking(reasoning: str) -> dict[str, Any]:
    """A thinking block, signed as this fake checks on the way back."""
    return {"type": "thinking", "thinking": reasoning, "signature": sign(reasoning)}


THINKING_FIRST = (
    "Expected `thinking` or `redacted_thinking`, but found `{found}`. When `thinking` is enabled, a final "
    "`assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and "
    "`tool_result` blocks). We recommend you include thinking blocks from previous turns."
)
_STREAMED_INPUT = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


@attrs.frozen
class Reply:
    """What the scripted model answers; ``cut_after``/``error_after`` break a stream after that many events.

    ``silent_stop`` leaves the stop reason out: ``null`` in a whole answer, and no
    ``message_delta`` event in a stream, as a proxy or a truncated recording may.
    ``model`` is the model the answer names (the one asked for when ``None``).
    """

    content: Sequence[dict[str, Any]]
    stop_reason: str | None = None
    cache_read: int = 0
    cache_write: int = 0
    silent_stop: bool = False
    input_tokens: int = 11
    output_tokens: int = 7
    cut_after: int | None = None
    error_after: int | None = None
    model: str | None = None
    compaction_usage: tuple[int, int] | None = None  # (input, output) tokens of a compaction iteration


COMPACTION_BETA = "compact-2026-01-12"


def _invalid(message: str) -> Rejected:
    return Rejected(400, "invalid_request_error", message)


class FakeMessagesAPI(FakeServer):
    """The Messages API at ``origin``; see the module docstring."""

    path = "/v1/messages"

    def __init__(
        self,
        script: Sequence[object] = (),
        *,
        api_key: str = FAKE_KEY,
        prefill: bool = True,
        count_tokens: bool = False,
        context_window: int | None = None,
    ) -> None:
        super().__init__(script, api_key=api_key)
        self.prefill = prefill
        self.context_window = context_window
        self.cache = PromptCache() if count_tokens or context_window is not None else None
        self.usages: list[dict[str, Any]] = []  # the usage of each answer, in order
        self._ids = 0

    def error_body(self, fail: Fail, param: str | None, request_id: str) -> object:
        """``{"type": "error", "error": {...}, "request_id": ...}``."""
        return {"type": "error", "error": {"type": fail.type, "message": fail.message}, "request_id": request_id}

    def check(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        """The real API's refusals, for what a client can get wrong."""
        if "x-api-key" not in headers:
            raise Rejected(401, "authentication_error", "x-api-key header is required")
        if headers["x-api-key"] != self.api_key:
            raise Rejected(401, "authentication_error", "invalid x-api-key")
        if "anthropic-version" not in headers:
            raise _invalid("anthropic-version: header is required")
        if not headers.get("content-type", "").startswith("application/json"):
            raise _invalid("Content-Type must be application/json")
        for field, kind in (("model", str), ("max_tokens", int), ("messages", list)):
            if field not in body:
                raise _invalid(f"{field}: Field required")
            if not isinstance(body[field], kind):
                raise _invalid(f"{field}: Input should be a valid {kind.__name__}")
        if not isinstance(body.get("system", ""), (str, list)):
            raise _invalid("system: Input should be a valid string")
        for index, tool in enumerate(body.get("tools", [])):
            if not isinstance(tool.get("name"), str) or not isinstance(tool.get("input_schema"), dict):
                raise _invalid(f"tools.{index}: name and input_schema are required")
        self._check_messages(body["messages"])
        _check_compaction(headers, body)
        self._check_thinking(body)
        self._check_breakpoints(body)
        if self.context_window is not None and (size := prompt_tokens(body)) > self.context_window:
            raise _invalid(f"prompt is too long: {size} tokens > {self.context_window} maximum")

    @staticmethod
    def _check_thinking(body: dict[str, Any]) -> None:
        for index, message in enumerate(body["messages"]):
            for number, block in enumerate(_blocks(message)):
                if block.get("type") == "thinking" and block.get("signature") != sign(block.get("thinking", "")):
                    raise _invalid(f"messages.{index}.content.{number}: Invalid `signature` in `thinking` block")
        if (body.get("thinking") or {}).get("type") not in ("enabled", "adaptive"):
            return
        replies = [i for i, m in enumerate(body["messages"]) if m["role"] == "assistant"]
        if not replies:
            return
        last = _blocks(body["messages"][replies[-1]])
        if any(b.get("type") == "tool_use" for b in last) and last[0].get("type") not in (
            "thinking",
            "redacted_thinking",
        ):
            where = f"messages.{replies[-1]}.content.0.type"
            raise _invalid(f"{where}: " + THINKING_FIRST.format(found=last[0].get("type")))

    @staticmethod
    def _check_breakpoints(body: dict[str, Any]) -> None:
        system = body.get("system")
        blocks = [*body.get("tools", []), *(system if isinstance(system, list) else [])]
        blocks += [b for m in body["messages"] for b in _blocks(m)]
        marked = [b for b in blocks if "cache_control" in b]
        if len(marked) > 4:
            raise _invalid(f"A maximum of 4 blocks with cache_control may be provided. Found {len(marked)}.")
        for block in marked:
            if block.get("type") in ("thinking", "redacted_thinking"):
                raise _invalid("messages: thinking blocks cannot be marked with cache_control")

    def _check_messages(self, messages: list[Any]) -> None:
        if not messages:
            raise _invalid("messages: at least one message is required")
        for index, message in enumerate(messages):
            if message.get("role") not in ("user", "assistant"):
                raise _invalid(f"messages.{index}.role: Input should be 'user' or 'assistant'")
            if index and message["role"] == messages[index - 1]["role"]:
                raise _invalid(
                    f'messages: roles must alternate between "user" and "assistant", '
                    f'but found multiple "{message["role"]}" roles in a row'
                )
            self._check_blocks(index, message, messages[index - 1] if index else None)
            self._check_answered(index, message, messages[index + 1] if index + 1 < len(messages) else None)
        if messages[-1]["role"] == "assistant" and not self.prefill:
            raise _invalid(PREFILL_REFUSED)

    @staticmethod
    def _check_blocks(index: int, message: dict[str, Any], previous: dict[str, Any] | None) -> None:
        content = message.get("content")
        blocks = [text(content)] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise _invalid(f"messages.{index}.content: Input should be a valid list")
        called = {b["id"] for b in _blocks(previous) if b.get("type") == "tool_use"} if previous else set()
        for number, block in enumerate(blocks):
            where = f"messages.{index}.content.{number}"
            if block.get("type") == "text" and not block.get("text"):
                raise _invalid("messages: text content blocks must be non-empty")
            if block.get("type") == "tool_use" and not isinstance(block.get("input"), dict):
                raise _invalid(f"{where}.tool_use.input: Input should be a valid dictionary")
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in called:
                raise _invalid(
                    f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: {block.get('tool_use_id')}. "
                    "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                )

    @staticmethod
    def _check_answered(index: int, message: dict[str, Any], following: dict[str, Any] | None) -> None:
        calls = [b["id"] for b in _blocks(message) if b.get("type") == "tool_use"]
        if not calls or following is None:
            return  # a trailing tool call is what an assistant prefill may end with
        answered = {b.get("tool_use_id") for b in _blocks(following) if b.get("type") == "tool_result"}
        missing = [call for call in calls if call not in answered]
        if missing:
            raise _invalid(
                f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block "
                "in the next message."
            )

    def reply(self, handler: Handler, body: dict[str, Any], answer: object) -> None:
        """Answer with a Message object, or stream it as the API's events."""
        assert isinstance(answer, Reply), f"not an answer this fake knows: {answer!r}"
        self._ids += 1
        message = {
            "id": f"msg_fake{self._ids:04d}",
            "type": "message",
            "role": "assistant",
            "model": answer.model or body["model"],
            "content": list(answer.content),
            "stop_reason": None if answer.silent_stop else answer.stop_reason or _stop_reason(answer.content),
            "stop_sequence": None,
            "usage": self._usage(body, answer),
        }
        if not body.get("stream"):
            handler.send_json(200, message)
            return
        handler.start_stream()
        for number, event in enumerate(_events(message)):
            if number == answer.cut_after:
                return self.drop(handler)
            if number == answer.error_after:
                error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
                handler.send_event(json.dumps(error), "error")
                return handler.end_stream()
            if event["type"] != "message_delta" or not answer.silent_stop:
                handler.send_event(dumps(event, ensure_ascii=False), event["type"])
        handler.end_stream()

    def _usage(self, body: dict[str, Any], answer: Reply) -> dict[str, Any]:
        read, write, uncached = (answer.cache_read, answer.cache_write, answer.input_tokens)
        if self.cache is not None:
            with self._lock:
                read, write, uncached = self.cache.account(body)
        usage: dict[str, Any] = {
            "input_tokens": uncached,
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
            "output_tokens": answer.output_tokens,
        }
        if answer.compaction_usage is not None:
            compacting, compacted = answer.compaction_usage
            usage["iterations"] = [
                {"type": "compaction", **_iteration(compacting, compacted)},
                {"type": "message", **{key: usage[key] for key in _COUNTS}},
            ]
        self.usages.append(usage)
        return usage


_COUNTS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")


def _iteration(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    }


def _check_compaction(headers: dict[str, str], body: dict[str, Any]) -> None:
    """The beta header for compaction, and the ``compact_20260112`` edit's shape."""
    beta = COMPACTION_BETA in [name.strip() for name in headers.get("anthropic-beta", "").split(",")]
    management = body.get("context_management")
    if management is not None:
        edits = management.get("edits") if isinstance(management, dict) else None
        if not isinstance(edits, list):
            raise _invalid("context_management.edits: Input should be a valid list")
        for number, edit in enumerate(edits):
            if isinstance(edit, dict) and edit.get("type") == "compact_20260112":
                _check_edit(f"context_management.edits.{number}", edit, beta)


def _check_edit(where: str, edit: dict[str, Any], beta: bool) -> None:
    if not beta:
        raise _invalid(f"{where}: the compact_20260112 edit needs the anthropic-beta header {COMPACTION_BETA}")
    unknown = set(edit) - {"type", "trigger", "instructions", "pause_after_compaction"}
    if unknown:
        raise _invalid(f"{where}.{sorted(unknown)[0]}: Extra inputs are not permitted")
    trigger = edit.get("trigger")
    if trigger is not None:
        value = trigger.get("value") if isinstance(trigger, dict) else None
        if not isinstance(trigger, dict) or trigger.get("type") != "input_tokens" or not isinstance(value, int):
            raise _invalid(f"{where}.trigger: expected {{'type': 'input_tokens', 'value': int}}")
        if value < 50_000:
            raise _invalid(f"{where}.trigger.value: Input should be greater than or equal to 50000")
    if not isinstance(edit.get("instructions") or "", str):
        raise _invalid(f"{where}.instructions: Input should be a valid string")


def _blocks(message: dict[str, Any] | None) -> list[dict[str, Any]]:
    content = (message or {}).get("content")
    return content if isinstance(content, list) else []


def _stop_reason(content: Sequence[dict[str, Any]]) -> str:
    return "tool_use" if any(block["type"] == "tool_use" for block in content) else "end_turn"


def _events(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The stream of ``message``, event by event, in the API's order."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield {"type": "message_start", "message": start}
    for index, block in enumerate(message["content"]):
        yield from block_events(index, block)
        yield {"type": "content_block_stop", "index": index}
    delta: dict[str, Any] = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    counts = {"output_tokens": usage["output_tokens"]}
    if "iterations" in usage:  # the whole answer's breakdown comes with the final counts
        counts["iterations"] = usage["iterations"]
    yield {"type": "message_delta", "delta": delta, "usage": counts}
    yield {"type": "message_stop"}


def block_events(index: int, block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One block's start and deltas, as the API streams its type."""

    def delta(**fields: Any) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": fields}

    kind = block["type"]
    if kind == "text":
        start = text("") if "citations" not in block else {**text(""), "citations": []}
        yield {"type": "content_block_start", "index": index, "content_block": start}
        if index == 0:
            yield {"type": "ping"}
        for citation in block.get("citations") or []:
            yield delta(type="citations_delta", citation=citation)
        for piece in pieces(block["text"]):
            yield delta(type="text_delta", text=piece)
    elif kind == "thinking":
        yield {
            "type": "content_block_start",
            "index": index,
            "content_block": {**block, "thinking": "", "signature": ""},
        }
        for piece in pieces(block["thinking"]):
            yield delta(type="thinking_delta", thinking=piece)
        yield delta(type="signature_delta", signature=block["signature"])
    elif kind == "compaction":
        yield {
            "type": "content_block_start",
            "index": index,
            "content_block": {**block, "content": None, "encrypted_content": None},
        }
        for number, piece in enumerate(pieces(block["content"] or "", 8)):
            yield delta(type="compaction_delta", content=piece, encrypted_content=f"interim-{number}")
        yield delta(type="compaction_delta", content=None, encrypted_content=block["encrypted_content"])
    elif kind in _STREAMED_INPUT:
        yield {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}}
        # The API's first input_json_delta is empty; an empty input has no other.
        streamed = pieces(dumps(block["input"], ensure_ascii=False), 6) if block["input"] else []
        for piece in ["", *streamed]:
            yield delta(type="input_json_delta", partial_json=piece)
    else:
        yield {"type": "content_block_start", "index": index, "content_block": block}
