"""A run's hold on its session in a :class:`~agentsessions.session.RunStore`, and the heartbeat that keeps it.

``Hold`` is the run's persistence (:mod:`agentsessions.persistence`) when the store keeps
runs: it peeks the steers and remembers which it took until a save carries them (taking
and saving are then one atomic step in the store), saves only under its claim, and
releases the session in the state the run ended in.

Leases follow one ``Heartbeat`` per store object in this process, not one thread or one
write per run: every beat renews all of this process's claims on that store in one
batched write, at least every ``lease / 3`` of the shortest lease held. A slow model
request or tool call therefore never lets a live run look stalled, and a replica holding
a thousand runs writes as often as one holding a single run.

Nor does a tool call cost a write: a run proves it still holds its session by the time of
its last renewal (the heartbeat's, or its last save's, which renews too). A lease renewed
less than half a lease ago cannot have been taken over, so the call starts without asking
the store; only when the heartbeat is late (a failed write, a starved thread) does the run
renew its own lease first. What renewals learn (a lost claim, a cancel from elsewhere)
reaches the run at the next beat or save; the fencing token still refuses every write of
a run whose claim was superseded.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from agentsessions.approvals import Approval, ApprovalStore
from agentsessions.errors import ConflictError, StoreError
from agentsessions.messages import Content, Message
from agentsessions.runs import Claim, Progress, Renewal, RunState, Steer, superseded
from agentsessions.session import RunStore, keeps_usage
from agentsessions.usage import Usage

log = logging.getLogger("agentsessions")


class Hold:
    """One run's claim on its session, with the steers it has taken but not yet saved."""

    def __init__(self, store: RunStore, claim: Claim) -> None:
        self.store = store
        self.claim = claim
        self.taken: list[int] = []
        self.cancel_requested = False
        self.lost = False
        self.released = False
        # Set when the run released its session with texts queued for the next run
        # (if_busy="queue" or "interrupt"): its runner starts that run.
        self.queued = False
        # When the write that last extended the lease began (time.monotonic()): the lease
        # runs at least ``lease`` seconds from then, whatever the write's own delay.
        self.renewed_at = time.monotonic()
        # What the run has used so far, given to each save; set only where the store keeps usage
        # (the loop offers it: Persistence.count_usage).
        self.usage: Callable[[], Usage] | None = None

    @classmethod
    def claim_session(cls, store: RunStore, session_id: str, replica: str, lease: float) -> Hold:
        """Claim the session (``SessionBusyError`` while another lease is live) and start keeping the lease."""
        started = time.monotonic()
        hold = cls(store, store.claim(session_id, replica=replica, lease=lease))
        hold.renewed_at = started
        Heartbeat.of(store).add(hold)
        return hold

    @property
    def took_over(self) -> bool:
        """Whether the claim ended another holder's lapsed lease."""
        return self.claim.took_over

    def count_usage(self, usage: Callable[[], Usage]) -> None:
        """Record ``usage()`` (the run's tokens so far) with every save, in the store's same write."""
        if keeps_usage(self.store):
            self.usage = usage

    def take_steers(self) -> list[str]:
        """The steers waiting in the store that this run has not taken yet, oldest first."""
        claim, taken = self.claim, self.taken
        fresh = [s for s in self.store.peek_steers(claim.session_id) if s.seq not in taken and s.for_claim(claim)]
        return self._take(fresh)

    def save(self, transcript: Sequence[Message]) -> bool:
        """Save under the claim (which renews the lease), deleting the steers the transcript now carries."""
        started = time.monotonic()
        progress = self._save_run(transcript, taken=self.taken)
        self.renewed_at = started
        self.taken = []
        self.cancel_requested = self.cancel_requested or progress.cancel_requested
        return True

    def before_call(self, transcript: list[Message], results: Sequence[Content], use: Content) -> bool:
        """Before a side effect: raise if the run no longer holds its session; no write while the lease is fresh.

        The heartbeat renews every third of the lease; a renewal older than half of it means
        the heartbeat is late, and the run renews its own lease before the call starts.
        """
        if not self.lost and time.monotonic() - self.renewed_at > self.claim.lease / 2:
            started = time.monotonic()
            self.renewed(self.store.renew([self.claim]), started)
        if self.lost:
            raise superseded(self.claim)
        return False

    def renewed(self, renewal: Renewal, started: float) -> None:
        """Take in what a renewal that began at ``started`` learned about this claim."""
        if self.claim in renewal.lost:
            self.lost = True
        else:
            self.renewed_at = max(self.renewed_at, started)
        if self.claim in renewal.cancelling:
            self.cancel_requested = True

    def after_call(self, transcript: list[Message], results: Sequence[Content]) -> bool:
        """Nothing: without the journal, a tool's result is saved with the next request."""
        return False

    def leave_steers(self, texts: Sequence[str]) -> list[str]:
        """Store ``texts`` as the session's steers, for the release to find or the next run to take."""
        for text in texts:
            self.store.add_steer(self.claim.session_id, text)
        return []

    def finish(self, transcript: Sequence[Message], end: RunState, *, room: bool) -> tuple[bool, list[str]]:
        """Save and release in state ``end``, unless steers arrived since the last collection.

        With ``room`` the run goes on with those steers, still holding the session: releasing
        and that check are one step. Without, they are steers whose senders were told
        ``RUNNING`` and no step is left for them: the session is saved but not released, so
        its lease lapses and a resumer finds it ``STALLED`` with them pending (they stay in the
        store until a run's save carries them).

        Texts queued for the next run (``if_busy="queue"`` or ``"interrupt"``) are never this
        run's: when they wait and no steer of its own keeps it going, it releases the session
        and sets :attr:`queued`, and its runner starts the next run at once. A crash between
        the two writes leaves the session held: its lease lapses and a resumer's claim takes them.
        """
        started = time.monotonic()
        progress = self._save_run(transcript, taken=self.taken, end=end, unless_steered=True)
        self.renewed_at = started
        self.taken = []
        mine = [steer for steer in progress.pending if steer.for_claim(self.claim)]
        if mine and room:
            return True, self._take(mine)
        if len(mine) < len(progress.pending):
            self._save_run(transcript, end=end)  # released; the next run takes them all
            self.queued = True
        self.let_go()
        return True, []

    def release(self, messages: Sequence[Message], end: RunState, *, unless_steered: bool) -> list[str]:
        """Save and release in state ``end``; with ``unless_steered``, steers that arrived instead.

        When steers arrived since the last collection, the session stays held and their
        texts are returned: releasing and that check are one step.
        """
        started = time.monotonic()
        progress = self._save_run(messages, taken=self.taken, end=end, unless_steered=unless_steered)
        self.renewed_at = started
        self.taken = []
        mine = [steer for steer in progress.pending if steer.for_claim(self.claim)]
        if mine:
            return self._take(mine)
        if progress.pending:  # only texts queued for the next run: release; the resumer finds them
            self._save_run(messages, end=end)
        self.let_go()
        return []

    def stop(self, transcript: Sequence[Message], end: RunState) -> bool:
        """After a failure or an interrupt: save what the run has and release it as ``end``, if the store lets us.

        A failed run releases only if no steer is waiting. Steers stored while it ran were
        answered ``RUNNING``: released ``FAILED``, they would wait where no resumer looks.
        Kept held instead, the session's lease lapses and a resumer finds it ``STALLED``
        with them pending, as after a crash. The same holds when the release itself fails.
        """
        try:
            self.release(transcript, end, unless_steered=end is RunState.FAILED)
        except ConflictError:
            return False  # superseded: the run that took over owns the session now
        except StoreError as error:
            session_id = self.claim.session_id
            log.warning("could not release session %r as %s after the run ended: %s", session_id, end.value, error)
            return False
        finally:
            self.let_go()
        return True

    def approvals(self) -> list[Approval]:
        """The calls of the session's latest wait, from a store that keeps approvals."""
        if not isinstance(self.store, ApprovalStore):
            return []
        return self.store.approvals(self.claim.session_id)

    def wait(self, transcript: Sequence[Message], approvals: Sequence[Approval]) -> bool:
        """Save, then release the session ``WAITING`` for ``approvals``.

        Two writes, both under the claim: a crash between them leaves the session held, its
        lease lapses, and the run resumed from it stops for the same calls again. A store
        that keeps no approvals has the session released ``FINISHED``: the transcript ends
        in the calls, and a run resumed from it stops for them again.
        """
        started = time.monotonic()
        if isinstance(self.store, ApprovalStore):
            self._save_run(transcript, taken=self.taken)
            self.taken = []
            self.store.wait(self.claim, approvals)
        else:
            self._save_run(transcript, taken=self.taken, end=RunState.FINISHED)
        self.renewed_at = started
        self.let_go()
        return True

    def _save_run(self, transcript: Sequence[Message], **kwargs: Any) -> Progress:
        """``store.save_run`` under the claim, with the run's usage when the store keeps it."""
        if self.usage is not None:
            kwargs["usage"] = self.usage()
        return self.store.save_run(self.claim, transcript, **kwargs)

    def let_go(self) -> None:
        """Stop renewing the lease (the session was released, or the run is over)."""
        if not self.released:
            self.released = True
            Heartbeat.of(self.store).remove(self)

    def _take(self, steers: list[Steer]) -> list[str]:
        self.taken += [steer.seq for steer in steers]
        return [steer.text for steer in steers]


