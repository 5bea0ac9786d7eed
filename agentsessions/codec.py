"""The one JSON form every store persists, with a format version so old rows stay readable.

``dumps``/``loads`` handle a whole transcript. Stores that keep one row per message use
``dump_message``/``load_message``, whose text carries the version too. Tool arguments
stay the JSON *string* the model wrote, so no store ever sees them as a document it could
reorder. The output is always valid UTF-8 and every ``str`` comes back exactly.

A Python ``str`` may hold surrogate code points, which UTF-8 cannot carry. JSON's only way
to write one is a ``\\udXXX`` escape, and a high escape followed by a low one means a
single astral character, so ``"\\ud83d\\ude00"`` (two code points) would come back as
``"😀"`` (one). Since version 2 a field holding surrogates is written as a list of pieces
instead: text as JSON strings, each surrogate as its code point, an integer, so
``"x\\ud83d\\ude00y"`` is ``["x",55357,56832,"y"]``. Every other field stays a plain JSON
string. Version 1 wrote surrogates as escapes; it is still read, with JSON's meaning.

Version 3 added the block types of the whole transcript (thinking, images and documents,
providers' raw blocks) and their fields (``signature``, ``data``, ``media_type``, ``url``).
It also made every block carry only the fields its type uses. Rows of versions 1 and 2
are read as they were written, except that a field a block's type does not use (which
versions 1 and 2 kept, though the library never wrote one) is left out.

Version 4 added the compaction block (a summary of the transcript's first messages) and its
one integer field, ``covers``. Rows of version 3 read unchanged.

Reading decodes with msgspec when it is installed, and with the stdlib otherwise. Rows as
this version writes them (each begins ``{"v":4,``) are decoded by msgspec in C, their types
and each block's shape checked on the way (:func:`_row_decoders` says how); anything
msgspec refuses there (a field spelled as pieces, a row of another version, foreign text)
takes the careful path, which decides. That path decodes with msgspec too, which returns
the same values as the stdlib but refuses a ``\\udXXX`` escape of a lone surrogate (which
version 1 rows may hold) and anything else that is not strict JSON; such text is decoded
again by the stdlib, whose result or error is the one used.
"""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import attrs

from agentsessions.errors import FormatError
from agentsessions.messages import FIELDS, STR_FIELDS, Content, Message, Role, check_transcript

FORMAT_VERSION = 4
_PIECES_SINCE = 2  # the first version that writes a field with surrogates as a list of pieces
_SHAPED_SINCE = 3  # the first version whose blocks carry only the fields their type uses
_USED_FIELDS = {kind.value: used for kind, used in FIELDS.items()}
_SURROGATE = re.compile("([\ud800-\udfff])")

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode
_stdlib_decode = json.JSONDecoder().decode


def _row_decoders() -> tuple[Callable[[str | bytes], Message], Callable[[Sequence[str | bytes]], list[Message]]]:
    """msgspec's decoders of rows of this version: of one row, and of a whole transcript's rows.

    Each decodes in two C passes: the JSON into structs with Message's and Content's fields
    and types (and a ``v`` that must be this version), then the structs into Messages,
    every block checked by ``Content.__attrs_post_init__`` on the way. One pass straight
    into Message costs three times as much: for each field a row leaves out (most of a
    block's twelve), msgspec asks whether the slot is set, which raises and swallows an
    AttributeError, before it sets the default. A struct takes its defaults for nothing,
    and converting it sets every field without asking. The rows' structs go into one
    ``convert`` call, so no Python code runs per row.
    """
    import msgspec

    hints = typing.get_type_hints(Content)
    fields = [
        (field.name, hints[field.name])
        if field.default is attrs.NOTHING
        else (field.name, hints[field.name], field.default)
        for field in attrs.fields(Content)
    ]
    # gc=False: short-lived structs that hold no cycles need not be tracked by the collector.
    block = msgspec.defstruct("StoredContent", fields, gc=False)
    version = Annotated[int, msgspec.Meta(ge=FORMAT_VERSION, le=FORMAT_VERSION)]
    content = types.GenericAlias(list, (block,))
    row = msgspec.defstruct("StoredMessage", [("v", version), ("role", Role), ("content", content)], gc=False)
    decode_row, convert = msgspec.json.Decoder(row).decode, msgspec.convert

    def one(text: str | bytes) -> Message:
        message: Message = convert(decode_row(text), Message, from_attributes=True)
        return message

    def many(texts: Sequence[str | bytes]) -> list[Message]:
        messages: list[Message] = convert(list(map(decode_row, texts)), list[Message], from_attributes=True)
        return messages

    return one, many


