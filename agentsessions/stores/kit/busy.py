"""What a steer does when a live run holds its session: the ``if_busy`` policy, decided in the store.

``add_steer(..., if_busy=...)`` reads the session's state and stores (or refuses) the steer
in one atomic step, so two replicas sending at once each get one outcome. Every store
makes the same decision, in the step that adds the steer::

    if_busy = busy.check(if_busy)
    ...  # in the step that adds the steer, the record read (locked, or in a script):
    after = busy.after_token(if_busy, state, token, session_id, holder, lease_expires_at)
    <add the steer with after_token=after>; if busy.interrupts(if_busy, after): <set cancel_requested>

A steer with ``after_token`` set is taken only by a claim with a greater token: the live
run leaves it (its ``Hold`` filters what ``peek_steers`` returns), and the run after it
takes it. ``"reject"`` raises before anything is written; a retried key is checked first
(a retry finding its text stored returns the state, as any retry does).
"""

from __future__ import annotations

import datetime

from agentsessions.runs import RunState, busy
from agentsessions.session import check_if_busy

__all__ = ["after_token", "check", "interrupts"]


def check(if_busy: object) -> str:
    """``if_busy`` checked: one of ``"steer"``, ``"queue"``, ``"interrupt"``, ``"reject"``."""
    return check_if_busy(if_busy)


def after_token(
    if_busy: str,
    state: RunState,
    token: int,
    session_id: str,
    holder: str | None = None,
    lease_expires_at: datetime.datetime | None = None,
) -> int:
    """The steer's ``after_token`` given the session's ``state`` and its live claim's ``token``; or refuse it.

    0 (any run takes it) unless a live run holds the session; then the live token for
    ``"queue"`` and ``"interrupt"``, and :class:`~agentsessions.errors.SessionBusyError` for
    ``"reject"``.
    """
    if state is not RunState.RUNNING or if_busy == "steer":
        return 0
    if if_busy == "reject":
        raise busy(session_id, holder, lease_expires_at)
    return token


def interrupts(if_busy: str, after: int) -> bool:
    """Whether adding the steer also asks the live run to stop (``cancel_requested``)."""
    return if_busy == "interrupt" and after > 0
