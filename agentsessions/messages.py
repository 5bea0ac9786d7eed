"""The transcript's data: roles, content blocks and messages, all immutable."""

from __future__ import annotations

import enum
import json
import operator
from collections.abc import Iterable, Sequence
from typing import Any

import attrs


class Role(enum.StrEnum):
    """Who wrote a message."""

    USER = "user"
    ASSISTANT = "assistant"


class ContentType(enum.StrEnum):
    """What a content block holds; :data:`FIELDS` says which fields each type uses."""

    TEXT = "text"
    TOOL_USE = "tool_use"
    TOOL_RESULT = "tool_result"
    THINKING = "thinking"
    REDACTED_THINKING = "redacted_thinking"
    IMAGE = "image"
    DOCUMENT = "document"
    RAW = "raw"
    COMPACTION = "compaction"


# Members by their values through a dict: calling an enum costs more than the rest of
# building a block, and every stored block is read with its type as a str. A value not
# found goes to the enum, which says what is wrong with it.
_CONTENT_TYPES: dict[str, ContentType] = {member.value: member for member in ContentType}
_ROLES: dict[str, Role] = {member.value: member for member in Role}


def _content_type(value: str) -> ContentType:
    if type(value) is ContentType:
        return value
    member = _CONTENT_TYPES.get(value) if isinstance(value, str) else None
    return ContentType(value) if member is None else member


def _role(value: str) -> Role:
    if type(value) is Role:
        return value
    member = _ROLES.get(value) if isinstance(value, str) else None
    return Role(value) if member is None else member


STR_FIELDS = ("text", "id", "name", "input", "tool_use_id", "signature", "data", "media_type", "url")
"""The fields of :class:`Content` that hold a str (``type`` aside)."""

VALUE_FIELDS = (
    "text",
    "id",
    "name",
    "input",
    "tool_use_id",
    "is_error",
    "signature",
    "data",
    "media_type",
    "url",
    "covers",
)
"""The fields of :class:`Content` after ``type``, in the order its constructor takes them."""

FIELDS: dict[ContentType, frozenset[str]] = {
    ContentType.TEXT: frozenset({"text"}),
    ContentType.TOOL_USE: frozenset({"id", "name", "input"}),
    ContentType.TOOL_RESULT: frozenset({"tool_use_id", "text", "is_error"}),
    ContentType.THINKING: frozenset({"text", "signature"}),
    ContentType.REDACTED_THINKING: frozenset({"data"}),
    ContentType.IMAGE: frozenset({"media_type", "data", "url", "tool_use_id"}),
    ContentType.DOCUMENT: frozenset({"media_type", "data", "url", "name", "tool_use_id"}),
    ContentType.RAW: frozenset({"name", "data", "text"}),
    ContentType.COMPACTION: frozenset({"text", "covers"}),
}
"""The fields each block type uses; every other field of a block stays at its default."""

MEDIA = frozenset({ContentType.IMAGE, ContentType.DOCUMENT})
"""The block types that carry a file: base64 ``data`` or a ``url``, never both."""

_DEFAULTS: dict[str, object] = {"is_error": False, "covers": 0}
_TYPES: dict[str, type] = {"is_error": bool, "covers": int}

# Per type, the values a block must leave at their defaults, picked from the tuple of its
# values by one C-level call and compared with one tuple: the whole check costs less than
# setting one field of a frozen class.
_UNUSED = {
    kind: (
        operator.itemgetter(*(i for i, name in enumerate(VALUE_FIELDS) if name not in used)),
        tuple(_DEFAULTS.get(name, "") for name in VALUE_FIELDS if name not in used),
    )
    for kind, used in FIELDS.items()
}
_values = operator.attrgetter(*VALUE_FIELDS)
# The same check on a block a decoder filled (msgspec): its unused fields read straight off
# it, without first gathering them all; media, raw and compaction blocks (which check
# more than their unused fields) still take the whole check.
_UNUSED_ON_BLOCK = {
    kind: (
        operator.attrgetter(*(name for name in VALUE_FIELDS if name not in used)),
        _UNUSED[kind][1],
        kind in MEDIA or kind in (ContentType.RAW, ContentType.COMPACTION),
    )
    for kind, used in FIELDS.items()
}
_set = object.__setattr__  # what a frozen class's own constructor has to use


