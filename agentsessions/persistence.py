"""Where a run's transcript goes, decided once, when the run starts.

There are three paths, one object each behind :class:`Persistence`:

- no session: :data:`NOWHERE`. Nothing is read or written, and no event reports a save.
- a session whose store has only the seed's four methods: :class:`SeedSession`, which
  saves and takes steers through those methods, without claims or fencing.
- a session over a :class:`~agentsessions.session.RunStore`: the run's
  :class:`~agentsessions.holding.Hold`, which saves under its claim and takes steers in
  the same atomic step as the save that carries them.

With ``Spec(journal=True)`` a session's object is wrapped in :class:`Journal`, which also
saves around every tool call. The loop and the runner call these methods at fixed points
of a run and never ask which path they have. Every method that may write returns whether
it wrote, so that a ``TranscriptSaved`` event always stands for a save.

Nothing in this module is public API.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from agentsessions.approvals import Approval
from agentsessions.holding import Hold
from agentsessions.messages import Content, Message, put_results
from agentsessions.runs import RunState
from agentsessions.session import RunStore, Session, StoreSession
from agentsessions.usage import Usage

log = logging.getLogger("agentsessions")

IN_DOUBT = (
    "this tool call was started but its result was never recorded: the run stopped while the call "
    "was in progress, so it may or may not have taken effect, and its result is lost"
)
"""The journal's mark for a call recorded as started whose result never was."""


class Persistence(Protocol):
    """What a run does with its transcript at each point of its life; one object per run."""

    @property
    def cancel_requested(self) -> bool:
        """Whether someone asked the run, through the store, to stop (learned at a save or renewal)."""
        ...

    @property
    def took_over(self) -> bool:
        """Whether the run's claim ended another holder's lapsed lease (``Claim.took_over``)."""
        ...

    @property
    def queued(self) -> bool:
        """Whether the run released its session with texts queued for the next run, which its runner starts."""
        ...

    def count_usage(self, usage: Callable[[], Usage]) -> None:
        """From now on, each save records ``usage()``, the run's tokens so far, where the store keeps usage."""
        ...

    def take_steers(self) -> list[str]:
        """Before a model request: the session's waiting steers, oldest first."""
        ...

    def save(self, transcript: Sequence[Message]) -> bool:
        """Before a model request: write the transcript; whether anything was written."""
        ...

    def before_call(self, transcript: list[Message], results: Sequence[Content], use: Content) -> bool:
        """Before the tool call ``use`` runs, ``results`` being those of the step's earlier calls.

        Raises :class:`~agentsessions.errors.ConflictError` when the run is known to hold
        its session no longer; returns whether anything was written.
        """
        ...

    def after_call(self, transcript: list[Message], results: Sequence[Content]) -> bool:
        """After a tool call returned, ``results`` now including its; whether anything was written."""
        ...

    def leave_steers(self, texts: Sequence[str]) -> list[str]:
        """Steers of the run's box it has no step left for: kept for the next run; returns those it cannot keep."""
        ...

    def finish(self, transcript: Sequence[Message], end: RunState, *, room: bool) -> tuple[bool, list[str]]:
        """The last save and the release in state ``end``: whether it wrote, and steers to go on with.

        Steers that arrived since the last collection keep the run going when it has
        ``room`` (a step left, not cancelled); the session then stays the run's.
        """
        ...

    def stop(self, transcript: Sequence[Message], end: RunState) -> bool:
        """After a failure or an interrupt: save what the run has and release, if the store lets us.

        Never raises a store's error (the run is already ending with its own); returns
        whether the transcript was saved.
        """
        ...

    def approvals(self) -> list[Approval]:
        """The calls of the session's latest wait and their decisions (``[]`` when nothing keeps them)."""
        ...

    def wait(self, transcript: Sequence[Message], approvals: Sequence[Approval]) -> bool:
        """The last save, and the release of the session ``WAITING`` for ``approvals``; whether it wrote."""
        ...

    def let_go(self) -> None:
        """The run is over: stop keeping its session (idempotent)."""
        ...


class Nowhere:
    """No session: a run that touches no store and reports no save."""

    __slots__ = ()
    cancel_requested = False
    took_over = False
    queued = False

    def count_usage(self, usage: Callable[[], Usage]) -> None:
        pass

    def take_steers(self) -> list[str]:
        return []

    def save(self, transcript: Sequence[Message]) -> bool:
        return False

    def before_call(self, transcript: list[Message], results: Sequence[Content], use: Content) -> bool:
        return False

    def after_call(self, transcript: list[Message], results: Sequence[Content]) -> bool:
        return False

    def leave_steers(self, texts: Sequence[str]) -> list[str]:
        return list(texts)

    def finish(self, transcript: Sequence[Message], end: RunState, *, room: bool) -> tuple[bool, list[str]]:
        return False, []

    def stop(self, transcript: Sequence[Message], end: RunState) -> bool:
        return False

    def approvals(self) -> list[Approval]:
        return []

    def wait(self, transcript: Sequence[Message], approvals: Sequence[Approval]) -> bool:
        return False

    def let_go(self) -> None:
        pass


