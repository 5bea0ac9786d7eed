"""Reading the Messages API's answers, whole or streamed, into a :class:`~agentsessions.ModelResponse`.

Both paths end in the same place: each content block as the API's JSON object, turned into
a :class:`~agentsessions.Content` by :func:`block_content`. A stream builds those objects
from its events the way the official SDK accumulates them: ``text_delta`` appends text,
``thinking_delta`` thinking, ``signature_delta`` sets the signature, ``citations_delta``
appends a citation, ``input_json_delta`` pieces make a tool call's input (kept as the exact
text the model wrote), ``compaction_delta`` appends to a compaction's summary and sets its
``encrypted_content`` (a piece's null leaves either as it was), and any other delta sets
the fields it carries. The answering model is ``message_start``'s, or the one the last
``fallback`` block hands over to. Every field these helpers read is checked for its type; what is not
the API's format raises one of :data:`~agentsessions.endpoints._http.MALFORMED`, which the HTTP layer
reports as :class:`~agentsessions.EndpointDecodingError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from agentsessions.endpoint import ModelResponse, Usage
from agentsessions.endpoints._http import Verbatim, dump_verbatim, load_json, str_field, token_count
from agentsessions.messages import Content, Message, Role

PROVIDER = "anthropic"


def dump_input(value: object) -> str:
    """A received ``input`` object as text, written the way the API's stream writes it."""
    return json.dumps(value, ensure_ascii=False)


def read_message(body: Mapping[str, Any]) -> ModelResponse:
    """The :class:`ModelResponse` for a non-streamed Messages API answer."""
    blocks = [block_content(block, None) for block in body["content"]]
    return ModelResponse(
        Message(Role.ASSISTANT, blocks),
        stop_reason=_stop_reason(body.get("stop_reason")),
        usage=usage(body.get("usage")),
        model=str_field(body, "model", ""),
    )


def block_content(block: Mapping[str, Any], streamed_input: str | None) -> Content:
    """The :class:`Content` for one of the API's content blocks.

    ``streamed_input`` is the text a stream's ``input_json_delta`` pieces made, for a block
    that takes input (``None`` for a whole answer, whose input is already an object).
    """
    kind = block["type"]
    if kind == "text" and not block.get("citations"):
        return Content.of_text(str_field(block, "text"))
    if kind == "tool_use":
        return Content.tool_use(
            str_field(block, "id"), str_field(block, "name"), streamed_input or dump_input(block["input"])
        )
    if kind == "thinking":
        return Content.thinking(str_field(block, "thinking"), str_field(block, "signature", ""))
    if kind == "redacted_thinking":
        return Content.redacted_thinking(str_field(block, "data"))
    # Anything else, kept as the API wrote it: its text, for a cited text block, is what a reader sees.
    if streamed_input is not None and "input" in block:
        block = {**block, "input": _input_or_empty(streamed_input)}
    text = str_field(block, "text") if kind == "text" else ""
    return Content.raw(PROVIDER, dump_verbatim(block), text=text)


def _input_or_empty(text: str) -> Verbatim | dict[str, Any]:
    # The exact text when it is a JSON object, as the API wants it back; else an empty one.
    try:
        value = load_json(text) if text else None
    except ValueError:
        value = None
    return Verbatim(text) if isinstance(value, dict) else {}


def _stop_reason(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"stop_reason is {type(value).__name__}, not a string")
    return value


def usage(counts: object) -> Usage:
    """The API's ``usage`` object as a :class:`Usage` (``None``: nothing counted)."""
    if counts is None:
        return Usage()
    if not isinstance(counts, Mapping):
        raise TypeError(f"usage is {type(counts).__name__}, not an object")
    counted = _counts(counts)
    iterations = counts.get("iterations")
    if isinstance(iterations, list):
        # Server-side compaction's own call is billed, but left out of the top-level counts.
        for iteration in iterations:
            if isinstance(iteration, Mapping) and iteration.get("type") == "compaction":
                counted += _counts(iteration)
    return counted


def _counts(counts: Mapping[str, Any]) -> Usage:
    return Usage(
        token_count(counts, "input_tokens"),
        token_count(counts, "output_tokens"),
        token_count(counts, "cache_read_input_tokens"),
        token_count(counts, "cache_creation_input_tokens"),
    )