def _a(kind: ContentType) -> str:
    """``kind`` with its article, for messages: "an image block", "a text block"."""
    return f"an {kind.value}" if kind.value[0] in "aeiou" else f"a {kind.value}"


def _refuse_bad_type(values: tuple[object, ...]) -> None:
    """Raise ``TypeError`` naming the first of a block's values of the wrong type."""
    for name, value in zip(VALUE_FIELDS, values, strict=True):
        # A check, not a bool() converter: bool("no") is True, and stored text must not flip a flag.
        expected = _TYPES.get(name, str)
        if type(value) is not expected:
            kind = ("an " if expected is int else "a ") + expected.__name__
            raise TypeError(f"Content.{name} must be {kind}, got {type(value).__name__}: {value!r:.80}")


def _check_shape(kind: ContentType, values: tuple[object, ...]) -> None:
    """Raise ``ValueError`` if a block of ``kind`` sets a field its type does not use, or lacks what it needs."""
    unused, defaults = _UNUSED[kind]
    if unused(values) != defaults:
        used = FIELDS[kind]
        name, value = next((n, v) for n, v in zip(VALUE_FIELDS, values, strict=True) if n not in used and v)
        uses = ", ".join(sorted(used))
        raise ValueError(f"{_a(kind)} block has no {name} (it uses {uses}); got {name}={value!r:.80}")
    if kind in MEDIA:
        _check_media(kind, *values[7:10])  # type: ignore[arg-type]
    elif kind is ContentType.RAW:
        _check_raw(values[2], values[7])  # type: ignore[arg-type]
    elif kind is ContentType.COMPACTION and values[10] < 1:  # type: ignore[operator]
        raise ValueError(f"a compaction block covers at least one message; got covers={values[10]!r}")


def _check_media(kind: ContentType, data: str, media_type: str, url: str) -> None:
    if bool(data) == bool(url):
        which = "both" if data else "neither"
        raise ValueError(f"{_a(kind)} block has base64 data or a url, exactly one; got {which}")
    if data and not media_type:
        raise ValueError(f"{_a(kind)} block with base64 data needs its media_type, such as 'image/png'")


def _check_raw(provider: str, data: str) -> None:
    if not provider:
        raise ValueError("a raw block names its provider (name='anthropic', 'openai'...)")
    try:
        value = json.loads(data)
    except ValueError as error:
        raise ValueError(f"a raw block's data is the provider's JSON text; this is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ValueError(f"a raw block's data is a JSON object (the provider's block), got {type(value).__name__}")


