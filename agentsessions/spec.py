"""A run's data: ``Spec`` says what to run, ``Result`` what it produced, ``StopReason`` why it stopped.

This module sits below the loop and the runner, so both (and errors and events) can name
these classes without importing each other.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from agentsessions.approvals import Approval
from agentsessions.compaction import Compaction
from agentsessions.endpoint import Usage
from agentsessions.messages import Message, Role
from agentsessions.runs import check_lease
from agentsessions.session import Session
from agentsessions.tools import Tool


class Pattern(enum.StrEnum):
    """How the agent works. ReAct: reason, call tools, read their results, repeat."""

    REACT = "react"


class StopReason(enum.StrEnum):
    """Why a run stopped. A model's own reason (``"end_turn"``, ``"max_tokens"``...) is kept as it came.

    ``PAUSE_TURN`` is a model's reason that never ends a run (unless ``max_steps`` does).
    """

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    PAUSE_TURN = "pause_turn"
    """Not a stop: the provider paused a long turn (a server tool at work); the run asks it to go on."""
    MAX_STEPS = "max_steps"
    CANCELLED = "cancelled"
    ERROR = "error"
    APPROVAL_REQUIRED = "approval_required"
    """A tool call needs a person's decision: the session waits (``Result.approvals`` lists the calls)."""


def _tools(value: Sequence[Tool]) -> tuple[Tool, ...]:
    tools = tuple(value)
    for tool in tools:
        if not isinstance(tool, Tool):
            raise TypeError(f"Spec.tools holds Tool objects (see @agentsessions.tool), got {type(tool).__name__}")
    names = [t.name for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"Spec.tools has two tools named {', '.join(duplicates)}")
    return tools


def _session(_: object, __: attrs.Attribute[Session | None], value: object) -> None:
    if value is not None and not isinstance(value, Session):
        raise TypeError(f"Spec.session must be a Session (agentsessions.open(id, store)) or None, got {value!r:.80}")


@attrs.frozen
class Spec:
    """What to run: the pattern, its step limit, the session, the tools and the system prompt.

    ``session`` is ``None`` by default, and then the run touches no store at all. ``lease``
    is how long, in seconds, the run's hold on its session lasts without renewal; the
    runner renews it at least every ``lease / 3`` while the run lives, so another replica
    takes the session over only once this process has died or hung for that long.

    ``journal=True`` also saves the model's tool calls as soon as they arrive, records each
    call as started right before it runs and its result right after (a small write each),
    so a run that dies mid-step never runs a finished call again, and never runs a call
    that may have run twice unless its tool is ``idempotent``.

    ``name`` names the agent in telemetry (``gen_ai.agent.name``); ``""`` leaves it out.

    ``compaction`` (a :class:`~agentsessions.compaction.Compaction`) keeps long runs under the
    model's context window with a summary, never deleting what is stored; ``None``, off.
    """

    pattern: Pattern = attrs.field(default=Pattern.REACT, converter=Pattern)
    max_steps: int = attrs.field(default=8, validator=[attrs.validators.instance_of(int), attrs.validators.ge(1)])
    session: Session | None = attrs.field(default=None, validator=_session)
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tools)
    system: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    max_tokens: int = attrs.field(default=4096, validator=[attrs.validators.instance_of(int), attrs.validators.ge(1)])
    lease: float = attrs.field(default=30.0, converter=check_lease)
    journal: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    name: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    compaction: Compaction | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(Compaction))
    )


@attrs.frozen
class Result:
    """What a run produced.

    ``messages`` is the whole transcript, ``text`` the final answer, ``steps`` how many
    model requests were made. ``unapplied_steers`` are steers that reached ``Run.steer``
    but were never carried by a saved transcript (with a session) or a request (without);
    steers left in a session's store are not among them: they wait there for the next run.
    ``approvals``: the calls waiting for a decision when ``stop_reason`` is
    ``"approval_required"`` (empty otherwise).
    """

    messages: list[Message]
    text: str
    steps: int
    stop_reason: str
    unapplied_steers: list[str] = attrs.Factory(list)
    usage: Usage = attrs.field(factory=Usage)
    approvals: list[Approval] = attrs.Factory(list)


def _resume_message(_: object, __: attrs.Attribute[str | Message | None], value: object) -> None:
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, Message) or value.role is not Role.USER:
        raise TypeError(f"Resume.message is a str, a user Message or None, got {value!r:.80}")


@attrs.frozen
class Resume:
    """Where ``messages`` goes in ``Runner.run``/``start``: continue the session's stored transcript.

    The transcript is read after the run has claimed its session, so no other run can
    write in between. ``message``, when given, is added as the user's next words: joined
    to a trailing user message (tool results, a steer), or as a new one. A list of
    messages instead keeps its meaning: the whole transcript, replacing what is stored.
    """

    message: str | Message | None = attrs.field(default=None, validator=_resume_message)

    def continued(self, stored: Sequence[Message]) -> list[Message]:
        """The transcript a run resumed from ``stored`` starts with."""
        transcript = list(stored)
        if self.message is None:
            return transcript
        words = Message.user(self.message) if isinstance(self.message, str) else self.message
        if transcript and transcript[-1].role is Role.USER:
            transcript[-1] = Message(Role.USER, transcript[-1].content + words.content)
        else:
            transcript.append(words)
        return transcript


__all__ = ["Pattern", "Result", "Resume", "Spec", "StopReason"]
