"""storetest's property for ``add_steer(..., if_busy=...)``: what a steer does while a run is live.

The store decides in the step that adds the steer, from the session's state at that
instant. While a live run holds the session: ``"steer"`` stores a steer that run takes
(``after_token`` 0); ``"queue"`` stores one the live claim may not take (``after_token``
at least its token) and the next claim takes; ``"interrupt"`` does the same and sets
``cancel_requested``, which the live run's next save reports; ``"reject"`` raises
``SessionBusyError`` and stores nothing (a retried key whose text is stored returns the
state instead). With no live run every policy stores a steer any run takes. Threads adding
with every policy while another claims and releases the session each get one outcome,
and what each was told matches what was stored.
"""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import example, given
from hypothesis import strategies as st

from agentsessions.errors import SessionBusyError
from agentsessions.messages import Message
from agentsessions.runs import Claim, RunState, Steer
from agentsessions.session import IF_BUSY, RunStore, Store, keeps_steer_keys
from agentsessions.testing._storetest_runs import wait_stalled
from agentsessions.testing._storetest_support import JOIN_SECONDS, TEXT, Context, check_equal, check_raises, short
from agentsessions.testing._storetest_support import run_threads as all_at_once

BUSY = "if_busy decides what a steer does while a run is live"

_QUEUED = ("queue", "interrupt")


def _add(store: Store) -> Callable[..., Any]:
    """The store's ``add_steer``; storetest runs this property only for a store that takes ``if_busy``."""
    assert isinstance(store, RunStore)
    return store.add_steer


def _check_busy(context: Context) -> None:
    store, replica = context.runs

    @context.settings
    @given(text=TEXT, policy=st.sampled_from(IF_BUSY), keyed=st.booleans())
    @example(text="queued", policy="queue", keyed=False)
    @example(text="refused", policy="reject", keyed=True)
    def live(text: str, policy: str, keyed: bool) -> None:
        context.examples += 1
        session_id = context.new_id(f"live {policy}")
        claim = store.claim(session_id, replica="storetest-live", lease=60.0)
        store.save_run(claim, [Message.user("first")])
        key = "k" if keyed and keeps_steer_keys(store) else None
        what = f"add_steer(if_busy={policy!r}) of {short(text, 60)} while a run is live"
        if policy == "reject":
            check_raises(
                SessionBusyError, functools.partial(_add(replica), session_id, text, key=key, if_busy=policy), what
            )
            check_equal(store.peek_steers(session_id), [], f"steers after {what}")
            check_equal(store.info(session_id).pending_steers, 0, f"info().pending_steers after {what}")
        else:
            check_equal(_add(replica)(session_id, text, key=key, if_busy=policy), RunState.RUNNING, what)
            _check_stored(store, claim, session_id, text, policy)
        store.delete(session_id)

    live()

    @context.settings
    @given(text=TEXT, policy=st.sampled_from(IF_BUSY), before=st.sampled_from(["never", "finished", "stalled"]))
    def not_live(text: str, policy: str, before: str) -> None:
        context.examples += 1
        session_id = context.new_id(f"not live {policy}")
        if before != "never":
            claim = store.claim(session_id, replica="storetest-gone", lease=60.0 if before == "finished" else 0.05)
            if before == "finished":
                store.save_run(claim, [Message.user("first")], end=RunState.FINISHED)
            else:
                wait_stalled(store, session_id, 0.05)
        state = _add(replica)(session_id, text, if_busy=policy)
        if state is RunState.RUNNING:
            raise AssertionError(f"add_steer(if_busy={policy!r}) on a session {before} held said RUNNING")
        steers = store.peek_steers(session_id)
        check_equal([(s.text, s.after_token) for s in steers], [(text, 0)], f"the steer if_busy={policy!r} stored")
        check_equal(store.info(session_id).cancel_requested, False, f"cancel_requested after if_busy={policy!r}")
        taker = store.claim(session_id, replica="storetest-next", lease=60.0)
        check_equal([s.for_claim(taker) for s in store.peek_steers(session_id)], [True], "the next claim may take it")
        store.delete(session_id)

    not_live()
    _check_retried_reject(context)
    _check_racing(context)


def _check_stored(store: RunStore, claim: Claim, session_id: str, text: str, policy: str) -> None:
    """What a steer stored while ``claim`` was live must be, for the live run and for the next."""
    steers = store.peek_steers(session_id)
    check_equal([s.text for s in steers], [text], f"the steers after if_busy={policy!r}")
    queued = policy in _QUEUED
    if steers[0].for_claim(claim) == queued:
        whose = "the live claim took it" if queued else "the live claim may not take it"
        raise AssertionError(f"a steer with if_busy={policy!r}: {whose} (after_token {steers[0].after_token})")
    progress = store.save_run(claim, [Message.user("first")])  # the live run's next save
    check_equal(progress.cancel_requested, policy == "interrupt", f"cancel_requested at the save after {policy!r}")
    held = store.save_run(claim, [Message.user("first")], end=RunState.FINISHED, unless_steered=True)
    check_equal([s.text for s in held.pending], [text], f"the steers a release found after if_busy={policy!r}")
    if queued:
        store.save_run(claim, [Message.user("first")], end=RunState.FINISHED)
        nxt = store.claim(session_id, replica="storetest-next", lease=60.0)
        waiting = store.peek_steers(session_id)
        check_equal([s.for_claim(nxt) for s in waiting], [True], f"the next claim may take a {policy!r} steer")
        store.save_run(nxt, [Message.user("first"), Message.user(text)], taken=[s.seq for s in waiting])
        check_equal(store.peek_steers(session_id), [], f"steers after the next run took the {policy!r} one")