_fast_decode: Callable[[str | bytes], Any] | None
_decode_message: Callable[[str | bytes], Message] | None
_decode_messages: Callable[[Sequence[str | bytes]], list[Message]] | None
try:
    import msgspec
except ImportError:  # the stdlib alone gives the same results, slower
    _fast_decode = _decode_message = _decode_messages = None
else:
    _fast_decode = msgspec.json.Decoder().decode
    _decode_message, _decode_messages = _row_decoders()
# How a row written by this version begins; the writer puts the version first.
_CURRENT: dict[type, str | bytes] = {str: f'{{"v":{FORMAT_VERSION},', bytes: f'{{"v":{FORMAT_VERSION},'.encode()}


def _decode(text: str | bytes) -> Any:
    """The JSON value in ``text``: msgspec's when it accepts the text, else the stdlib's (see the module docstring)."""
    if _fast_decode is not None:
        try:
            return _fast_decode(text)
        except ValueError:  # msgspec.DecodeError: a lone surrogate escape, or not strict JSON
            pass
    return _stdlib_decode(text if isinstance(text, str) else text.decode())


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
    if block.signature:
        obj["signature"] = block.signature
    if block.data:
        obj["data"] = block.data
    if block.media_type:
        obj["media_type"] = block.media_type
    if block.url:
        obj["url"] = block.url
    if block.covers:
        obj["covers"] = block.covers
    return obj


def _message_obj(message: Message) -> dict[str, Any]:
    return {"role": message.role.value, "content": [_content_obj(c) for c in message.content]}


def _pieces(text: str) -> list[str | int]:
    # split() with a group puts each surrogate at an odd index, the text between at even ones.
    return [ord(piece) if index % 2 else piece for index, piece in enumerate(_SURROGATE.split(text)) if piece]


def _spell_surrogates(messages: list[dict[str, Any]]) -> None:
    for message in messages:
        for block in message["content"]:
            for name in STR_FIELDS:
                if name in block and _SURROGATE.search(block[name]):
                    block[name] = _pieces(block[name])


def _encode_utf8(obj: dict[str, Any], messages: list[dict[str, Any]]) -> str:
    """``obj`` as JSON text; ``messages`` (inside ``obj``) get their surrogates spelled out if they have any."""
    text = _encode(obj)
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        # Only surrogates fail: the rare slow path, so the common one costs one check.
        _spell_surrogates(messages)
        return _encode(obj)
    return text


def dumps(messages: Sequence[Message]) -> str:
    """Serialise a transcript to the versioned JSON form every store keeps."""
    objs = [_message_obj(m) for m in check_transcript(messages)]
    return _encode_utf8({"v": FORMAT_VERSION, "messages": objs}, objs)


def dump_message(message: Message) -> str:
    """Serialise one message (for stores with a row per message); the text carries the version."""
    obj = {"v": FORMAT_VERSION, **_message_obj(message)}
    return _encode_utf8(obj, [obj])


