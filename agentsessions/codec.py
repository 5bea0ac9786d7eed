"""The one JSON form every store persists, with a format version so old rows stay readable.

``dumps``/``loads`` handle a whole transcript. Stores that keep one row per message use
``dump_message``/``load_message``, whose text carries the version too. Tool arguments
stay the JSON *string* the model wrote, so no store ever sees them as a document it could
reorder. The output is always valid UTF-8: a lone surrogate in a str is written as its
JSON escape, which decodes back to the same str.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentsessions.errors import FormatError
from agentsessions.messages import Content, ContentType, Message, check_transcript

FORMAT_VERSION = 1

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode
_decode = json.JSONDecoder().decode


def _content_obj(block: Content) -> dict[str, Any]:
    obj: dict[str, Any] = {"type": block.type.value}
    if block.text:
        obj["text"] = block.text
    if block.id:
        obj["id"] = block.id
    if block.name:
        obj["name"] = block.name
    if block.input:
        obj["input"] = block.input
    if block.tool_use_id:
        obj["tool_use_id"] = block.tool_use_id
    if block.is_error:
        obj["is_error"] = True
    return obj


def _message_obj(message: Message) -> dict[str, Any]:
    return {"role": message.role.value, "content": [_content_obj(c) for c in message.content]}


def _utf8_safe(text: str) -> str:
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        # Only lone surrogates fail, and only inside JSON strings, where "\udXXX" is their escape.
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def dumps(messages: Sequence[Message]) -> str:
    """Serialise a transcript to the versioned JSON form every store keeps."""
    checked = check_transcript(messages)
    return _utf8_safe(_encode({"v": FORMAT_VERSION, "messages": [_message_obj(m) for m in checked]}))


def dump_message(message: Message) -> str:
    """Serialise one message (for stores with a row per message); the text carries the version."""
    return _utf8_safe(_encode({"v": FORMAT_VERSION, **_message_obj(message)}))


def _parse(text: str | bytes, what: str) -> dict[str, Any]:
    try:
        obj = _decode(text if isinstance(text, str) else text.decode())
    except (ValueError, UnicodeDecodeError) as error:
        raise FormatError(f"{what} is not JSON written by agentsessions: {error}") from error
    if not isinstance(obj, dict) or not isinstance(obj.get("v"), int):
        raise FormatError(f"{what} has no format version; it was not written by agentsessions")
    if obj["v"] > FORMAT_VERSION:
        raise FormatError(
            f"{what} is format version {obj['v']}, newer than this agentsessions reads "
            f"({FORMAT_VERSION}); upgrade agentsessions to read it"
        )
    return obj


def _content(obj: dict[str, Any]) -> Content:
    return Content(
        ContentType(obj["type"]),
        text=obj.get("text", ""),
        id=obj.get("id", ""),
        name=obj.get("name", ""),
        input=obj.get("input", ""),
        tool_use_id=obj.get("tool_use_id", ""),
        is_error=obj.get("is_error", False),
    )


def _message(obj: dict[str, Any], what: str) -> Message:
    try:
        return Message(obj["role"], [_content(c) for c in obj["content"]])
    except (KeyError, TypeError, ValueError) as error:
        raise FormatError(f"{what} holds a malformed message: {error!r}") from error


def loads(text: str | bytes) -> list[Message]:
    """Read a transcript written by :func:`dumps` (this version or an older one)."""
    obj = _parse(text, "the transcript")
    messages = obj.get("messages")
    if not isinstance(messages, list):
        raise FormatError("the transcript has no list of messages")
    return [_message(m, "the transcript") for m in messages]


def load_message(text: str | bytes) -> Message:
    """Read one message written by :func:`dump_message`."""
    return _message(_parse(text, "a stored message"), "a stored message")


def encode_text(text: str) -> bytes:
    """A steer's text as bytes that round-trip any str, lone surrogates included."""
    return text.encode("utf-8", "surrogatepass")


def decode_text(data: bytes) -> str:
    """The inverse of :func:`encode_text`."""
    return bytes(data).decode("utf-8", "surrogatepass")
