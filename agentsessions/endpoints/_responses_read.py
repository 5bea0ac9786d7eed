"""Reading the Responses API's answers, whole or streamed, into a :class:`~agentsessions.ModelResponse`.

Both paths end in the same place: the response object's ``output`` items, each turned into
blocks by :func:`item_content`. A stream builds the items from its events the way the
official SDK's ``ResponseStreamState`` accumulates them: ``response.output_item.added``
starts an item, ``response.content_part.added`` a part of a message,
``response.output_text.delta`` (and ``response.refusal.delta``) append text,
``response.function_call_arguments.delta`` appends to a call's ``arguments`` (``.done``
sets them whole), ``response.output_item.done`` replaces the item with the finished one, and
``response.completed`` (or ``response.incomplete``) ends the answer. Like the SDK, the items
of the final response object win when it has any; the accumulated ones fill in when a
server sends that object without its output.

``response.failed`` and ``error`` events never get here: the HTTP layer raises them as
:class:`~agentsessions.errors.EndpointStatusError`. Every field these helpers read is
checked for its type; what is not the API's format raises one of
:data:`~agentsessions.endpoints._http.MALFORMED`, which the HTTP layer reports as
:class:`~agentsessions.errors.EndpointDecodingError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from agentsessions.endpoint import ModelResponse, Usage
from agentsessions.endpoints._http import dump_verbatim, str_field, token_count
from agentsessions.errors import EndpointStatusError
from agentsessions.messages import Content, ContentType, Message, Role

PROVIDER = "openai"
"""The name the ``RAW`` blocks of this API carry (shared with nothing else: Chat Completions keeps none)."""

_INCOMPLETE = {"max_output_tokens": "max_tokens"}


def read_response(body: Mapping[str, Any]) -> ModelResponse:
    """The :class:`ModelResponse` for a response object (a whole answer, or a stream's last event's)."""
    status = str_field(body, "status", "")
    if status == "failed":
        error = body.get("error") or {}
        message = error.get("message") if isinstance(error, Mapping) else None
        code = error.get("code") if isinstance(error, Mapping) else None
        raise EndpointStatusError(str(message or "the response failed"), status=200, type=str(code or ""))
    output = body.get("output") or []
    if not isinstance(output, list):
        raise TypeError(f"output is {type(output).__name__}, not a list")
    content = [block for item in output for block in item_content(item)]
    return ModelResponse(
        Message(Role.ASSISTANT, content),
        stop_reason=_stop_reason(body, status, content),
        usage=usage(body.get("usage")),
        model=str_field(body, "model", ""),
    )


def item_content(item: object) -> list[Content]:
    """The blocks for one output item: a message's text, a function call, or the item kept raw.

    A message with a ``phase`` or with citations (annotations) is kept raw too, its text as
    the block's text: the API asks for both back as they came.
    """
    if not isinstance(item, Mapping) or not isinstance(item.get("type"), str):
        raise TypeError("an output item is not an object with a type")
    kind = item["type"]
    if kind == "message":
        parts = item.get("content") or []
        if not isinstance(parts, list):
            raise TypeError(f"a message's content is {type(parts).__name__}, not a list")
        texts = [_part_text(part) for part in parts]
        if item.get("phase") is not None or any(
            isinstance(part, Mapping) and part.get("annotations") for part in parts
        ):
            # Its phase (commentary or final answer) and citations must go back as they came: kept whole.
            return [Content.raw(PROVIDER, dump_verbatim(item), text="".join(texts))]
        return [Content.of_text(text) for text in texts if text]
    if kind == "function_call":
        return [Content.tool_use(str_field(item, "call_id"), str_field(item, "name"), str_field(item, "arguments", ""))]
    # Reasoning (with its encrypted_content), server tools' calls and whatever the API adds later:
    # kept whole, to go back as they came. Compact JSON, so a whole and a streamed answer agree.
    return [Content.raw(PROVIDER, dump_verbatim(item))]


def _part_text(part: object) -> str:
    # A refusal comes instead of text; it is the model's answer all the same, as for Chat Completions.
    if not isinstance(part, Mapping):
        raise TypeError("a message's content part is not an object")
    if part.get("type") == "output_text":
        return str_field(part, "text", "")
    if part.get("type") == "refusal":
        return str_field(part, "refusal", "")
    return ""


def _stop_reason(body: Mapping[str, Any], status: str, content: list[Content]) -> str:
    if any(block.type is ContentType.TOOL_USE for block in content):
        return "tool_use"
    if status == "completed":
        return "end_turn"
    if status == "incomplete":
        details = body.get("incomplete_details") or {}
        reason = str_field(details, "reason", "") if isinstance(details, Mapping) else ""
        return _INCOMPLETE.get(reason, reason or "incomplete")
    return status


def usage(counts: object) -> Usage:
    """The API's ``usage``: ``cached_tokens`` are cache reads, ``cache_write_tokens`` writes, the rest input."""
    if counts is None:
        return Usage()
    if not isinstance(counts, Mapping):
        raise TypeError(f"usage is {type(counts).__name__}, not an object")
    details = counts.get("input_tokens_details") or {}
    if not isinstance(details, Mapping):
        raise TypeError(f"usage.input_tokens_details is {type(details).__name__}, not an object")
    read, written = token_count(details, "cached_tokens"), token_count(details, "cache_write_tokens")
    fresh = max(0, token_count(counts, "input_tokens") - read - written)
    return Usage(fresh, token_count(counts, "output_tokens"), read, written)