@attrs.frozen(init=False, repr=False)
class Content:
    """One block of a message. Each type uses some fields (:data:`FIELDS`) and leaves the others empty.

    - ``TEXT``: ``text``.
    - ``TOOL_USE``: ``id``, ``name`` and ``input``, the call's arguments exactly as the model
      wrote them: raw JSON text, kept byte for byte everywhere, never parsed and re-serialised.
    - ``TOOL_RESULT``: ``tool_use_id``, ``text`` and ``is_error``. Images and documents a tool
      returned follow it in the same message, carrying its ``tool_use_id``.
    - ``THINKING``: the model's reasoning ``text`` and the provider's ``signature`` over it.
    - ``REDACTED_THINKING``: reasoning the provider encrypted, opaque, in ``data``.
    - ``IMAGE`` and ``DOCUMENT``: ``media_type`` and base64 ``data``, or a ``url``; a document
      may have a title in ``name``; ``tool_use_id`` when a tool returned it.
    - ``RAW``: a block this library does not model, as the provider's own JSON text in
      ``data``, with the provider in ``name``; ``text`` is what a reader sees of it, if
      anything (a provider's cited text). It goes back verbatim to that provider only.
    - ``COMPACTION``: a summary (``text``) of the transcript's first ``covers`` messages,
      written by the loop when :class:`~agentsessions.spec.Compaction` is on. Requests carry
      it in place of those messages; the store keeps them all.

    Every str is kept verbatim by every store and endpoint. A field of the wrong type is a
    ``TypeError``; a field the type does not use, or a missing one, a ``ValueError``.
    """

    type: ContentType
    text: str = ""
    id: str = ""
    name: str = ""
    input: str = ""
    tool_use_id: str = ""
    is_error: bool = False
    signature: str = ""
    data: str = ""
    media_type: str = ""
    url: str = ""
    covers: int = 0

    def __init__(
        self,
        type: ContentType | str,
        text: str = "",
        id: str = "",
        name: str = "",
        input: str = "",
        tool_use_id: str = "",
        is_error: bool = False,
        signature: str = "",
        data: str = "",
        media_type: str = "",
        url: str = "",
        covers: int = 0,
    ) -> None:
        # Written by hand, not by attrs: checked on the arguments themselves, before the
        # eleven sets a frozen class pays for, it builds a block in two thirds of the time.
        kind = type if type.__class__ is ContentType else _content_type(type)
        values = (text, id, name, input, tool_use_id, is_error, signature, data, media_type, url, covers)
        if not (
            text.__class__ is str
            and id.__class__ is str
            and name.__class__ is str
            and input.__class__ is str
            and tool_use_id.__class__ is str
            and is_error.__class__ is bool
            and signature.__class__ is str
            and data.__class__ is str
            and media_type.__class__ is str
            and url.__class__ is str
            and covers.__class__ is int
        ):
            _refuse_bad_type(values)
        _check_shape(kind, values)
        _set(self, "type", kind)
        _set(self, "text", text)
        _set(self, "id", id)
        _set(self, "name", name)
        _set(self, "input", input)
        _set(self, "tool_use_id", tool_use_id)
        _set(self, "is_error", is_error)
        _set(self, "signature", signature)
        _set(self, "data", data)
        _set(self, "media_type", media_type)
        _set(self, "url", url)
        _set(self, "covers", covers)

    def __attrs_post_init__(self) -> None:
        # Only a decoder that fills the fields itself calls this (msgspec, after checking their types).
        unused, defaults, whole = _UNUSED_ON_BLOCK[self.type]
        if whole or unused(self) != defaults:
            _check_shape(self.type, _values(self))  # decides, and names the field that is wrong

    def __repr__(self) -> str:
        # The fields the block's type uses, and only those that are set: a block has twelve.
        shown = "".join(
            f", {name}={getattr(self, name)!r}" for name in (*STR_FIELDS, "is_error", "covers") if getattr(self, name)
        )
        return f"Content({self.type.name}{shown})"

    @classmethod
    def of_text(cls, text: str) -> Content:
        """A text block."""
        return cls(ContentType.TEXT, text)

    @classmethod
    def tool_use(cls, id: str, name: str, input: str) -> Content:
        """A tool call; ``input`` is the raw JSON text of its arguments."""
        return cls(ContentType.TOOL_USE, "", id, name, input)

    @classmethod
    def tool_result(cls, tool_use_id: str, text: str, *, is_error: bool = False) -> Content:
        """The answer to the tool call ``tool_use_id``."""
        # Positional (type, text, id, name, input, tool_use_id, is_error): these build most blocks.
        return cls(ContentType.TOOL_RESULT, text, "", "", "", tool_use_id, is_error)

    @classmethod
    def thinking(cls, text: str, signature: str = "") -> Content:
        """The model's reasoning as the provider returned it, with the provider's signature over it."""
        return cls(ContentType.THINKING, text, signature=signature)

    @classmethod
    def redacted_thinking(cls, data: str) -> Content:
        """Reasoning the provider encrypted; ``data`` is opaque and goes back as it came."""
        return cls(ContentType.REDACTED_THINKING, data=data)

    @classmethod
    def image(cls, *, media_type: str = "", data: str = "", url: str = "") -> Content:
        """An image: base64 ``data`` with its ``media_type`` (``"image/png"``...), or a ``url``; exactly one."""
        return cls(ContentType.IMAGE, data=data, media_type=media_type, url=url)

    @classmethod
    def document(cls, *, media_type: str = "", data: str = "", url: str = "", name: str = "") -> Content:
        """A document (a PDF, a text file): base64 ``data`` and its ``media_type``, or a ``url``; ``name``, a title."""
        return cls(ContentType.DOCUMENT, name=name, data=data, media_type=media_type, url=url)

    @classmethod
    def raw(cls, provider: str, data: str, *, text: str = "") -> Content:
        """A provider's block this library does not model: its JSON text, kept and sent back verbatim.

        ``provider`` is ``"anthropic"`` or ``"openai"``; ``text`` is what a reader sees of the
        block, if anything (a provider's cited text), and is part of :attr:`Message.text`.
        """
        return cls(ContentType.RAW, text, name=provider, data=data)

    @classmethod
    def compaction(cls, text: str, *, covers: int) -> Content:
        """A summary of the transcript's first ``covers`` messages, which requests carry in their place."""
        return cls(ContentType.COMPACTION, text, covers=covers)

    @property
    def part_of_result(self) -> bool:
        """Whether this block is (part of) a tool result: the result itself, or media a tool returned."""
        return self.type is ContentType.TOOL_RESULT or (self.type in MEDIA and bool(self.tool_use_id))


