"""The state machine of :mod:`agentsessions.stores.storetest`'s run properties; private to it.

Random claims, saves, steers, cancels, renewals and deletes of one session, each through
the store or its replica, checked against a plain model of the session's record. Leases
are long, so no state changes by itself while an example runs.
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from agentsessions.errors import ConflictError, SessionBusyError
from agentsessions.messages import Message
from agentsessions.runs import ENDINGS, Claim, Progress, Renewal, RunState, SessionInfo, Steer
from agentsessions.session import keeps_usage
from agentsessions.testing._storetest_support import (
    TEXT,
    Context,
    check_equal,
    check_raises,
    next_transcript,
    shown_preview,
)

LONG_LEASE = 60.0  # no lease of this length runs out during a check
REPLICAS = ("replica-1", "replica-2")
_VIA = st.integers(0, 1)


@attrs.define
class _Record:
    """What the store should hold for the session: the model the machine checks it against."""

    exists: bool = False  # a record, messages or steers: what delete() reports
    state: RunState = RunState.IDLE  # as stored: RUNNING, never STALLED, with these leases
    token: int = 0
    holder: str | None = None
    cancel: bool = False
    messages: list[Message] = attrs.Factory(list)
    updated: bool = False
    steers: list[tuple[int | None, str]] = attrs.Factory(list)  # (seq once seen, text)

    def holds(self, claim: Claim) -> bool:
        return self.state is RunState.RUNNING and self.token == claim.token


class RunMachine(RuleBasedStateMachine):
    """One session's record driven through every RunStore method, checked against :class:`_Record`."""

    def __init__(self, context: Context) -> None:
        super().__init__()
        context.examples += 1
        self.stores = context.runs
        # A store that keeps the summary (usage and preview) shows the last text; these runs record no usage.
        self.previews = keeps_usage(self.stores[1])  # read once: a signature is slow to inspect
        self.id = context.new_id("run")
        self.model = _Record()
        self.claims: list[Claim] = []  # every claim made, the superseded ones too
        self.saved: list[list[Message]] = []
        self.tags = itertools.count()

    def learn(self, steers: list[Steer] | tuple[Steer, ...], what: str) -> None:
        """Check ``steers`` are the pending ones, and note the seqs the store gave them."""
        check_equal([s.text for s in steers], [text for _, text in self.model.steers], what)
        for at, (steer, (seq, text)) in enumerate(zip(steers, self.model.steers, strict=True)):
            if seq is not None and seq != steer.seq:
                raise AssertionError(f"{what}: steer {at} has seq {steer.seq}, was {seq}")
            self.model.steers[at] = (steer.seq, text)
        seqs = [s.seq for s in steers]
        if seqs != sorted(set(seqs)):
            raise AssertionError(f"{what}: seqs {seqs} do not increase in the order the steers were added")

    def check_unwritten(self, what: str) -> None:
        check_equal(self.stores[1].messages(self.id), self.model.messages, f"messages() after {what}")
        self.learn(self.stores[1].peek_steers(self.id), f"peek_steers() after {what}")

    @rule(replica=st.sampled_from(REPLICAS), via=_VIA)
    def claim(self, replica: str, via: int) -> None:
        store = self.stores[via]
        if self.model.state is RunState.RUNNING:
            what = "claim() of a session a live run holds"
            check_raises(SessionBusyError, lambda: store.claim(self.id, replica=replica, lease=LONG_LEASE), what)
            return
        claim = store.claim(self.id, replica=replica, lease=LONG_LEASE)
        last = self.claims[-1].token if self.claims else 0
        if claim.token <= last:
            raise AssertionError(f"claim() gave token {claim.token}, not above the last claim's {last}")
        # No lease runs out here, so no claim takes one over.
        expected = Claim(self.id, claim.token, replica, LONG_LEASE, took_over=False)
        check_equal(claim, expected, "the Claim claim() returned")
        self.claims.append(claim)
        self.model.exists, self.model.state, self.model.token = True, RunState.RUNNING, claim.token
        self.model.holder, self.model.cancel = replica, False

    def pick(self, data: st.DataObject) -> Claim:
        """The latest claim half the time, else any claim made, superseded ones too."""
        latest = data.draw(st.booleans(), label="the latest claim")
        return self.claims[-1] if latest else data.draw(st.sampled_from(self.claims), label="claim")

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data())
    def save_run(self, data: st.DataObject) -> None:
        self.save_as(self.pick(data), None, False, data)

    @precondition(lambda self: any(not self.model.holds(claim) for claim in self.claims))
    @rule(data=st.data(), end=st.one_of(st.none(), st.sampled_from(sorted(ENDINGS))))
    def save_run_superseded(self, data: st.DataObject, end: RunState | None) -> None:
        superseded = [claim for claim in self.claims if not self.model.holds(claim)]
        self.save_as(data.draw(st.sampled_from(superseded), label="superseded claim"), end, False, data)

    @precondition(lambda self: bool(self.claims))
    @rule(end=st.sampled_from(sorted(ENDINGS)), unless_steered=st.booleans(), data=st.data())
    def release(self, end: RunState, unless_steered: bool, data: st.DataObject) -> None:
        self.save_as(self.pick(data), end, unless_steered, data)

    def save_as(self, claim: Claim, end: RunState | None, unless_steered: bool, data: st.DataObject) -> None:
        """save_run() by ``claim``, its result and the record after it checked against the model."""
        transcript = data.draw(next_transcript(self.saved, self.tags), label="transcript")
        known = [seq for seq, _ in self.model.steers if seq is not None]
        taken = data.draw(st.lists(st.sampled_from(known), unique=True), label="taken") if known else []
        save_run = self.stores[0].save_run
        call = functools.partial(save_run, claim, transcript, taken=taken, end=end, unless_steered=unless_steered)
        if not self.model.holds(claim):
            check_raises(ConflictError, call, "save_run() by a claim that does not hold the session")
            return self.check_unwritten("a save_run() that was refused")
        progress = call()
        self.saved.append(transcript)
        model = self.model
        model.messages, model.updated, model.steers = transcript, True, [s for s in model.steers if s[0] not in taken]
        if end is not None and unless_steered and model.steers:
            check_equal(progress.cancel_requested, model.cancel, "Progress.cancel_requested when steers held it back")
            return self.learn(progress.pending, "Progress.pending of save_run(end=..., unless_steered=True)")
        if end is not None:
            model.state, model.cancel = end, False
            return check_equal(progress, Progress(), f"save_run(end={end})")
        check_equal(progress, Progress(model.cancel), "save_run()")
        check_equal(self.stores[1].messages(self.id), transcript, "messages() through the replica after save_run()")

    @rule(via=_VIA, data=st.data())
    def save(self, via: int, data: st.DataObject) -> None:
        transcript = data.draw(next_transcript(self.saved, self.tags), label="transcript")
        self.stores[via].save(self.id, transcript)
        self.saved.append(transcript)
        self.model.messages, self.model.updated, self.model.exists = transcript, True, True

    @rule(via=_VIA, text=TEXT)
    def add_steer(self, via: int, text: str) -> None:
        check_equal(self.stores[via].add_steer(self.id, text), self.model.state, "the state add_steer() returned")
        self.model.steers.append((None, text))
        self.model.exists = True

    @rule(via=_VIA)
    def cancel(self, via: int) -> None:
        running = self.model.state is RunState.RUNNING
        check_equal(self.stores[via].cancel(self.id), running, f"cancel() of a session {self.model.state.name}")
        self.model.cancel = self.model.cancel or running

    @rule(via=_VIA)
    def peek_steers(self, via: int) -> None:
        self.learn(self.stores[via].peek_steers(self.id), "peek_steers()")

    @rule(via=_VIA)
    def take_steers(self, via: int) -> None:
        check_equal(self.stores[via].take_steers(self.id), [t for _, t in self.model.steers], "take_steers()")
        self.model.steers = []

    @rule(via=_VIA)
    def delete(self, via: int) -> None:
        check_equal(self.stores[via].delete(self.id), self.model.exists, "delete()")
        self.model = _Record()
        self.saved.append([])

    @invariant()
    def info(self) -> None:
        got, model = self.stores[1].info(self.id), self.model
        shown = shown_preview(self.stores[1], model.messages) if self.previews else got.preview
        want = SessionInfo(self.id, len(model.messages), got.updated_at, model.state, model.holder,
                           got.lease_expires_at, len(model.steers), model.cancel, preview=shown)  # fmt: skip
        check_equal(got, want, "info()")
        check_equal(got.updated_at is not None, model.updated, "info().updated_at is set, after a save")
        if model.state is RunState.RUNNING and got.lease_expires_at is None:
            raise AssertionError(f"info() of a RUNNING session has no lease_expires_at: {got}")

    @precondition(lambda self: bool(self.claims))
    @rule(via=_VIA, data=st.data())
    def renew(self, via: int, data: st.DataObject) -> None:
        claims = data.draw(st.lists(st.sampled_from(self.claims), unique=True, max_size=3), label="claims")
        lost = frozenset(c for c in claims if not self.model.holds(c))
        cancelling = frozenset(c for c in claims if self.model.holds(c) and self.model.cancel)
        check_equal(self.stores[via].renew(claims), Renewal(lost, cancelling), f"renew() of {len(claims)} claims")

    def teardown(self) -> None:
        if sys.exc_info()[1] is None:  # after a failed step, a second error here would hide the first
            self.delete(0)
            check_equal(self.stores[1].info(self.id), SessionInfo(self.id), "info() after delete()")


_run_machine: Callable[..., None] = run_state_machine_as_test


def check_states(context: Context) -> None:
    """Run :class:`RunMachine` with the context's settings."""

    def record_against_a_model() -> RunMachine:
        return RunMachine(context)

    _run_machine(record_against_a_model, settings=context.settings)