def _parse(text: str | bytes, what: str) -> tuple[dict[str, Any], int]:
    """The JSON object in ``text`` and its format version."""
    try:
        obj = _decode(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise FormatError(f"{what} is not JSON written by agentsessions: {error}") from error
    except RecursionError as error:
        # agentsessions nests six levels deep at most; only foreign text gets here.
        raise FormatError(f"{what} is nested too deeply to be JSON written by agentsessions") from error
    if not isinstance(obj, dict) or "v" not in obj:
        raise FormatError(f"{what} has no format version; it was not written by agentsessions")
    version = obj["v"]
    if type(version) is not int or version < 1:  # bool is an int to isinstance
        raise FormatError(f'{what} has format version "v": {version!r:.40}; versions are integers from 1')
    if version > FORMAT_VERSION:
        raise FormatError(
            f"{what} is format version {version}, newer than this agentsessions reads "
            f"({FORMAT_VERSION}); upgrade agentsessions to read it"
        )
    return obj, version


def _joined(pieces: list[Any], name: str) -> str:
    for piece in pieces:
        if type(piece) is not str and not (type(piece) is int and 0xD800 <= piece <= 0xDFFF):
            raise TypeError(f"Content.{name} holds {piece!r:.40}, neither text nor a surrogate code point")
    return "".join(piece if type(piece) is str else chr(piece) for piece in pieces)


def _blocks(objs: list[Any], version: int) -> list[Content]:
    """A stored message's content blocks: the loop every read runs once per block, so kept tight."""
    blocks = []
    for obj in objs:
        get = obj.get
        try:
            block = Content(  # positional: the quickest call
                obj["type"],
                get("text", ""),
                get("id", ""),
                get("name", ""),
                get("input", ""),
                get("tool_use_id", ""),
                get("is_error", False),
                get("signature", ""),
                get("data", ""),
                get("media_type", ""),
                get("url", ""),
                get("covers", 0),
            )
        except (TypeError, ValueError):
            block = _rare_block(obj, version)
        blocks.append(block)
    return blocks


def _rare_block(obj: dict[str, Any], version: int) -> Content:
    """A block that does not build as it stands: surrogates spelled as pieces, or an old row's unused field.

    Anything else raises, as building it did.
    """
    if version >= _PIECES_SINCE and any(type(obj.get(name)) is list for name in STR_FIELDS):
        joined = {k: _joined(v, k) if type(v) is list and k in STR_FIELDS else v for k, v in obj.items()}
        (block,) = _blocks([joined], version)
        return block
    kind = obj.get("type")
    if version < _SHAPED_SINCE and kind in _USED_FIELDS:
        used = {k: v for k, v in obj.items() if k in _USED_FIELDS[kind]}
        if len(used) < len(obj) - 1:  # it had a field its type does not use: read it without that field
            (block,) = _blocks([{"type": kind, **used}], _SHAPED_SINCE)
            return block
    return Content(**obj)  # raises what is wrong with it


def _message(obj: dict[str, Any], version: int, what: str) -> Message:
    try:
        return Message(obj["role"], _blocks(obj["content"], version))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise FormatError(f"{what} holds a malformed message: {error!r}") from error


def loads(text: str | bytes) -> list[Message]:
    """Read a transcript written by :func:`dumps` (this version or an older one)."""
    obj, version = _parse(text, "the transcript")
    messages = obj.get("messages")
    if not isinstance(messages, list):
        raise FormatError("the transcript has no list of messages")
    return [_message(m, version, "the transcript") for m in messages]


def load_message(text: str | bytes) -> Message:
    """Read one message written by :func:`dump_message` (this version or an older one)."""
    current = _CURRENT.get(type(text))
    if _decode_message is not None and current is not None and text.startswith(current):  # type: ignore[arg-type]
        try:
            return _decode_message(text)
        except ValueError:  # msgspec.DecodeError or ValidationError: the careful path decides
            pass
    obj, version = _parse(text, "a stored message")
    return _message(obj, version, "a stored message")


def load_messages(texts: Sequence[str | bytes]) -> list[Message]:
    """Read a transcript's rows, each written by :func:`dump_message`: what :func:`load_message` reads of each.

    A row it cannot read is a :class:`FormatError` naming the row's position.
    """
    if _decode_messages is not None:
        try:
            return _decode_messages(texts)
        except (ValueError, TypeError):  # a row msgspec refuses: row by row, the careful path decides
            pass
    messages = []
    for position, text in enumerate(texts):
        try:
            messages.append(load_message(text))
        except FormatError as error:
            raise FormatError(f"message {position}: {error}") from error
    return messages


def encode_text(text: str) -> bytes:
    """A session id's or a steer's text as bytes that round-trip any str, surrogates included.

    UTF-8, except that each surrogate code point is written as its own three bytes
    (``surrogatepass``), never combined with a neighbour: ``"\\ud83d\\ude00"`` becomes six
    bytes and ``"😀"`` four, so the two stay distinct.
    """
    return text.encode("utf-8", "surrogatepass")


def decode_text(data: bytes) -> str:
    """The inverse of :func:`encode_text`."""
    return bytes(data).decode("utf-8", "surrogatepass")