def _index(event: Mapping[str, Any], key: str) -> int:
    index = event[key]
    if type(index) is not int:
        raise TypeError(f"{key} is {type(index).__name__}, not an integer")
    return index


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} is {type(value).__name__}, not an object")
    return dict(value)


@attrs.define
class Stream:
    """The answer being assembled from stream events."""

    items: dict[int, dict[str, Any]] = attrs.Factory(dict)
    final: dict[str, Any] | None = None  # the response object of the last event
    model: str = ""  # from the first event's response object, should the last one lack it
    done: bool = False

    def feed(self, event: Mapping[str, Any]) -> str:
        """Take one event; return the text it adds (``""`` for none)."""
        kind = event["type"]
        if kind == "response.created":
            self.model = str_field(_object(event["response"], "the response"), "model", "")
        elif kind in ("response.output_item.added", "response.output_item.done"):
            # Some servers send an added event without its item (the SDK skips those too).
            if kind == "response.output_item.done" or event.get("item") is not None:
                self.items[_index(event, "output_index")] = _object(event["item"], "an output item")
        elif kind == "response.content_part.added":
            self._parts(event).append(_object(event["part"], "a content part"))
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            return self._append_text(event, "text" if kind == "response.output_text.delta" else "refusal")
        elif kind == "response.function_call_arguments.delta":
            item = self.items[_index(event, "output_index")]
            item["arguments"] = str_field(item, "arguments", "") + str_field(event, "delta")
        elif kind == "response.function_call_arguments.done":
            self.items[_index(event, "output_index")]["arguments"] = str_field(event, "arguments")
        elif kind in ("response.completed", "response.incomplete"):
            self.final = _object(event["response"], "the response")
            self.done = True
        return ""  # in_progress, the .done events of parts, and events added later carry nothing new

    def _parts(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        item = self.items[_index(event, "output_index")]
        parts = item.setdefault("content", [])
        if not isinstance(parts, list):
            raise TypeError(f"a message's content is {type(parts).__name__}, not a list")
        return parts

    def _append_text(self, event: Mapping[str, Any], key: str) -> str:
        parts, index, piece = self._parts(event), _index(event, "content_index"), str_field(event, "delta")
        if index == len(parts):  # a server that sends no content_part.added
            parts.append({"type": "output_text" if key == "text" else "refusal", key: ""})
        part = parts[index]
        if not isinstance(part, dict):
            raise TypeError("a message's content part is not an object")
        part[key] = str_field(part, key, "") + piece
        return piece

    def response(self) -> ModelResponse:
        """The finished answer: the final object's items, or the accumulated ones in index order."""
        final = self.final or {}
        if not final.get("output"):
            final = {**final, "output": [self.items[i] for i in sorted(self.items)]}
        if not final.get("model"):
            final = {**final, "model": self.model}
        return read_response(final)
