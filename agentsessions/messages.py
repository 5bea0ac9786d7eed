"""The transcript's data: roles, content blocks and messages, all immutable."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

import attrs


class Role(enum.StrEnum):
    """Who wrote a message."""

    USER = "user"
    ASSISTANT = "assistant"


class ContentType(enum.StrEnum):
    """What a content block holds."""

    TEXT = "text"
    TOOL_USE = "tool_use"
    TOOL_RESULT = "tool_result"


def _is_str(field_name: str) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, str):
            raise TypeError(f"{field_name}.{attribute.name} must be a str, got {type(value).__name__}: {value!r:.80}")

    return check


def _is_bool(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # A check, not a bool() converter: bool("no") is True, and stored text must not flip a flag.
    if type(value) is not bool:
        raise TypeError(f"Content.{attribute.name} must be a bool, got {type(value).__name__}: {value!r:.80}")


@attrs.frozen(cache_hash=True)
class Content:
    """One block of a message.

    ``input`` is a tool call's arguments exactly as the model wrote them: raw JSON text,
    kept byte for byte everywhere, never parsed and re-serialised.
    """

    type: ContentType = attrs.field(converter=ContentType)
    text: str = attrs.field(default="", validator=_is_str("Content"))
    id: str = attrs.field(default="", validator=_is_str("Content"))
    name: str = attrs.field(default="", validator=_is_str("Content"))
    input: str = attrs.field(default="", validator=_is_str("Content"))
    tool_use_id: str = attrs.field(default="", validator=_is_str("Content"))
    is_error: bool = attrs.field(default=False, validator=_is_bool)

    @classmethod
    def of_text(cls, text: str) -> Content:
        """A text block."""
        return cls(ContentType.TEXT, text=text)

    @classmethod
    def tool_use(cls, id: str, name: str, input: str) -> Content:
        """A tool call; ``input`` is the raw JSON text of its arguments."""
        return cls(ContentType.TOOL_USE, id=id, name=name, input=input)

    @classmethod
    def tool_result(cls, tool_use_id: str, text: str, *, is_error: bool = False) -> Content:
        """The answer to the tool call ``tool_use_id``."""
        return cls(ContentType.TOOL_RESULT, tool_use_id=tool_use_id, text=text, is_error=is_error)


def _content_tuple(blocks: Iterable[Content]) -> tuple[Content, ...]:
    if isinstance(blocks, (str, bytes)):
        raise TypeError("Message.content must be a sequence of Content, got a str")
    result = tuple(blocks)
    for block in result:
        if not isinstance(block, Content):
            raise TypeError(f"Message.content must hold Content, got {type(block).__name__}: {block!r:.80}")
    return result


@attrs.frozen(cache_hash=True)
class Message:
    """One turn of the conversation: a role and its content blocks."""

    role: Role = attrs.field(converter=Role)
    content: tuple[Content, ...] = attrs.field(converter=_content_tuple)

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message holding one text block."""
        return cls(Role.USER, (Content.of_text(text),))

    @classmethod
    def assistant(cls, text: str) -> Message:
        """An assistant message holding one text block."""
        return cls(Role.ASSISTANT, (Content.of_text(text),))

    @property
    def text(self) -> str:
        """The message's text blocks joined; tool calls and results are left out."""
        return "".join(c.text for c in self.content if c.type is ContentType.TEXT)

    @property
    def tool_uses(self) -> tuple[Content, ...]:
        """The tool calls in this message, in order."""
        return tuple(c for c in self.content if c.type is ContentType.TOOL_USE)


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
