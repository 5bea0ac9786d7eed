"""The MongoDB store's approvals: fields of the session document; private to :mod:`agentsessions.stores.mongodb`.

A wait sets ``run_state`` to ``'waiting'``, ``approvals`` to the calls' JSON text and
``pending_approvals`` to the undecided count (``approval_deadline`` to the earliest undecided
deadline), in one update conditional on the claim's
token. A decision is one update conditional on the text it read and on the wait still
being on (kit.approvals.decide's swap), so racing deciders record one decision each call.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from pymongo.collection import Collection

from agentsessions.approvals import Approval, Decision, deadline
from agentsessions.runs import Claim, RunState, superseded, utcnow
from agentsessions.stores.kit import approvals as kit_approvals
from agentsessions.stores.kit import values
from agentsessions.stores.mongodb._layout import RUNNING, key, moment

WAITING = RunState.WAITING.value
FREE_WAIT = {"run_state": WAITING, "pending_approvals": 0}
"""The condition a claim adds: a waiting session whose every call is decided is free to claim."""


def wait(sessions: Collection[Any], claim: Claim, approvals: Sequence[Approval]) -> None:
    """Release the session held by ``claim`` as ``WAITING`` for ``approvals``."""
    calls = kit_approvals.check_wait(claim, approvals)
    held = {"_id": key(claim.session_id), "token": claim.token, "run_state": RUNNING}
    fields = {"run_state": WAITING, "cancel_requested": False}
    fields |= {"approvals": kit_approvals.encode(calls), "pending_approvals": kit_approvals.pending_count(calls)}
    fields |= {"approval_deadline": _micros(deadline(calls))}
    if sessions.update_one(held, {"$set": fields}).matched_count == 0:
        raise superseded(claim)


def _micros(moment: datetime.datetime | None) -> int | None:
    return None if moment is None else values.micros(moment)


def approvals(sessions: Collection[Any], session_id: str) -> list[Approval]:
    """The calls of the session's latest wait, decided or not."""
    doc = sessions.find_one({"_id": key(session_id)}, {"approvals": 1})
    return kit_approvals.decode(doc.get("approvals") if doc else None, session_id)


def decide(
    sessions: Collection[Any], session_id: str, decisions: Mapping[str, Decision], *, edit: kit_approvals.Edit
) -> RunState:
    """Record ``decisions`` on the waiting calls, all or none, in one conditional update; the state after."""
    stored = key(session_id)

    def read() -> tuple[str | None, datetime.datetime | None, str | None, datetime.datetime]:
        doc = sessions.find_one({"_id": stored}, {"run_state": 1, "lease_expires_at": 1, "approvals": 1}) or {}
        return doc.get("run_state"), moment(doc.get("lease_expires_at")), doc.get("approvals"), utcnow()

    def swap(old: str | None, new: str, pending: int) -> bool:
        waiting = {"_id": stored, "run_state": WAITING, "approvals": old}
        deadline = _micros(kit_approvals.deadline_of(new, True, session_id))
        update = {"$set": {"approvals": new, "pending_approvals": pending, "approval_deadline": deadline}}
        return sessions.update_one(waiting, update).matched_count == 1

    return kit_approvals.decide(session_id, decisions, read=read, swap=swap, edit=edit)


def pending(doc: Mapping[str, Any], state: RunState) -> int:
    """The undecided calls a session document reports: its count while it waits, else 0."""
    return int(doc.get("pending_approvals", 0)) if state is RunState.WAITING else 0


__all__ = ["FREE_WAIT", "approvals", "decide", "pending", "wait"]
