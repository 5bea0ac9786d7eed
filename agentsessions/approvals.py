"""Approvals: a person's yes or no on a tool call, kept in the store while the session waits.

A tool made with ``needs_approval`` never runs on the model's word alone. When the model
calls it, the run runs the step's other calls, saves, and releases its session ``WAITING``
with one :class:`Approval` per such call. Anyone, from any process, then records a
:class:`Decision` for each (``session.approve``, ``session.reject``, ``session.decide``);
a run started with ``Resume()`` once every call is decided runs the approved calls and
answers each rejected one with an error result holding the reason.

A decision is bound to its call: its id, its tool and its input. A resumed run uses it only
for a pending call with that same id, tool and input, so a transcript changed behind a
decision (another input under the same id) waits for a new one instead of running on an
old yes. A call is decided once: each store records a batch of decisions in one atomic
step, all or none (:func:`decided` is the rule every store applies in that step).

    RUNNING ──a call needs approval──▶ WAITING ──every call decided, Resume()──▶ RUNNING
"""

from __future__ import annotations

import datetime
import inspect
import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from agentsessions import schemas
from agentsessions.errors import ApprovalPendingError, ConflictError, FormatError, InvalidArgumentsError
from agentsessions.messages import ContentType, Message, Role
from agentsessions.runs import UTC, Claim, RunState

log = logging.getLogger("agentsessions")

APPROVED: Literal["approved"] = "approved"
REJECTED: Literal["rejected"] = "rejected"
_DECISIONS = frozenset({APPROVED, REJECTED})


def _text(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str, got {type(value).__name__}: {value!r:.80}")


def _time(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, datetime.datetime) or value.tzinfo is None):
        raise TypeError(f"Approval.{attribute.name} must be an aware datetime or None, got {value!r:.80}")


