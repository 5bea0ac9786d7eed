"""A store in this process's memory: for tests, examples and single-process programs.

It is also the smallest complete :class:`~agentsessions.session.RunStore`: a store author
can read here what every method must do, without a database in the way.
"""

from __future__ import annotations

import datetime
import itertools
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence

import attrs

from agentsessions.approvals import (
    Approval,
    Decision,
    check_decisions,
    deadline,
    decided,
    edits,
    pending_count,
    pending_error,
)
from agentsessions.errors import ConflictError
from agentsessions.messages import Message, check_transcript, transcript_list
from agentsessions.metadata import check_metadata, metadata_filter
from agentsessions.runs import (
    Claim,
    Progress,
    Renewal,
    RunState,
    SessionInfo,
    Steer,
    busy,
    check_updated_before,
    derive_state,
    state_filter,
    superseded,
    utcnow,
)
from agentsessions.session import check_fork_at, check_session_id
from agentsessions.stores.kit import approvals as kit_approvals
from agentsessions.stores.kit import arguments, steerkeys
from agentsessions.stores.kit import busy as policies
from agentsessions.stores.kit.approvals import check_wait
from agentsessions.stores.kit.prune import PruneFilter, check_prune, in_batches
from agentsessions.stores.kit.summary import fold_usage, preview, stored_usage
from agentsessions.usage import Usage

__all__ = ["MemoryStore"]


@attrs.define
class _Entry:
    # Each session has its own lock, so threads on different sessions never wait for each other.
    lock: threading.Lock = attrs.Factory(threading.Lock)
    messages: tuple[Message, ...] = ()
    steers: list[Steer] = attrs.Factory(list)
    keys: dict[str, bytes] = attrs.Factory(dict)  # steer key -> digest of its text, kept while the session lives
    updated_at: datetime.datetime | None = None
    run_state: RunState | None = None  # None: never claimed; RUNNING while held (STALLED is derived)
    token: int = 0
    holder: str | None = None
    lease: float = 0.0
    lease_expires_at: datetime.datetime | None = None
    cancel_requested: bool = False
    approvals: tuple[Approval, ...] = ()  # the latest wait's calls, kept after it ended
    metadata: dict[str, str] = attrs.Factory(dict)  # replaced whole, never changed in place
    preview: str = ""
    usage: str | None = None  # kit.summary's text: the runs' totals, folded as each run saves

    def state(self, now: datetime.datetime) -> RunState:
        return derive_state(self.run_state, self.lease_expires_at, now)

    def info(self, session_id: str, now: datetime.datetime) -> SessionInfo:
        return SessionInfo(
            session_id,
            len(self.messages),
            self.updated_at,
            self.state(now),
            self.holder,
            self.lease_expires_at,
            len(self.steers),
            self.cancel_requested,
            pending_count(self.approvals) if self.run_state is RunState.WAITING else 0,
            metadata=self.metadata,
            approval_deadline=deadline(self.approvals) if self.run_state is RunState.WAITING else None,
            usage=stored_usage(self.usage),
            preview=self.preview,
        )

    def holds(self, claim: Claim) -> bool:
        return self.token == claim.token and self.run_state is RunState.RUNNING


