"""storetest's properties for stores that keep approvals (:class:`~agentsessions.approvals.ApprovalStore`).

A run releases its session ``WAITING`` for some calls; the store keeps each call's id, tool
and input verbatim, reports the wait in ``info`` and in listings, refuses a claim while a call
is undecided, and records decisions in one atomic step: once per call, all or none, a
retry of the same decision recording nothing, and among racing deciders exactly one.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st

from agentsessions.approvals import EXPIRED, Approval, ApprovalStore, Decision
from agentsessions.errors import ApprovalPendingError, ConflictError
from agentsessions.messages import Content, Message, Role
from agentsessions.runs import UTC, RunState
from agentsessions.testing._storetest_support import TEXT, TOOL_INPUT, Context, check_equal, check_raises, run_threads

WAIT = "a waiting session keeps its calls verbatim and is not claimed while one is undecided"
DECIDE = "a call is decided once, in one atomic step, all or none"
RACE = "racing deciders record one decision per call"
EDIT = "an edited input is stored in the approval and the transcript's call in one atomic step, the model's kept"
EXPIRY = "a wait reports its earliest undecided deadline, and a call past it takes only the expiry"

APPROVAL_PROPERTIES: tuple[str, ...] = (WAIT, DECIDE, RACE, EDIT, EXPIRY)
"""The properties run for an :class:`~agentsessions.approvals.ApprovalStore`, skipped for any other store."""

_TOOL = st.from_regex(r"[a-zA-Z0-9_-]{1,64}", fullmatch=True)
_TIME = st.datetimes(
    min_value=datetime.datetime(2000, 1, 1), max_value=datetime.datetime(2100, 1, 1), timezones=st.just(UTC)
)


@st.composite
def _calls(draw: st.DrawFn, min_size: int = 1, max_size: int = 4) -> list[Approval]:
    ids = draw(st.lists(TEXT.filter(bool), min_size=min_size, max_size=max_size, unique=True))
    return [Approval(call_id, draw(_TOOL), draw(TOOL_INPUT), draw(_TIME)) for call_id in ids]


def _stores(context: Context) -> tuple[ApprovalStore, ApprovalStore]:
    store, replica = context.runs
    assert isinstance(store, ApprovalStore)
    return store, replica if isinstance(replica, ApprovalStore) else store


def _waiting(context: Context, calls: Sequence[Approval], name: str = "waiting") -> str:
    """A new session released ``WAITING`` for ``calls`` by a run that saved one message."""
    store, _ = context.runs
    session_id = context.new_id(name)
    claim = store.claim(session_id, replica="storetest", lease=30)
    store.save_run(claim, [Message.user("do it")])
    _stores(context)[0].wait(claim, calls)
    return session_id


def _check_wait(context: Context) -> None:
    runs, runs_replica = context.runs
    _, replica = _stores(context)

    @context.fewer(2)
    @given(calls=_calls())
    def kept(calls: list[Approval]) -> None:
        context.examples += 1
        session_id = _waiting(context, calls)
        check_equal(replica.approvals(session_id), calls, "approvals() of a session that waits")
        info = runs_replica.info(session_id)
        check_equal((info.state, info.pending_approvals), (RunState.WAITING, len(calls)), "info() of a waiting session")
        check_equal(runs_replica.add_steer(session_id, "later"), RunState.WAITING, "a steer's state while waiting")
        claim = functools.partial(runs.claim, session_id, replica="another", lease=30)
        check_raises(ApprovalPendingError, claim, "a claim while a call is undecided")
        check_equal(runs_replica.info(session_id).state, RunState.WAITING, "the state after a refused claim")
        check_equal(runs_replica.cancel(session_id), False, "cancel() of a waiting session (no run holds it)")
        runs.delete(session_id)
        check_equal(replica.approvals(session_id), [], "approvals() of a deleted session")

    kept()
    _check_listing(context)
    _check_superseded(context)


def _check_listing(context: Context) -> None:
    context.examples += 1
    runs, runs_replica = context.runs
    session_id = _waiting(context, [Approval("c1", "t", "{}", datetime.datetime.now(UTC))])
    listed = [i.id for i in runs_replica.sessions(state=RunState.WAITING) if i.id == session_id]
    check_equal(listed, [session_id], "sessions(state=WAITING)")
    others = [i.id for i in runs_replica.sessions(state=RunState.FINISHED) if i.id == session_id]
    check_equal(others, [], "sessions(state=FINISHED) listing a waiting session")
    runs.delete(session_id)


def _check_superseded(context: Context) -> None:
    """A wait by a claim taken over (the lease lapsed) writes nothing."""
    context.examples += 1
    runs, runs_replica = context.runs
    store, replica = _stores(context)
    session_id = context.new_id("superseded")
    old = runs.claim(session_id, replica="old", lease=0.05)
    deadline = datetime.datetime.now(UTC) + datetime.timedelta(seconds=10)
    while runs_replica.info(session_id).state is not RunState.STALLED and datetime.datetime.now(UTC) < deadline:
        threading.Event().wait(0.02)
    new = runs.claim(session_id, replica="new", lease=30)
    call = [Approval("c1", "t", "{}", datetime.datetime.now(UTC))]
    check_raises(ConflictError, functools.partial(store.wait, old, call), "wait() by a superseded claim")
    check_equal((runs_replica.info(session_id).state, replica.approvals(session_id)), (RunState.RUNNING, []), "after")
    runs.save_run(new, [], end=RunState.FINISHED)
    runs.delete(session_id)


def _check_decide(context: Context) -> None:
    runs, runs_replica = context.runs
    store, replica = _stores(context)

    @context.fewer(2)
    @given(calls=_calls(min_size=2), reason=TEXT, by=TEXT, data=st.data())
    def once(calls: list[Approval], reason: str, by: str, data: st.DataObject) -> None:
        context.examples += 1
        session_id = _waiting(context, calls)
        first, second, *rest = [a.call_id for a in calls]
        unknown = data.draw(TEXT.filter(lambda t: bool(t) and t not in {a.call_id for a in calls}), label="unknown id")
        mixed = {first: Decision.approve(), unknown: Decision.approve()}
        check_raises(ConflictError, functools.partial(store.decide, session_id, mixed), "a batch naming an unknown id")
        check_equal(replica.approvals(session_id), calls, "approvals after a refused batch (all or none)")
        state = store.decide(session_id, {first: Decision.reject(reason=reason, by=by)})
        check_equal(state, RunState.WAITING, "decide()'s state while calls are undecided")
        check_equal(replica.decide(session_id, {first: Decision.reject()}), RunState.WAITING, "the same decision again")
        again = functools.partial(replica.decide, session_id, {first: Decision.approve()})
        check_raises(ConflictError, again, "the other decision on a decided call")
        both = {second: Decision.approve(), first: Decision.approve()}
        check_raises(ConflictError, functools.partial(store.decide, session_id, both), "a batch with one conflict")
        check_equal(runs_replica.info(session_id).pending_approvals, len(calls) - 1, "pending after a refused batch")
        got = replica.approvals(session_id)
        check_equal([(a.decision, a.reason, a.by) for a in got[:1]], [("rejected", reason, by)], "the decision kept")
        check_equal(got[0].decided_at is not None, True, "decided_at of a decided call")
        check_equal(
            [(a.call_id, a.tool, a.input, a.requested_at) for a in got],
            [(a.call_id, a.tool, a.input, a.requested_at) for a in calls],
            "the calls after decisions",
        )
        store.decide(session_id, {call_id: Decision.approve(by=by) for call_id in [second, *rest]})
        info = runs_replica.info(session_id)
        check_equal((info.state, info.pending_approvals), (RunState.WAITING, 0), "info once every call is decided")
        claim = runs.claim(session_id, replica="resumer", lease=30)
        check_equal(replica.approvals(session_id)[1].decision, "approved", "approvals() kept for the resumed run")
        check_equal(store.decide(session_id, {second: Decision.approve()}), RunState.RUNNING, "a retry after resuming")
        runs.save_run(claim, [], end=RunState.FINISHED)
        check_equal(runs_replica.info(session_id).pending_approvals, 0, "pending approvals of a finished session")
        runs.delete(session_id)

    once()
    _check_not_waiting(context)


def _check_not_waiting(context: Context) -> None:
    """An undecided call of a session that no longer waits cannot be decided."""
    context.examples += 1
    runs, _ = context.runs
    store, replica = _stores(context)
    session_id = context.new_id("never waited")
    never = functools.partial(store.decide, session_id, {"c1": Decision.approve()})
    check_raises(ConflictError, never, "a decision on a session that never waited")
    bad_decisions: list[tuple[Any, type[Exception]]] = [
        ({}, ValueError),
        ({"c1": "yes"}, TypeError),
        ([("c1", Decision.approve())], TypeError),
    ]
    for bad, error in bad_decisions:
        check_raises(error, functools.partial(store.decide, session_id, bad), f"decide({bad!r})")
    claim = runs.claim(session_id, replica="storetest", lease=30)
    bad_calls_list: list[tuple[Any, type[Exception]]] = [
        ([], ValueError),
        ("calls", TypeError),
        ([("c1", "t", "{}")], TypeError),
    ]
    for bad_calls, error in bad_calls_list:
        check_raises(error, functools.partial(store.wait, claim, bad_calls), f"wait({bad_calls!r})")
    check_equal(replica.approvals(session_id), [], "approvals after refused waits")
    runs.save_run(claim, [], end=RunState.FINISHED)
    runs.delete(session_id)


def _check_race(context: Context) -> None:
    runs, _ = context.runs
    stores = _stores(context)
    deciders = 6

    @context.threaded
    @given(calls=_calls(min_size=1, max_size=3))
    def race(calls: list[Approval]) -> None:
        context.examples += 1
        session_id = _waiting(context, calls)
        won: list[tuple[int, str]] = []
        lock = threading.Lock()

        def decider(n: int) -> Callable[[], None]:
            def decide() -> None:
                # Even deciders approve, odd ones reject: every call gets both decisions at once.
                choice = Decision.approve(by=str(n)) if n % 2 == 0 else Decision.reject(by=str(n))
                try:
                    stores[n % 2].decide(session_id, {a.call_id: choice for a in calls})
                except ConflictError:
                    return
                with lock:
                    won.append((n % 2, choice.decision))

            return decide

        run_threads([decider(n) for n in range(deciders)])
        kinds = {kind for _, kind in won}
        check_equal(len(kinds), 1, f"the decisions that won a race of {deciders} deciders")
        got = stores[1].approvals(session_id)
        check_equal({a.decision for a in got}, kinds, "the decisions stored after the race")
        runs.delete(session_id)

    race()


_EDITED = st.dictionaries(TEXT, st.one_of(TEXT, st.integers()), max_size=3).map(
    lambda d: json.dumps(d, ensure_ascii=False)
)


def _asking(context: Context, calls: Sequence[Approval]) -> tuple[str, list[Message]]:
    """A new session waiting for ``calls``, its transcript ending with the assistant message making them."""
    store, _ = context.runs
    session_id = context.new_id("edit")
    uses = [Content.tool_use(a.call_id, a.tool, a.input) for a in calls]
    transcript = [Message.user("do it"), Message(Role.ASSISTANT, uses)]
    claim = store.claim(session_id, replica="storetest", lease=30)
    store.save_run(claim, transcript)
    _stores(context)[0].wait(claim, calls)
    return session_id, transcript


def _with_input(transcript: list[Message], call_id: str, text: str) -> list[Message]:
    """``transcript`` with the call ``call_id`` of its last message holding ``text``."""
    *head, last = transcript
    blocks = [attrs.evolve(c, input=text) if c.id == call_id else c for c in last.content]
    return [*head, attrs.evolve(last, content=tuple(blocks))]


def _check_edit(context: Context) -> None:
    runs, runs_replica = context.runs
    store, replica = _stores(context)

    @context.fewer(2)
    @given(calls=_calls(min_size=2), edit=_EDITED, other=_EDITED, schema=TEXT)
    def edited(calls: list[Approval], edit: str, other: str, schema: str) -> None:
        context.examples += 1
        calls = [attrs.evolve(calls[0], input_schema=schema), *calls[1:]]
        session_id, transcript = _asking(context, calls)
        first, second = calls[0].call_id, calls[1].call_id
        check_equal(replica.approvals(session_id), calls, "approvals() keeping each call's input_schema")
        store.decide(session_id, {second: Decision.reject()})
        batch = {first: Decision.approve(input=edit), second: Decision.approve()}
        check_raises(ConflictError, functools.partial(store.decide, session_id, batch), "a batch with one conflict")
        check_equal(runs_replica.messages(session_id), transcript, "the transcript after a refused batch")
        check_equal(replica.approvals(session_id)[0], calls[0], "the call after a refused batch")
        check_equal(store.decide(session_id, {first: Decision.approve(input=edit)}), RunState.WAITING, "decide()")
        want = attrs.evolve(calls[0], decision="approved")
        if edit != calls[0].input:
            want = attrs.evolve(want, input=edit, original_input=calls[0].input)
        got = replica.approvals(session_id)[0]
        check_equal(attrs.evolve(got, decided_at=None), want, "the approval with an edited input")
        edited_transcript = _with_input(transcript, first, edit)
        check_equal(runs_replica.messages(session_id), edited_transcript, "the transcript after an edited approval")
        retry = replica.decide(session_id, {first: Decision.approve(input=edit, by="again")})
        check_equal(retry, RunState.WAITING, "the same edited input again")
        if other != edit:
            another = functools.partial(replica.decide, session_id, {first: Decision.approve(input=other)})
            check_raises(ConflictError, another, "another input on an approved call")
        check_equal(replica.approvals(session_id)[0], got, "the approval after a retry and a conflict")
        if calls[2:]:
            store.decide(session_id, {a.call_id: Decision.approve() for a in calls[2:]})
        claim = runs.claim(session_id, replica="resumer", lease=30)
        resumed = [*runs.messages(session_id), Message.user("done")]
        check_equal(resumed[:-1], edited_transcript, "the transcript a resumed run reads")
        runs.save_run(claim, resumed, end=RunState.FINISHED)
        check_equal(runs_replica.messages(session_id), resumed, "the transcript saved by the resumed run")
        runs.delete(session_id)

    edited()
    _check_edit_race(context)


def _check_edit_race(context: Context) -> None:
    """Deciders racing with different inputs: one wins, and its input is both the approval's and the call's."""
    runs, runs_replica = context.runs
    stores = _stores(context)

    @context.threaded
    @given(calls=_calls(min_size=1, max_size=2))
    def race(calls: list[Approval]) -> None:
        context.examples += 1
        session_id, transcript = _asking(context, calls)
        call_id = calls[0].call_id
        won: list[str] = []

        def decider(n: int) -> Callable[[], None]:
            def decide() -> None:
                text = json.dumps({"by": n})
                with contextlib.suppress(ConflictError):
                    stores[n % 2].decide(session_id, {call_id: Decision.approve(input=text)})
                    won.append(text)

            return decide

        run_threads([decider(n) for n in range(4)])
        check_equal(len(won), 1, "the deciders that won a race with different inputs")
        check_equal(stores[1].approvals(session_id)[0].input, won[0], "the approval's input after the race")
        check_equal(runs_replica.messages(session_id), _with_input(transcript, call_id, won[0]), "the transcript")
        runs.delete(session_id)

    race()


_HOUR = datetime.timedelta(hours=1)  # far from the store's clock: the property never races it


@st.composite
def _expiring(draw: st.DrawFn) -> list[Approval]:
    """Calls each with no deadline, one an hour or two past, or one an hour ahead; the first one past."""
    calls = draw(_calls(min_size=1, max_size=3))
    now = datetime.datetime.now(UTC).replace(microsecond=0)
    choices = st.sampled_from([None, now - _HOUR, now + _HOUR, now - 2 * _HOUR])
    timed = [attrs.evolve(call, requested_at=now - 3 * _HOUR, expires_at=draw(choices)) for call in calls]
    return [attrs.evolve(timed[0], expires_at=now - _HOUR), *timed[1:]]


def _earliest(calls: Sequence[Approval]) -> datetime.datetime | None:
    return min((c.expires_at for c in calls if c.decision is None and c.expires_at is not None), default=None)


def _check_expiry(context: Context) -> None:
    runs, runs_replica = context.runs
    store, replica = _stores(context)

    @context.fewer(2)
    @given(calls=_expiring())
    def expiring(calls: list[Approval]) -> None:
        context.examples += 1
        session_id = _waiting(context, calls)
        check_equal(replica.approvals(session_id), calls, "approvals() with deadlines")
        info = runs_replica.info(session_id)
        check_equal(info.approval_deadline, _earliest(calls), "info().approval_deadline (the earliest undecided)")
        listed = [i.approval_deadline for i in runs_replica.sessions(state=RunState.WAITING) if i.id == session_id]
        check_equal(listed, [_earliest(calls)], "sessions(state=WAITING)'s approval_deadline")
        now = datetime.datetime.now(UTC)
        past = [c.call_id for c in calls if c.expires_at is not None and c.expires_at <= now]
        ahead = [c.call_id for c in calls if c.call_id not in past]
        late = functools.partial(store.decide, session_id, {past[0]: Decision.approve()})
        check_raises(ConflictError, late, "approving a call past its deadline")
        for call_id in ahead:
            early = functools.partial(replica.decide, session_id, {call_id: Decision(EXPIRED)})
            check_raises(ConflictError, early, "recording the expiry of a call before its deadline")
        check_equal(replica.approvals(session_id), calls, "approvals after refused decisions (nothing recorded)")
        expiries = dict.fromkeys(past, Decision(EXPIRED))
        check_equal(store.decide(session_id, expiries), RunState.WAITING, "decide() recording expiries")
        check_equal(replica.decide(session_id, expiries), RunState.WAITING, "the same expiries again (a retry)")
        after = [attrs.evolve(c, decision=EXPIRED, decided_at=c.expires_at) if c.call_id in past else c for c in calls]
        check_equal(replica.approvals(session_id), after, "approvals() after the expiries")
        info = runs_replica.info(session_id)
        check_equal(
            (info.pending_approvals, info.approval_deadline), (len(ahead), _earliest(after)), "info() after them"
        )
        if not ahead:  # every call expired: the wait no longer holds a claim back
            claim = runs.claim(session_id, replica="storetest", lease=30)
            runs.save_run(claim, [], end=RunState.FINISHED)
            check_equal(runs_replica.info(session_id).approval_deadline, None, "approval_deadline after the wait")
        runs.delete(session_id)

    expiring()


APPROVAL_CHECKS: dict[str, Callable[[Context], None]] = {
    WAIT: _check_wait,
    DECIDE: _check_decide,
    RACE: _check_race,
    EDIT: _check_edit,
    EXPIRY: _check_expiry,
}
"""What checks each approval property."""

__all__ = ["APPROVAL_CHECKS", "APPROVAL_PROPERTIES"]
