"""Compaction: a long transcript's requests carry a summary in place of its first messages.

The store keeps every message: the loop only appends one message holding a
:meth:`~agentsessions.messages.Content.compaction` block (the summary of the first ``covers``
messages), and every request from then on starts at that summary (:func:`request_messages`),
on this run or any that resumes the transcript. A fork before that message has the whole
history. The summary is our own text, so another provider's endpoint can go on from it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from agentsessions.endpoint import Endpoint
from agentsessions.messages import Content, ContentType, Message, Role

DEFAULT_INSTRUCTIONS = (
    "Summarise the conversation above so that it can go on from the summary alone: the user's goals "
    "and requests, what was done (tool calls and what they returned), decisions, facts learnt, and "
    "what is left to do. Write the summary only."
)
"""What the summarizer is asked when :attr:`Compaction.instructions` is ``None``."""


def _endpoint(_: object, __: attrs.Attribute[Endpoint | None], value: object) -> None:
    if value is not None and not callable(getattr(value, "complete", None)):
        raise TypeError(f"Compaction.summarizer is an Endpoint (it has complete(request)) or None, got {value!r:.80}")


_POSITIVE = [attrs.validators.instance_of(int), attrs.validators.ge(1)]


@attrs.frozen
class Compaction:
    """When and how a run summarises its transcript's first messages (``Spec(compaction=...)``).

    Before a request whose transcript passed ``trigger_tokens`` (the last response's input
    tokens, cached ones included; before a run's first request, an estimate), the loop asks
    ``summarizer`` (``None``: the run's own endpoint) to summarise the messages before a cut,
    and appends one message holding the summary. The cut keeps at least ``keep_tokens`` of
    the latest messages whole and falls before an assistant message, so it never separates a
    tool call from its result. ``instructions`` replaces :data:`DEFAULT_INSTRUCTIONS`.
    """

    trigger_tokens: int = attrs.field(default=100_000, validator=_POSITIVE)
    keep_tokens: int = attrs.field(default=20_000, validator=_POSITIVE)
    summarizer: Endpoint | None = attrs.field(default=None, validator=_endpoint)
    instructions: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )

    def __attrs_post_init__(self) -> None:
        if self.keep_tokens >= self.trigger_tokens:
            raise ValueError(
                f"Compaction.keep_tokens ({self.keep_tokens}) must be below trigger_tokens ({self.trigger_tokens}): "
                "otherwise the cut keeps everything and compaction never makes a request smaller"
            )


def has_compaction(message: Message) -> bool:
    """Whether ``message`` holds a compaction block."""
    return any(block.type is ContentType.COMPACTION for block in message.content)


def last_compaction(transcript: Sequence[Message]) -> int | None:
    """The index of the last message holding a compaction block, or ``None``."""
    for index in range(len(transcript) - 1, -1, -1):
        if has_compaction(transcript[index]):
            return index
    return None


def _without_summaries(message: Message) -> Message | None:
    kept = tuple(block for block in message.content if block.type is not ContentType.COMPACTION)
    return Message(message.role, kept) if kept else None


def request_messages(transcript: Sequence[Message], at: int | None) -> tuple[Message, ...]:
    """What a request carries: the summary at ``at``, then the messages it does not cover, in order.

    Other blocks of the summary's message (a steer added to it) stay where the message is;
    older summaries are left out, the messages they covered too (the latest covers them).
    """
    if at is None:
        return tuple(transcript)
    summary = [block for block in transcript[at].content if block.type is ContentType.COMPACTION][-1]
    kept = (_without_summaries(m) for m in (*transcript[summary.covers : at], transcript[at]))
    return (Message(Role.USER, (summary,)), *(m for m in kept if m is not None), *transcript[at + 1 :])


def messages_before(transcript: Sequence[Message], at: int | None, cut: int) -> tuple[Message, ...]:
    """What the summarizer reads for a cut at ``cut``: the request's messages (:func:`request_messages`) before it."""
    if at is None or at < cut:
        return request_messages(transcript[:cut], at)
    summary = [block for block in transcript[at].content if block.type is ContentType.COMPACTION][-1]
    kept = (_without_summaries(m) for m in transcript[summary.covers : cut])
    return (Message(Role.USER, (summary,)), *(m for m in kept if m is not None))


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A rough token count (four characters a token), for when no response has said how many."""
    size = 0
    for message in messages:
        for block in message.content:
            size += len(block.text) + len(block.input) + len(block.data) + len(block.name) + 8
    return size // 4


def cut_point(transcript: Sequence[Message], start: int, keep_tokens: int) -> int | None:
    """The cut for a new summary: the last assistant message after ``start`` with ``keep_tokens`` from it on.

    ``None`` when there is none (the messages after ``start`` are too few to summarise any).
    """
    kept = 0
    for index in range(len(transcript) - 1, start, -1):
        message = transcript[index]
        if not has_compaction(message):
            kept += estimate_tokens((message,))
        if kept >= keep_tokens and message.role is Role.ASSISTANT:
            return index
    return None


def summary_request_messages(view: Sequence[Message], instructions: str | None) -> list[Message]:
    """``view`` (ending with a user message) with the instructions added to its end as user text."""
    ask = Content.of_text(DEFAULT_INSTRUCTIONS if instructions is None else instructions)
    messages = list(view)
    if messages and messages[-1].role is Role.USER:
        messages[-1] = Message(Role.USER, (*messages[-1].content, ask))
    else:
        messages.append(Message(Role.USER, (ask,)))
    return messages