def _content_tuple(blocks: Iterable[Content]) -> tuple[Content, ...]:
    if isinstance(blocks, (str, bytes)):
        raise TypeError("Message.content must be a sequence of Content, got a str")
    result = tuple(blocks)
    for block in result:
        if type(block) is not Content and not isinstance(block, Content):
            raise TypeError(f"Message.content must hold Content, got {type(block).__name__}: {block!r:.80}")
    return result


@attrs.frozen
class Message:
    """One turn of the conversation: a role and its content blocks."""

    role: Role = attrs.field(converter=_role)
    content: tuple[Content, ...] = attrs.field(converter=_content_tuple)

    @classmethod
    def user(cls, *parts: str | Content) -> Message:
        """A user message: each ``str`` a text block, each :class:`Content` (an image...) as it is.

        ``Message.user("what is in this picture?", Content.image(url=...))``.
        """
        return cls(Role.USER, tuple(p if isinstance(p, Content) else Content.of_text(p) for p in parts))

    @classmethod
    def assistant(cls, text: str) -> Message:
        """An assistant message holding one text block."""
        return cls(Role.ASSISTANT, (Content.of_text(text),))

    @property
    def text(self) -> str:
        """The message's text blocks joined (with the text a provider's raw text block carries).

        Thinking, tool calls and tool results are left out.
        """
        return "".join(c.text for c in self.content if c.type is ContentType.TEXT or c.type is ContentType.RAW)

    @property
    def tool_uses(self) -> tuple[Content, ...]:
        """The tool calls in this message, in order."""
        return tuple(c for c in self.content if c.type is ContentType.TOOL_USE)


SUMMARY_PREFIX = "Summary of the conversation so far:\n\n"
"""What a compaction block's summary follows when an endpoint sends it to a model, as text."""


def summary_text(block: Content) -> str:
    """A compaction block as the text a model reads: our own words, so any provider can take it."""
    return SUMMARY_PREFIX + block.text


def put_results(transcript: list[Message], results: Sequence[Content]) -> None:
    """Make ``results`` (with the media tools returned) those of the user message after the last calls.

    They go before the message's other blocks, such as steers; a new user message when the
    transcript ends with the calls.
    """
    last = transcript[-1]
    if last.role is Role.USER:
        others = tuple(c for c in last.content if not c.part_of_result)
        transcript[-1] = Message(Role.USER, (*results, *others))
    else:
        transcript.append(Message(Role.USER, results))


def transcript_list(messages: object) -> list[Any]:
    """``messages`` as a list (the same list when it is one), its elements not yet checked."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(f"a transcript is a sequence of Message, got {type(messages).__name__}")
    return messages if type(messages) is list else list(messages)


def check_transcript(messages: object, start: int = 0) -> list[Message]:
    """Return ``messages`` as a list, or raise ``TypeError`` naming the first bad element.

    Elements before ``start`` are taken as already checked.
    """
    checked = transcript_list(messages)
    for index in range(start, len(checked)):
        message = checked[index]
        if not isinstance(message, Message):
            raise TypeError(
                f"a transcript holds Message objects; element {index} is {type(message).__name__}: {message!r:.80}"
            )
    return checked