def _decision(_: object, __: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and value not in _DECISIONS:
        raise ValueError(f'Approval.decision is None, "approved" or "rejected", got {value!r:.80}')


@attrs.frozen
class Approval:
    """One tool call that waits for a person's decision, and that decision once made.

    ``call_id``, ``tool`` and ``input`` (the raw JSON text the model wrote) name the call
    exactly; ``requested_at`` is when the run stopped for it. ``decision`` is ``None`` until
    someone decides, then ``"approved"`` or ``"rejected"``, with ``by`` (who), ``reason``
    (a rejection's, given to the model) and ``decided_at``.

    A call approved with an edited input (``session.approve(call_id, input=...)``) holds the
    edited text in ``input``, as the transcript's ``tool_use`` block then does, and what the
    model asked for in ``original_input``; ``original_input`` is ``None`` for a call that
    runs as the model wrote it. ``input_schema`` is the tool's input schema as JSON text,
    stored with the wait when the run stopped, so that a process that never saw the tool
    checks an edited input against it (``""``: none known, only JSON is checked).
    """

    call_id: str = attrs.field(validator=_text)
    tool: str = attrs.field(validator=_text)
    input: str = attrs.field(validator=_text)
    requested_at: datetime.datetime = attrs.field(validator=_time)
    decision: str | None = attrs.field(default=None, validator=_decision)
    by: str = attrs.field(default="", validator=_text)
    reason: str = attrs.field(default="", validator=_text)
    decided_at: datetime.datetime | None = attrs.field(default=None, validator=_time)
    original_input: str | None = attrs.field(default=None, validator=attrs.validators.optional(_text))
    input_schema: str = attrs.field(default="", validator=_text)

    @property
    def pending(self) -> bool:
        """Whether nobody has decided this call yet."""
        return self.decision is None


@attrs.frozen
class Decision:
    """A decision on one waiting call, for ``session.decide``: :meth:`approve` or :meth:`reject`."""

    decision: Literal["approved", "rejected"] = attrs.field(validator=attrs.validators.in_(_DECISIONS))
    by: str = attrs.field(default="", validator=_text)
    reason: str = attrs.field(default="", validator=_text)
    input: str | None = attrs.field(default=None, validator=attrs.validators.optional(_text))

    def __attrs_post_init__(self) -> None:
        # Its JSON is checked by approve() and session.decide, not here: a wrapping store
        # (crypto.encrypted) hands the wrapped one a Decision holding the input encrypted.
        if self.input is not None and self.decision != APPROVED:
            raise ValueError("only an approval carries an input: a rejected call does not run")

    @classmethod
    def approve(cls, *, by: str = "", input: str | None = None) -> Decision:
        """Let the call run: as the model wrote it, or with ``input`` (JSON text) instead.

        ``input`` must be a JSON object (a ``ValueError`` otherwise, before any I/O); it is
        checked against the tool's schema when the decision is recorded.
        """
        if input is not None:
            if not isinstance(input, str):
                raise TypeError(f"input must be JSON text (a str) or None, got {type(input).__name__}")
            check_input_json(input)
        return cls(APPROVED, by, input=input)

    @classmethod
    def reject(cls, *, reason: str = "", by: str = "") -> Decision:
        """Do not run the call; the model reads an error result holding ``reason``."""
        return cls(REJECTED, by, reason)


@runtime_checkable
class ApprovalStore(Protocol):
    """A :class:`~agentsessions.RunStore` that keeps approvals: a capability of its own, like forking.

    A session released ``WAITING`` cannot be claimed while one of its calls is undecided
    (``claim`` raises :class:`~agentsessions.ApprovalPendingError`); once all are decided a
    claim takes it as it takes an ended session.
    """

    def wait(self, claim: Claim, approvals: Sequence[Approval]) -> None:
        """Release the session held by ``claim`` as ``WAITING`` for ``approvals``; one atomic step.

        Raises :class:`~agentsessions.ConflictError`, having written nothing, when ``claim``
        no longer holds the session.
        """
        ...

    def approvals(self, session_id: str) -> list[Approval]:
        """The calls of the session's latest wait, decided or not (kept after the wait ended); ``[]`` if none."""
        ...

    def decide(self, session_id: str, decisions: Mapping[str, Decision]) -> RunState:
        """Record ``decisions`` (call id to decision) in one atomic step, all or none; the state after.

        The same decision again records nothing and returns the state. Another decision on a
        decided call, or an id that is not waiting (or a session that is not waiting), raises
        :class:`~agentsessions.ConflictError` and records none of ``decisions``.
        """
        ...


def check_input_json(text: str) -> dict[str, Any]:
    """An edited input's arguments: ``text`` must be a JSON object; a ``ValueError`` saying why otherwise."""
    try:
        arguments = json.loads(text)
    except ValueError as error:
        raise InvalidArgumentsError("", f"the edited input is not valid JSON: {error}") from error
    if not isinstance(arguments, dict):
        raise InvalidArgumentsError("", f"the edited input must be a JSON object, got {schemas.shown(arguments)}")
    return arguments


def check_edits(approvals: Sequence[Approval], decisions: Mapping[str, Decision]) -> None:
    """Check each edited input of ``decisions`` against the schema its call's tool stored with the wait.

    Raises :class:`~agentsessions.InvalidArgumentsError` (a ``ValueError``) naming the call and
    the field that does not fit. A call that is not waiting is left to the store's decide.
    """
    by_id = {approval.call_id: approval for approval in approvals}
    for call_id, decision in decisions.items():
        approval = by_id.get(call_id)
        if decision.input is None:
            continue
        arguments = check_input_json(decision.input)
        if approval is None or not approval.input_schema:
            continue
        try:
            schemas.checker(json.loads(approval.input_schema))(arguments)
        except InvalidArgumentsError as error:
            where = f"the edited input of call {call_id!r:.80} ({approval.tool})"
            raise InvalidArgumentsError(error.field, f"{error.problem}, in {where}") from None


def wanted_input(approval: Approval, decision: Decision) -> str:
    """The input ``decision`` lets the call run with: its own, or the model's."""
    if decision.input is not None:
        return decision.input
    return approval.input if approval.original_input is None else approval.original_input


def edits_inputs(store: object) -> bool:
    """Whether ``store`` records an approval with an edited input: its ``decide`` takes ``rewrite``.

    Such a store rewrites the wait's ``tool_use`` block in the decision's atomic step; one
    written before edited inputs existed does not, and a decision with an input is refused
    (a ``TypeError``) rather than recorded without its rewrite.
    """
    if not isinstance(store, ApprovalStore):
        return False
    says = getattr(store, "edits_inputs", None)  # a wrapping store says whether the one it wraps does
    if isinstance(says, bool):
        return says
    try:
        return "rewrite" in inspect.signature(store.decide).parameters
    except (TypeError, ValueError):  # a callable whose signature cannot be read
        return False


def check_decisions(decisions: object) -> dict[str, Decision]:
    """``decisions`` as a dict of call id to :class:`Decision`; else a ``TypeError`` or ``ValueError`` saying why."""
    if not isinstance(decisions, Mapping):
        raise TypeError(f"decisions must be a mapping of call id to Decision, got {type(decisions).__name__}")
    if not decisions:
        raise ValueError("decisions is empty: name at least one call")
    for call_id, decision in decisions.items():
        if not isinstance(call_id, str) or not call_id:
            raise TypeError(f"decisions: a call id is a non-empty str, got {call_id!r:.80}")
        if not isinstance(decision, Decision):
            raise TypeError(f"decisions[{call_id!r:.40}] must be an agentsessions.Decision, got {decision!r:.80}")
    return dict(decisions)


def decided(
    session_id: str,
    waiting: bool,
    approvals: Sequence[Approval],
    decisions: Mapping[str, Decision],
    now: datetime.datetime,
) -> list[Approval] | None:
    """The approvals with ``decisions`` recorded; ``None`` when each is already recorded (a retry).

    ``waiting``: whether the session waits now. Raises :class:`ConflictError` naming the
    first call that cannot take its decision (unknown, decided otherwise, or undecided in a
    session that no longer waits): all or none.
    """
    by_id = {approval.call_id: approval for approval in approvals}
    changed = False
    for call_id, decision in decisions.items():
        approval = by_id.get(call_id)
        if approval is None:
            raise ConflictError(f"session {session_id!r:.80} has no call {call_id!r:.80} waiting for a decision")
        wanted = wanted_input(approval, decision)
        if approval.decision == decision.decision and wanted == approval.input:
            continue  # the same decision (and input) again: a retry, recorded once
        if approval.decision is not None:
            edited = " with another input" if approval.decision == decision.decision else ""
            raise ConflictError(
                f"call {call_id!r:.80} of session {session_id!r:.80} was already {approval.decision}{edited}"
            )
        if not waiting:
            raise ConflictError(
                f"session {session_id!r:.80} is not waiting: call {call_id!r:.80} can no longer be decided"
            )
        if wanted != approval.input:  # edited: the call runs with it, the model's input kept beside
            approval = attrs.evolve(approval, input=wanted, original_input=approval.input)
        by_id[call_id] = attrs.evolve(
            approval, decision=decision.decision, by=decision.by, reason=decision.reason, decided_at=now
        )
        changed = True
    return [by_id[approval.call_id] for approval in approvals] if changed else None


def edits(before: Sequence[Approval], after: Sequence[Approval]) -> dict[str, str]:
    """The calls :func:`decided` approved with an edited input: call id to that input."""
    return {
        new.call_id: new.input
        for old, new in zip(before, after, strict=True)
        if old.decision is None and new.original_input is not None
    }


def edited_message(message: Message, inputs: Mapping[str, str]) -> Message:
    """``message`` (the wait's assistant message) with the ``tool_use`` blocks named in ``inputs`` rewritten.

    Raises :class:`ConflictError` when one is missing: the transcript changed behind the wait.
    """
    missing = set(inputs)
    content = []
    for block in message.content:
        if block.type is ContentType.TOOL_USE and block.id in inputs:
            block = attrs.evolve(block, input=inputs[block.id])
            missing.discard(block.id)
        content.append(block)
    if missing or message.role is not Role.ASSISTANT:
        call = next(iter(missing), "")
        changed = f"the transcript's last message no longer holds call {call!r:.80}"
        raise ConflictError(f"{changed}: the transcript changed since the wait")
    return attrs.evolve(message, content=tuple(content))


def pending_count(approvals: Sequence[Approval]) -> int:
    """How many of ``approvals`` nobody has decided."""
    return sum(1 for approval in approvals if approval.decision is None)


# --- The stored form: one JSON text per wait, written and read by every store ---------------


def _when(value: datetime.datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _parsed(value: object) -> datetime.datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"a time is an ISO 8601 str, got {value!r:.40}")
    return datetime.datetime.fromisoformat(value)


_SURROGATES = re.compile("([\ud800-\udfff])")


def _spelled(text: str) -> str | list[str | int]:
    """``text``, or, when it holds surrogates (which UTF-8 cannot carry, and which JSON escapes would
    join into one character), a list of its pieces: text as strings, each surrogate as its code point."""
    if not _SURROGATES.search(text):
        return text
    return [ord(piece) if i % 2 else piece for i, piece in enumerate(_SURROGATES.split(text)) if piece]


def _joined(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, (str, int)) and not isinstance(p, bool) for p in value):
        return "".join(chr(p) if isinstance(p, int) else p for p in value)
    raise TypeError(f"a text is a str or a list of pieces, got {value!r:.40}")