NOWHERE = Nowhere()
"""The one :class:`Nowhere`: a run without a session allocates nothing for its persistence."""


class SeedSession(Nowhere):
    """A session over a store with only the seed's four methods: no claim, no lease, no fencing.

    What such a store cannot do is left as :class:`Nowhere` does it: nothing proves the run
    still holds the session before a tool call, and steers the run has no step left for are
    reported unapplied (no release would check the store for them).
    """

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
        self.session = session

    def take_steers(self) -> list[str]:
        return self.session.take_steers()

    def save(self, transcript: Sequence[Message]) -> bool:
        self.session.save(transcript)
        return True

    def finish(self, transcript: Sequence[Message], end: RunState, *, room: bool) -> tuple[bool, list[str]]:
        # Steers stored since the last collection (Runner.send stores first) keep the run going,
        # as a run store's release does; not in the same atomic step, so one can still come late.
        late = self.session.take_steers() if room else []
        if late:
            return False, late
        self.session.save(transcript)
        return True, []

    def stop(self, transcript: Sequence[Message], end: RunState) -> bool:
        if end is RunState.FAILED:
            # A run fails in a save or in a model request right after one: the store has it all,
            # and a store that just failed is not asked again.
            return False
        try:
            self.session.save(transcript)
        except Exception as error:  # a third party's store raises what it likes; the run's own exception wins
            log.warning("could not save the session as the run was interrupted: %s", error)
            return False
        return True

    def wait(self, transcript: Sequence[Message], approvals: Sequence[Approval]) -> bool:
        # Such a store keeps no state: the transcript ends in the calls, and a run resumed from
        # it stops for them again. Decisions need a store that keeps approvals.
        self.session.save(transcript)
        return True


class Journal:
    """``Spec(journal=True)``: a session's persistence that also saves around every tool call.

    Each call is saved as started (its result the in-doubt mark) right before it runs, and
    its result right after: a crash in between leaves the mark, so it never runs twice.
    The first of those saves also carries the calls themselves, as soon as they arrived.
    """

    __slots__ = ("inner",)

    def __init__(self, inner: Persistence) -> None:
        self.inner = inner

    @property
    def cancel_requested(self) -> bool:
        return self.inner.cancel_requested

    @property
    def took_over(self) -> bool:
        return self.inner.took_over

    @property
    def queued(self) -> bool:
        return self.inner.queued

    def count_usage(self, usage: Callable[[], Usage]) -> None:
        self.inner.count_usage(usage)

    def take_steers(self) -> list[str]:
        return self.inner.take_steers()

    def save(self, transcript: Sequence[Message]) -> bool:
        return self.inner.save(transcript)

    def before_call(self, transcript: list[Message], results: Sequence[Content], use: Content) -> bool:
        put_results(transcript, [*results, Content.tool_result(use.id, IN_DOUBT, is_error=True)])
        return self.inner.save(transcript)  # as a save under the claim, it also proves the run holds it

    def after_call(self, transcript: list[Message], results: Sequence[Content]) -> bool:
        put_results(transcript, results)
        return self.inner.save(transcript)

    def leave_steers(self, texts: Sequence[str]) -> list[str]:
        return self.inner.leave_steers(texts)

    def finish(self, transcript: Sequence[Message], end: RunState, *, room: bool) -> tuple[bool, list[str]]:
        return self.inner.finish(transcript, end, room=room)

    def stop(self, transcript: Sequence[Message], end: RunState) -> bool:
        return self.inner.stop(transcript, end)

    def approvals(self) -> list[Approval]:
        return self.inner.approvals()

    def wait(self, transcript: Sequence[Message], approvals: Sequence[Approval]) -> bool:
        return self.inner.wait(transcript, approvals)

    def let_go(self) -> None:
        self.inner.let_go()


def choose(session: Session | None, *, journal: bool, replica: str, lease: float) -> Persistence:
    """The persistence of a run of ``session``; claims it when its store keeps runs.

    Raises :class:`~agentsessions.errors.SessionBusyError` while another run holds it.
    """
    if session is None:
        return NOWHERE
    chosen: Persistence
    if isinstance(session, StoreSession) and isinstance(session.store, RunStore):
        chosen = Hold.claim_session(session.store, session.id, replica, lease)
    else:
        chosen = SeedSession(session)
    return Journal(chosen) if journal else chosen