class MemoryStore:
    """Sessions in a dict; lives as long as the process. Safe to share between threads."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Entry] = {}
        # Tokens and steer numbers come from counters of the store, not of a session, so a
        # session deleted and created again never reuses one. next() on a count is atomic.
        self._tokens = itertools.count(1)
        self._seqs = itertools.count(1)

    def _entry(self, session_id: str) -> _Entry:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        if entry is None:
            entry = self._sessions.setdefault(session_id, _Entry())  # atomic: one entry wins
        return entry

    def _locked(self, session_id: str) -> _Entry:
        """The session's entry with its lock held, retried if a delete removed it meanwhile."""
        while True:
            entry = self._entry(session_id)
            entry.lock.acquire()
            if self._sessions.get(session_id) is entry:
                return entry
            entry.lock.release()

    # --- Transcripts and steers (the seed's four) ------------------------------------------

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Make ``messages`` the session's transcript (a snapshot: later changes to the list do not leak in)."""
        # Checked before the entry exists: a rejected save must leave no session behind.
        snapshot = self._snapshot(self._sessions.get(check_session_id(session_id)), messages)
        entry = self._locked(session_id)
        try:
            entry.messages, entry.updated_at, entry.preview = snapshot, utcnow(), preview(snapshot)
        finally:
            entry.lock.release()

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none."""
        entry = self._sessions.get(check_session_id(session_id))
        return list(entry.messages) if entry else []

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Leave a steer for the session's run; returns the session's state as it was stored.

        A ``key`` the session holds stores nothing: the state for the same text, a
        :class:`ConflictError` for another. ``if_busy`` decides what the steer does while a
        live run holds the session (:mod:`agentsessions.stores.kit.busy`).
        """
        session_id, text, key = arguments.add_steer(session_id, text, key)
        if_busy = policies.check(if_busy)
        entry = self._locked(session_id)
        try:
            state = entry.state(utcnow())
            if key is None or steerkeys.fresh(entry.keys.get(key), text, session_id, key):
                after = policies.after_token(
                    if_busy, state, entry.token, session_id, entry.holder, entry.lease_expires_at
                )
                if key is not None:
                    entry.keys[key] = steerkeys.digest(text)
                entry.steers.append(Steer(next(self._seqs), text, after))
                entry.cancel_requested = entry.cancel_requested or policies.interrupts(if_busy, after)
            return state
        finally:
            entry.lock.release()

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first."""
        entry = self._sessions.get(check_session_id(session_id))
        if entry is None:
            return []
        with entry.lock:
            taken, entry.steers = entry.steers, []
        return [steer.text for steer in taken]

    # --- Records: info, listing, delete, cancel ---------------------------------------------

    def info(self, session_id: str) -> SessionInfo:
        """The session's record; an unknown id is ``IDLE`` with length 0."""
        entry = self._sessions.get(check_session_id(session_id))
        if entry is None:
            return SessionInfo(session_id)
        with entry.lock:
            return entry.info(session_id, utcnow())

    def set_metadata(self, session_id: str, metadata: Mapping[str, str]) -> None:
        """Make ``metadata`` the session's whole metadata; makes the record if there is none."""
        check_session_id(session_id)
        checked = check_metadata(metadata)
        entry = self._locked(session_id)
        try:
            entry.metadata = checked
        finally:
            entry.lock.release()

    def sessions(
        self,
        *,
        state: RunState | Collection[RunState] | None = None,
        updated_before: datetime.datetime | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Iterator[SessionInfo]:
        """Every session (holding each pair of ``metadata``), newest update first (never saved last), each once."""
        states, before, pairs = state_filter(state), check_updated_before(updated_before), metadata_filter(metadata)
        return self._listing(states, before, pairs)

    def _listing(
        self, states: frozenset[RunState] | None, before: datetime.datetime | None, pairs: dict[str, str] | None
    ) -> Iterator[SessionInfo]:
        # A generator: the sessions are read at the first next(), as a paging store reads its first page.
        infos = [
            info
            for info in map(self.info, list(self._sessions))
            if (states is None or info.state in states)
            and (before is None or (info.updated_at is not None and info.updated_at < before))
            and (pairs is None or pairs.items() <= info.metadata.items())
        ]
        never = datetime.datetime.min.replace(tzinfo=datetime.UTC)
        infos.sort(key=lambda info: (info.updated_at or never, info.id), reverse=True)
        yield from infos

    def delete(self, session_id: str) -> bool:
        """Remove the session whole; ``True`` if it existed."""
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        if entry is None:
            return False
        with entry.lock:
            return self._sessions.pop(session_id, None) is entry

    def prune(
        self,
        *,
        updated_before: datetime.datetime,
        state: RunState | Collection[RunState] | None = None,
        metadata: Mapping[str, str] | None = None,
        batch: int = 500,
    ) -> int:
        """Delete the sessions last updated before ``updated_before`` (ended ones by default); how many went."""
        wanted = check_prune(updated_before, state, metadata, batch)
        return in_batches(list(self._sessions), wanted.batch, lambda ids: sum(self._prune_one(i, wanted) for i in ids))

    def _prune_one(self, session_id: str, wanted: PruneFilter) -> bool:
        entry = self._sessions.get(session_id)
        if entry is None:
            return False
        with entry.lock:  # decided and deleted under the lock a claim takes: the claim wins or the prune does
            if not wanted.matches(entry.info(session_id, utcnow())):
                return False
            return self._sessions.pop(session_id, None) is entry

    def cancel(self, session_id: str) -> bool:
        """Ask the live run holding the session to stop; ``False`` when none holds it."""
        entry = self._sessions.get(check_session_id(session_id))
        if entry is None:
            return False
        with entry.lock:
            if entry.state(utcnow()) is not RunState.RUNNING:
                return False
            entry.cancel_requested = True
            return True

    def fork(self, session_id: str, new_id: str, *, at: int | None = None) -> None:
        """Copy the first ``at`` messages into a new, idle session with no steers."""
        check_session_id(new_id)
        source = self._sessions.get(check_session_id(session_id))
        messages = source.messages if source is not None else ()  # a tuple: the snapshot is free
        kept = messages[: check_fork_at(at, len(messages))]
        fork = _Entry(messages=kept, updated_at=utcnow(), preview=preview(kept))  # its own runs' usage: none yet
        if self._sessions.setdefault(new_id, fork) is not fork:  # atomic: the new id is taken or it is ours
            raise ConflictError(f"cannot fork into session {new_id!r:.80}: it exists")

    # --- Holding a run ---------------------------------------------------------------------

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Hold the session for a run, taking over a stalled one; busy while another lease is live."""
        session_id, replica, lease = arguments.claim(session_id, replica, lease)
        entry = self._locked(session_id)
        try:
            now = utcnow()
            state = entry.state(now)
            if state is RunState.RUNNING:
                raise busy(session_id, entry.holder, entry.lease_expires_at)
            if entry.run_state is RunState.WAITING and pending_count(entry.approvals):
                raise pending_error(session_id, pending_count(entry.approvals))
            claim = Claim(session_id, next(self._tokens), replica, lease, took_over=state is RunState.STALLED)
            entry.run_state, entry.token, entry.holder, entry.lease = RunState.RUNNING, claim.token, replica, lease
            entry.lease_expires_at, entry.cancel_requested = now + datetime.timedelta(seconds=lease), False
            return claim
        finally:
            entry.lock.release()

    def peek_steers(self, session_id: str) -> list[Steer]:
        """The waiting steers, oldest first, left in place."""
        entry = self._sessions.get(check_session_id(session_id))
        if entry is None:
            return []
        with entry.lock:
            return list(entry.steers)

    def save_run(
        self,
        claim: Claim,
        messages: Sequence[Message],
        *,
        taken: Sequence[int] = (),
        end: RunState | None = None,
        unless_steered: bool = False,
        usage: Usage | None = None,
    ) -> Progress:
        """Save as the holder of ``claim``, deleting the ``taken`` steers; release with ``end``.

        With ``usage`` (the run's tokens so far) the session's usage records it in the same step.
        """
        call = arguments.save_run(claim, taken, end, unless_steered, usage)
        end, unless_steered = call.end, call.unless_steered
        entry = self._sessions.get(claim.session_id)
        if entry is None:
            raise superseded(claim)
        snapshot = self._snapshot(entry, messages)
        with entry.lock:
            if self._sessions.get(claim.session_id) is not entry or not entry.holds(claim):
                raise superseded(claim)
            gone = set(call.taken)
            entry.steers = [steer for steer in entry.steers if steer.seq not in gone]
            now = utcnow()
            entry.messages, entry.updated_at, entry.preview = snapshot, now, preview(snapshot)
            if call.usage is not None:
                entry.usage = fold_usage(entry.usage, claim.token, call.usage)
            entry.lease_expires_at = now + datetime.timedelta(seconds=entry.lease)
            if end is not None and unless_steered and entry.steers:
                return Progress(entry.cancel_requested, tuple(entry.steers))
            if end is not None:
                entry.run_state, entry.cancel_requested = end, False
                return Progress()
            return Progress(entry.cancel_requested)

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        """Extend each claim's lease; report the claims lost and those asked to cancel."""
        lost, cancelling = set(), set()
        for claim in arguments.renew(claims):
            entry = self._sessions.get(claim.session_id)
            if entry is None:
                lost.add(claim)
                continue
            with entry.lock:
                if not entry.holds(claim):
                    lost.add(claim)
                    continue
                entry.lease_expires_at = utcnow() + datetime.timedelta(seconds=entry.lease)
                if entry.cancel_requested:
                    cancelling.add(claim)
        return Renewal(frozenset(lost), frozenset(cancelling))

    # --- Approvals --------------------------------------------------------------------------

    def wait(self, claim: Claim, approvals: Sequence[Approval]) -> None:
        """Release the session held by ``claim`` as ``WAITING`` for ``approvals``."""
        calls = check_wait(claim, approvals)
        entry = self._sessions.get(claim.session_id)
        if entry is None:
            raise superseded(claim)
        with entry.lock:
            if self._sessions.get(claim.session_id) is not entry or not entry.holds(claim):
                raise superseded(claim)
            entry.run_state, entry.cancel_requested, entry.approvals = RunState.WAITING, False, calls

    def approvals(self, session_id: str) -> list[Approval]:
        """The calls of the session's latest wait, decided or not."""
        entry = self._sessions.get(check_session_id(session_id))
        return list(entry.approvals) if entry is not None else []

    def decide(
        self, session_id: str, decisions: Mapping[str, Decision], *, rewrite: kit_approvals.Rewrite | None = None
    ) -> RunState:
        """Record ``decisions`` on the waiting calls, all or none; the state after.

        An edited input rewrites the wait's ``tool_use`` block under the same lock.
        """
        decisions = check_decisions(decisions)
        entry = self._locked(check_session_id(session_id))
        try:
            now = utcnow()
            waiting = entry.run_state is RunState.WAITING
            after = decided(session_id, waiting, entry.approvals, decisions, now)
            inputs = edits(entry.approvals, after) if after is not None else {}
            if inputs:
                last = len(entry.messages) - 1
                if last < 0:
                    raise ConflictError(f"session {session_id!r:.80} has no transcript holding its wait")
                message = kit_approvals.rewritten(rewrite, last, entry.messages[last], inputs)
                entry.messages = (*entry.messages[:last], message)
            if after is not None:
                entry.approvals = tuple(after)
            return entry.state(now)
        finally:
            entry.lock.release()

    @staticmethod
    def _snapshot(entry: _Entry | None, messages: Sequence[Message]) -> tuple[Message, ...]:
        snapshot = tuple(transcript_list(messages))
        stored = entry.messages if entry is not None else ()
        # Only what differs from the stored transcript needs checking: the shared prefix compares
        # equal, a pointer check per message when they are the same objects, as in a run.
        shared = len(stored) if snapshot[: len(stored)] == stored else 0
        check_transcript(snapshot, start=shared)
        return snapshot