def encode(approvals: Sequence[Approval]) -> str:
    """The approvals of one wait as the JSON text stores keep (every string verbatim, valid UTF-8)."""
    return json.dumps(
        [
            {
                "call_id": _spelled(a.call_id),
                "tool": a.tool,
                "input": _spelled(a.input),
                "requested_at": _when(a.requested_at),
                "decision": a.decision,
                "by": _spelled(a.by),
                "reason": _spelled(a.reason),
                "decided_at": _when(a.decided_at),
                **({} if a.original_input is None else {"original_input": _spelled(a.original_input)}),
                **({"input_schema": _spelled(a.input_schema)} if a.input_schema else {}),
            }
            for a in approvals
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )


def decode(text: str | None, session_id: str = "") -> list[Approval]:
    """What :func:`encode` wrote (``None``: no wait yet); a :class:`FormatError` naming the session otherwise."""
    if text is None or text == "":
        return []
    try:
        rows: Any = json.loads(text)
        return [_approval(row) for row in rows]
    except (ValueError, TypeError, KeyError) as error:
        raise FormatError(f"session {session_id!r:.80} has approvals this version cannot read: {error}") from error


def _approval(row: Mapping[str, Any]) -> Approval:
    requested_at = _parsed(row["requested_at"])
    assert requested_at is not None
    return Approval(
        _joined(row["call_id"]),
        row["tool"],
        _joined(row["input"]),
        requested_at,
        row["decision"],
        _joined(row["by"]),
        _joined(row["reason"]),
        _parsed(row["decided_at"]),
        None if row.get("original_input") is None else _joined(row["original_input"]),
        _joined(row.get("input_schema", "")),
    )


Call = tuple[str, str, str]
"""A tool call as a decision is bound to it: (call id, tool name, input)."""


def binding(approvals: Sequence[Approval]) -> dict[Call, Approval]:
    """The approvals by the exact call each is bound to: (id, tool, input)."""
    return {(a.call_id, a.tool, a.input): a for a in approvals}


def rejected(approval: Approval) -> str:
    """The error result a rejected call gets, holding the reason."""
    who = f" ({approval.by})" if approval.by else ""
    why = f": {approval.reason}" if approval.reason else ""
    return f"a person rejected this tool call{who}, so it did not run{why}"


def pending_error(session_id: str, count: int) -> ApprovalPendingError:
    """The error for a run started while ``count`` calls of the session's wait are undecided."""
    return ApprovalPendingError(
        f"session {session_id!r:.80} waits for a decision on {count} tool call(s): approve or reject "
        "each (session.approvals() lists them) before resuming it"
    )


__all__ = ["Approval", "ApprovalStore", "Decision"]