def _check_retried_reject(context: Context) -> None:
    """A keyed text stored before the run began is a retry under ``"reject"``: the state, not an error."""
    store, replica = context.runs
    if not keeps_steer_keys(store):
        return
    context.examples += 1
    session_id = context.new_id("retried reject")
    _add(store)(session_id, "hello", key="k", if_busy="reject")
    store.claim(session_id, replica="storetest-live", lease=60.0)
    check_equal(_add(replica)(session_id, "hello", key="k", if_busy="reject"), RunState.RUNNING, "a retried reject")
    check_equal([s.text for s in store.peek_steers(session_id)], ["hello"], "steers after a retried reject")
    store.delete(session_id)


def _check_racing(context: Context) -> None:
    """Adders with every policy race a claim and its release: each outcome matches what was stored.

    A steer told ``RUNNING`` must be one the release saw (it keeps the session, or hands its
    texts on): a store that reads the state in one step and adds in another tells
    ``RUNNING`` for a steer stored after the release, where no run was told of it.
    """
    store, replica = context.runs
    for trial in range(context.threaded.max_examples):
        context.examples += 1
        session_id = context.new_id(f"racing policies {trial}")
        store.save(session_id, [Message.user("first")])
        race = _race(store, replica, session_id, random.Random(trial))
        stored = {s.text: s for s in store.peek_steers(session_id)} | race.seen
        for text, (policy, state) in race.told.items():
            _check_told(text, policy, state, stored.get(text), race.claim)
            if state is RunState.RUNNING and text not in race.seen:
                raise AssertionError(
                    f"add_steer({text!r}, if_busy={policy!r}) was told RUNNING, yet the live run's release "
                    f"(save_run(end=FINISHED, unless_steered=True)) did not see it: saw {short(sorted(race.seen))}"
                )
        store.delete(session_id)


@attrs.frozen
class _Race:
    """What one race left: each adder's policy and what it was told (``None``: refused), the claim, what it saw."""

    told: dict[str, tuple[str, RunState | None]]
    claim: Claim
    seen: dict[str, Steer]


def _race(store: RunStore, replica: RunStore, session_id: str, chooser: random.Random) -> _Race:
    """Sixteen adders with random policies and a run that claims and releases the session.

    Half the adders start with the run, half once it holds the session; it releases once the
    first half returned, so the second half's calls meet the release.
    """
    told: dict[str, tuple[str, RunState | None]] = {}
    claims: list[Claim] = []
    seen: dict[str, Steer] = {}
    claimed, returned = threading.Event(), threading.Condition()
    plan = [(f"text {n}", chooser.choice(IF_BUSY)) for n in range(16)]

    def add(n: int) -> None:
        text, policy = plan[n]
        if n >= 8:
            claimed.wait(JOIN_SECONDS)
        try:
            state: RunState | None = _add((store, replica)[n % 2])(session_id, text, if_busy=policy)
        except SessionBusyError:
            state = None
        with returned:
            told[text] = (policy, state)
            returned.notify_all()

    def hold() -> None:
        claim = store.claim(session_id, replica="storetest-racer", lease=60.0)
        claims.append(claim)
        claimed.set()
        with returned:
            returned.wait_for(lambda: len(told) >= 8, JOIN_SECONDS)
        # As a run ends: a release that finds steers keeps the session; the run takes them
        # (here every one, queued or not) and asks to release again.
        while True:
            held = store.save_run(claim, [Message.user("first")], end=RunState.FINISHED, unless_steered=True)
            if not held.pending:
                return
            seen.update((steer.text, steer) for steer in held.pending)
            store.save_run(claim, [Message.user("first")], taken=[steer.seq for steer in held.pending])

    all_at_once([hold, *(functools.partial(add, n) for n in range(16))])
    return _Race(told, claims[0], seen)


def _check_told(text: str, policy: str, state: RunState | None, steer: Any, claim: Claim) -> None:
    """One racing adder: what it was told (``None``: refused) against what the store kept."""
    what = f"add_steer({text!r}, if_busy={policy!r}) racing a claim, told {state}"
    if state is None:
        if policy != "reject" or steer is not None:
            raise AssertionError(f"{what}: refused, yet {'stored' if steer else 'not a reject'}")
        return
    if steer is None:
        raise AssertionError(f"{what}: its steer is not stored")
    queued = policy in _QUEUED and state is RunState.RUNNING
    if steer.for_claim(claim) == queued:
        raise AssertionError(
            f"{what}: stored with after_token {steer.after_token}, the live claim's token {claim.token}"
        )
    if policy == "reject" and state is RunState.RUNNING:
        raise AssertionError(f"{what}: a reject told RUNNING stored its steer")


BUSY_CHECKS: dict[str, Callable[[Context], None]] = {BUSY: _check_busy}
"""What checks the if_busy property."""
