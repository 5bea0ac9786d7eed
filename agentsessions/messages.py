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


STR_FIELDS = ("text", "id", "name", "input", "tool_use_id")
"""The fields of :class:`Content` that hold a str (``type`` aside)."""


def _refuse_bad_field(block: Content) -> None:
    """Raise ``TypeError`` naming the first field of ``block`` of the wrong type, if there is one."""
    for name in STR_FIELDS:
        value = getattr(block, name)
        if not isinstance(value, str):
            raise TypeError(f"Content.{name} must be a str, got {type(value).__name__}: {value!r:.80}")
    # A check, not a bool() converter: bool("no") is True, and stored text must not flip a flag.
    if type(block.is_error) is not bool:
        flag = block.is_error
        raise TypeError(f"Content.is_error must be a bool, got {type(flag).__name__}: {flag!r:.80}")


@attrs.frozen
class Content:
    """One block of a message.

    ``input`` is a tool call's arguments exactly as the model wrote them: raw JSON text,
    kept byte for byte everywhere, never parsed and re-serialised.
    """

    type: ContentType = attrs.field(converter=_content_type)
    text: str = ""
    id: str = ""
    name: str = ""
    input: str = ""
    tool_use_id: str = ""
    is_error: bool = False

    def __attrs_post_init__(self) -> None:
        # One test of every field's exact type, and the careful look only when it fails:
        # six attrs validators took a third of the time it takes to build a block.
        if not (
            type(self.text) is str
            and type(self.id) is str
            and type(self.name) is str
            and type(self.input) is str
            and type(self.tool_use_id) is str
            and type(self.is_error) is bool
        ):
            _refuse_bad_field(self)

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