@attrs.define
class _Block:
    fields: dict[str, Any]
    input: list[str] | None = None  # the input_json_delta pieces, once there is one


@attrs.define
class Stream:
    """The answer being assembled from stream events."""

    blocks: dict[int, _Block] = attrs.Factory(dict)
    stop_reason: str = ""
    counts: dict[str, Any] = attrs.Factory(dict)
    model: str = ""
    done: bool = False

    def feed(self, event: Mapping[str, Any]) -> str:
        """Take one event; return the text it adds (``""`` for none)."""
        kind = event["type"]
        if kind == "message_start":
            self.model = str_field(event["message"], "model", "")
            self._count(event["message"].get("usage"))
        elif kind == "content_block_start":
            start = event["content_block"]
            if not isinstance(start, dict) or not isinstance(start.get("type"), str):
                raise TypeError("content_block_start without a content block")
            self.blocks[_index(event)] = _Block(dict(start))
            if start["type"] == "fallback" and isinstance(start.get("to"), Mapping):
                # The model that served the answer, as a whole answer's `model` names it (the SDK does the same).
                self.model = str_field(start["to"], "model", self.model)
        elif kind == "content_block_delta":
            return _delta(self.blocks[_index(event)], event["delta"])
        elif kind == "message_delta":
            self.stop_reason = _stop_reason(event["delta"].get("stop_reason")) or self.stop_reason
            self._count(event.get("usage"))
        elif kind == "message_stop":
            self.done = True
        return ""  # ping, content_block_stop and event types added later carry nothing we keep

    def _count(self, counts: object) -> None:
        if counts is None:
            return
        if not isinstance(counts, Mapping):
            raise TypeError(f"usage is {type(counts).__name__}, not an object")
        # Counts are cumulative, and newer API versions resend input_tokens in message_delta.
        self.counts.update({key: value for key, value in counts.items() if value is not None})

    def response(self) -> ModelResponse:
        """The finished answer, blocks in index order."""
        content = [
            block_content(block.fields, "".join(block.input) if block.input is not None else None)
            for block in (self.blocks[i] for i in sorted(self.blocks))
        ]
        message = Message(Role.ASSISTANT, content)
        return ModelResponse(message, stop_reason=self.stop_reason, usage=usage(self.counts), model=self.model)


def _index(event: Mapping[str, Any]) -> int:
    index = event["index"]
    if type(index) is not int:
        raise TypeError(f"a block index is {type(index).__name__}, not an integer")
    return index


def _delta(block: _Block, delta: Mapping[str, Any]) -> str:
    fields, kind = block.fields, delta["type"]
    if kind == "text_delta":
        piece = str_field(delta, "text")
        fields["text"] = str_field(fields, "text", "") + piece
        return piece
    if kind == "input_json_delta":
        if block.input is None:
            block.input = []
        block.input.append(str_field(delta, "partial_json"))
    elif kind == "thinking_delta":
        fields["thinking"] = str_field(fields, "thinking", "") + str_field(delta, "thinking")
    elif kind == "signature_delta":
        fields["signature"] = str_field(delta, "signature")
    elif kind == "citations_delta":
        fields["citations"] = [*(fields.get("citations") or []), delta["citation"]]
    elif kind == "compaction_delta":
        _compaction_delta(fields, delta)
    else:
        fields.update((key, value) for key, value in delta.items() if key != "type")
    return ""


def _compaction_delta(fields: dict[str, Any], delta: Mapping[str, Any]) -> None:
    """A piece of a compaction block: its summary grows as text does; the opaque part is the last one sent.

    A piece without ``content`` (null) adds nothing: it must not erase the summary so far,
    which goes back to the API as it came.
    """
    if delta.get("content") is not None:
        fields["content"] = str_field(fields, "content", "") + str_field(delta, "content")
    if delta.get("encrypted_content") is not None:
        fields["encrypted_content"] = str_field(delta, "encrypted_content")
    fields.update((key, value) for key, value in delta.items() if key not in _COMPACTION_DELTA_KEYS)


_COMPACTION_DELTA_KEYS = frozenset({"type", "content", "encrypted_content"})
