"""Approvals for store authors: the stored form of a wait, and a decision as a compare-and-swap.

A store keeps one text per session: the calls of its latest wait with their decisions
(:func:`encode`), beside the state ``'waiting'`` while the session waits. Recording
decisions is one conditional write, so that two deciders racing in different processes
never both record one::

    def decide(self, session_id, decisions):
        return kit.approvals.decide(session_id, decisions, read=..., swap=...)

``read()`` returns the stored state (as ``derive_state`` takes it), the lease's end, the
stored text, and the store's ``now``; ``swap(old, new, pending)`` writes ``new`` (and the
count of undecided calls) only if the session still waits and still holds ``old``, and says
whether it did. A swap that lost a race is tried again on a fresh read, which then sees the
winner's decision: the same decision returns the state, another one raises
:class:`~agentsessions.ConflictError`.

An approval with an edited input also rewrites the wait's ``tool_use`` block (the last
message) in the same atomic step. A store that can do so passes ``edit(old, new, pending,
inputs)``: the swap, plus the last message rewritten by ``rewrite(position, message,
inputs)`` (``decide``'s argument, :func:`edited_message` when ``None``; a wrapping store
such as ``crypto.encrypted`` passes its own) and the session's revision renewed. A store
that passes no ``edit`` refuses such a decision with a ``TypeError``, writing nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence

from agentsessions.approvals import (
    Approval,
    Decision,
    check_decisions,
    decided,
    decode,
    edited_message,
    edits,
    encode,
    pending_count,
)
from agentsessions.errors import StoreError
from agentsessions.messages import Message
from agentsessions.runs import Claim, RunState, derive_state

__all__ = ["Rewrite", "check_wait", "decide", "decode", "edited_message", "encode", "pending_count", "rewritten"]

Rewrite = Callable[[int, Message, Mapping[str, str]], Message]
"""``rewrite(position, stored_message, inputs)``: the wait's last message as stored, with the edited inputs."""


def rewritten(rewrite: Rewrite | None, position: int, message: Message, inputs: Mapping[str, str]) -> Message:
    """The stored last message at ``position`` with ``inputs`` (call id to edited input) in its ``tool_use`` blocks."""
    if rewrite is None:
        return edited_message(message, inputs)
    return rewrite(position, message, inputs)


_TRIES = 64  # each failed swap means another decision (or the wait's end) landed in between


def check_wait(claim: object, approvals: object) -> tuple[Approval, ...]:
    """``wait(claim, approvals)``'s arguments, checked: a Claim, and a non-empty sequence of Approval."""
    if not isinstance(claim, Claim):
        raise TypeError(f"claim must be a Claim (from claim()), got {type(claim).__name__}: {claim!r:.80}")
    if isinstance(approvals, (str, bytes)) or not isinstance(approvals, Sequence):
        raise TypeError(f"approvals must be a sequence of Approval, got {type(approvals).__name__}")
    calls = tuple(approvals)
    if not calls:
        raise ValueError("approvals is empty: a session waits for at least one call")
    for index, approval in enumerate(calls):
        if not isinstance(approval, Approval):
            raise TypeError(f"approvals[{index}] must be an agentsessions.Approval, got {approval!r:.80}")
    return calls


Read = Callable[[], tuple[str | None, datetime.datetime | None, str | None, datetime.datetime]]
Swap = Callable[[str | None, str, int], bool]
Edit = Callable[[str | None, str, int, Mapping[str, str]], bool]


def decide(
    session_id: str, decisions: Mapping[str, Decision], *, read: Read, swap: Swap, edit: Edit | None = None
) -> RunState:
    """Record ``decisions`` through ``read`` and ``swap`` (see the module's docstring); the state after."""
    decisions = check_decisions(decisions)
    for _ in range(_TRIES):
        stored, lease_expires_at, text, now = read()
        state = derive_state(stored, lease_expires_at, now, session_id)
        before = decode(text, session_id)
        after = decided(session_id, state is RunState.WAITING, before, decisions, now)
        if after is None:
            return state
        inputs = edits(before, after)
        if inputs and edit is None:
            raise TypeError("this store cannot yet approve a call with an edited input (approve without input=)")
        if edit is not None and inputs and edit(text, encode(after), pending_count(after), inputs):
            return RunState.WAITING
        if not inputs and swap(text, encode(after), pending_count(after)):
            return RunState.WAITING
    raise StoreError(f"session {session_id!r:.80}: {_TRIES} decisions in a row raced this one; try again")