class Heartbeat:
    """Renews the leases of every hold on one store, in one ``renew`` call per beat, on one daemon thread.

    The thread starts with the first hold and ends when the last is let go. A failed
    renewal is logged and tried again at the next beat: a lease is three beats long.
    """

    # Weak: a heartbeat lives while its thread runs; then nothing keeps it, or its store, alive.
    _beats: ClassVar[weakref.WeakValueDictionary[int, Heartbeat]] = weakref.WeakValueDictionary()
    _registry: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.holds: set[Hold] = set()
        self.changed = threading.Condition()
        self.thread: threading.Thread | None = None

    @classmethod
    def of(cls, store: RunStore) -> Heartbeat:
        """The heartbeat of ``store`` in this process."""
        with cls._registry:
            beat = cls._beats.get(id(store))
            if beat is None or beat.store is not store:
                beat = cls._beats[id(store)] = cls(store)
            return beat

    def add(self, hold: Hold) -> None:
        """Keep ``hold``'s lease from now on."""
        with self.changed:
            self.holds.add(hold)
            if self.thread is None:
                self.thread = threading.Thread(target=self._beat, name="agentsessions-heartbeat", daemon=True)
                self.thread.start()
            self.changed.notify()  # a shorter lease may need an earlier beat

    def remove(self, hold: Hold) -> None:
        """Stop keeping ``hold``'s lease."""
        with self.changed:
            self.holds.discard(hold)
            self.changed.notify()

    def _beat(self) -> None:
        last = time.monotonic()
        while True:
            with self.changed:
                # A new hold wakes the thread only to shorten the wait: renewing at every
                # claim would cost a write per run, which is what the heartbeat is to avoid.
                while self.holds and (wait := last + self._period() - time.monotonic()) > 0:
                    self.changed.wait(wait)
                if not self.holds:
                    self.thread = None
                    return
                holds = list(self.holds)
            last = time.monotonic()
            self._renew(holds)

    def _period(self) -> float:
        return min(hold.claim.lease for hold in self.holds) / 3

    def _renew(self, holds: list[Hold]) -> None:
        started = time.monotonic()
        try:
            renewal = self.store.renew([hold.claim for hold in holds])
        except StoreError as error:
            log.warning("could not renew %d lease(s): %s", len(holds), error)
            return
        for hold in holds:
            hold.renewed(renewal, started)
