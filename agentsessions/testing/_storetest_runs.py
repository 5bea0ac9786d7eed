"""The properties :mod:`agentsessions.stores.storetest` checks of a :class:`RunStore`; private to it.

They run only for stores that are a :class:`~agentsessions.session.RunStore` (the check
is the protocol's ``isinstance``); :func:`storetest.run` reports them as skipped for a
store with only the seed's four methods. Every session they make, they delete.
"""

from __future__ import annotations

import datetime
import itertools
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from agentsessions.errors import ConflictError, SessionBusyError
from agentsessions.messages import Message
from agentsessions.runs import Claim, Progress, Renewal, RunState, SessionInfo
from agentsessions.session import RunStore
from agentsessions.testing._storetest_arguments import ARGUMENTS, check_arguments
from agentsessions.testing._storetest_runmachine import LONG_LEASE, REPLICAS, check_states
from agentsessions.testing._storetest_support import (
    JOIN_SECONDS,
    TEXT,
    Context,
    check_equal,
    check_raises,
    id_family,
    next_transcript,
    race_release,
    race_steady_release,
    race_takeover,
    short,
    show_id,
    wait_until,
)

DELETE = "delete removes a session whole"
TOKENS = "fencing tokens grow, also across delete"
CANCEL = "cancel reaches the holder"
CRASH = "steers survive a crash between take and save"
RELEASE = "no steer is orphaned at release"
SAVE_RUN = "save_run keeps the transcript contract"
LEASES = "leases run out and stalled sessions are taken over"
TOOK_OVER = "a claim says whether it took over a lapsed lease"
LISTING = "listing pages through every session once"
STATES = "run states follow their transitions"

# The focused properties come first, so a broken store is told by the property about its
# mistake; the state machine, which finds most mistakes too, comes last.
RUN_PROPERTIES: tuple[str, ...] = (
    *(DELETE, TOKENS, CANCEL, CRASH, RELEASE, SAVE_RUN, ARGUMENTS, LEASES, TOOK_OVER, LISTING, STATES),
)
"""The properties checked only of a :class:`RunStore`, in the order they are checked."""

SHORT_LEASE = 0.3  # the least a lease that is meant to run out lasts; longer on a slow store
_VIA = ("the store", "the replica")


def _say(text: str) -> list[Message]:
    return [Message.user(text)]


def _short_lease(store: RunStore, context: Context) -> float:
    """A lease that runs out soon, yet outlasts several of this store's calls, so checks can see it live."""
    probe, slowest = context.new_id("lease probe"), 0.0
    for _ in range(3):
        started = time.monotonic()
        store.info(probe)
        slowest = max(slowest, time.monotonic() - started)
    return max(SHORT_LEASE, round(10 * slowest, 2))


def wait_stalled(store: RunStore, session_id: str, lease: float) -> None:
    """Wait until the session, claimed with a lease of ``lease`` seconds, shows ``STALLED``."""

    def stalled() -> bool:
        return store.info(session_id).state is RunState.STALLED

    wait_until(f"session {show_id(session_id)} turning STALLED after its lease of {lease} s", stalled, JOIN_SECONDS)


def _check_blank(store: RunStore, session_id: str, what: str) -> None:
    check_equal(store.info(session_id), SessionInfo(session_id), f"info() {what}")
    check_equal(store.messages(session_id), [], f"messages() {what}")
    check_equal(store.peek_steers(session_id), [], f"peek_steers() {what}")


def _release(store: RunStore, claim: Claim, messages: Sequence[Message] = ()) -> None:
    check_equal(store.save_run(claim, messages, end=RunState.FINISHED), Progress(), "save_run(end=FINISHED)")


def _delete(store: RunStore, *ids: str) -> None:
    for session_id in ids:
        if not store.delete(session_id):
            raise AssertionError(f"delete({show_id(session_id)}) returned False for a session that existed")


# --- Delete -------------------------------------------------------------------------------


_JUNK: Any = [Message.user("kept?"), "not a message"]


def _fill(store: RunStore, session_id: str) -> Claim:
    store.save(session_id, _say(f"transcript of {session_id!r}"))
    store.add_steer(session_id, f"steer of {session_id!r}")
    return store.claim(session_id, replica=f"holder of {session_id!r}", lease=LONG_LEASE)


def _check_untouched(store: RunStore, claim: Claim, what: str) -> None:
    session_id = claim.session_id
    check_equal(store.messages(session_id), _say(f"transcript of {session_id!r}"), what)
    check_equal([s.text for s in store.peek_steers(session_id)], [f"steer of {session_id!r}"], what)
    info = store.info(session_id)
    check_equal((info.state, info.holder), (RunState.RUNNING, claim.replica), f"state and holder: {what}")


def _check_delete(context: Context) -> None:
    store, replica = context.runs

    @context.fewer()
    @given(suffixes=id_family())
    @example(suffixes=["a", "a%", "a_", "A", "a ", "á"])
    def whole(suffixes: list[str]) -> None:
        context.examples += 1
        prefix = context.new_id()
        claims = [_fill(store, prefix + suffix) for suffix in suffixes]
        doomed, others = claims[0].session_id, claims[1:]
        check_equal(replica.delete(doomed), True, f"delete({show_id(doomed)}) of a saved, steered, claimed session")
        check_equal(store.delete(doomed), False, f"delete({show_id(doomed)}) a second time")
        _check_blank(store, doomed, "of a deleted session")
        for claim in others:
            _check_untouched(store, claim, f"session {show_id(claim.session_id)} after {show_id(doomed)} was deleted")
        _delete(store, *(claim.session_id for claim in others))

    whole()
    # A record made by one call alone is a session too; an id never used is not.
    steered, claimed, saved, never = (context.new_id(what) for what in ("steered", "claimed", "saved", "never"))
    store.add_steer(steered, "only a steer")
    store.claim(claimed, replica=REPLICAS[0], lease=LONG_LEASE)
    store.save(saved, [])
    _delete(replica, steered, claimed, saved)
    check_equal(store.delete(never), False, "delete() of an id never used")
    for session_id in (steered, claimed, saved, never):
        _check_blank(store, session_id, "after delete()")
    rejected, junk = context.new_id("rejected"), _JUNK
    check_raises(TypeError, lambda: store.save(rejected, junk), f"save(id, {junk!r})")
    check_equal(store.delete(rejected), False, "delete() of an id whose one save was rejected: it stored something")


# --- Tokens ---------------------------------------------------------------------------------


def _check_tokens(context: Context) -> None:
    store, replica = context.runs

    @context.fewer()
    @given(plan=st.lists(st.sampled_from(["release", "release and delete", "delete while held"]), max_size=5))
    @example(plan=["delete while held", "release and delete"])
    def grow(plan: list[str]) -> None:
        context.examples += 1
        session_id = context.new_id()
        claim = store.claim(session_id, replica=REPLICAS[0], lease=LONG_LEASE)
        for at, step in enumerate(plan):
            if step != "delete while held":
                _release(store, claim, _say(step))
            if step != "release":
                _delete(replica, session_id)
            if step == "delete while held":
                _check_deleted_claim(store, claim)
            again = (store, replica)[at % 2].claim(session_id, replica=REPLICAS[1], lease=LONG_LEASE)
            if again.token <= claim.token:
                raise AssertionError(f"claim() after {step!r} gave token {again.token}, not above {claim.token}")
            claim = again
        _delete(store, session_id)

    grow()


def _check_deleted_claim(store: RunStore, claim: Claim) -> None:
    what = "save_run() by a claim whose session was deleted"
    check_raises(ConflictError, lambda: store.save_run(claim, _say("after delete")), what)
    check_raises(ConflictError, lambda: store.save_run(claim, [], end=RunState.FINISHED), what)
    _check_blank(store, claim.session_id, f"after {what}")
    check_equal(store.renew([claim]), Renewal(lost=frozenset({claim})), "renew() of a claim whose session was deleted")


# --- Cancel --------------------------------------------------------------------------------


def _check_no_cancel(store: RunStore, session_id: str, what: str) -> None:
    before = store.info(session_id)
    check_equal(store.cancel(session_id), False, f"cancel() of a session {what}")
    check_equal(store.info(session_id), before, f"info() after cancel() of a session {what}")


def _check_cancel(context: Context) -> None:
    store, replica = context.runs
    context.examples += 1
    session_id = context.new_id()
    _check_no_cancel(store, session_id, "never used")
    check_equal(store.info(session_id), SessionInfo(session_id), "info() after cancel() of an unknown id")
    store.save(session_id, _say("idle"))
    _check_no_cancel(store, session_id, "never claimed")
    claim = store.claim(session_id, replica=REPLICAS[0], lease=LONG_LEASE)
    check_equal(store.save_run(claim, _say("one")), Progress(), "save_run() before any cancel")
    check_equal(store.renew([claim]), Renewal(), "renew() before any cancel")
    check_equal(replica.cancel(session_id), True, "cancel() of a RUNNING session")
    check_equal(store.info(session_id).cancel_requested, True, "info().cancel_requested after cancel()")
    check_equal(store.renew([claim]), Renewal(cancelling=frozenset({claim})), "renew() after cancel()")
    check_equal(store.save_run(claim, _say("two")), Progress(True), "save_run() after cancel()")
    check_equal(replica.cancel(session_id), True, "cancel() a second time while RUNNING")
    check_equal(store.save_run(claim, _say("three"), end=RunState.CANCELLED), Progress(), "save_run(end=CANCELLED)")
    info = store.info(session_id)
    check_equal((info.state, info.cancel_requested), (RunState.CANCELLED, False), "state and flag after the release")
    _check_no_cancel(store, session_id, "CANCELLED")
    _release(store, store.claim(session_id, replica=REPLICAS[1], lease=LONG_LEASE))
    _check_no_cancel(store, session_id, "FINISHED")
    _check_cancel_stalled(context, store)
    _delete(store, session_id)


def _check_cancel_stalled(context: Context, store: RunStore) -> None:
    lease, session_id = _short_lease(store, context), context.new_id("stalls")
    started = time.monotonic()
    store.claim(session_id, replica=REPLICAS[0], lease=lease)
    asked = store.cancel(session_id)
    if time.monotonic() - started < lease:  # the lease was live all along
        check_equal(asked, True, "cancel() right after a claim")
    wait_stalled(store, session_id, lease)
    _check_no_cancel(store, session_id, "STALLED")
    claim = store.claim(session_id, replica=REPLICAS[1], lease=LONG_LEASE)
    check_equal(store.info(session_id).cancel_requested, False, "info().cancel_requested after a claim took over")
    check_equal(store.save_run(claim, []), Progress(), "save_run() of a claim that took over a cancelled run")
    _delete(store, session_id)


# --- Crash between take and save ----------------------------------------------------------------


def _check_crash(context: Context) -> None:
    store, replica = context.runs

    @context.fewer()
    @given(first=st.lists(TEXT, min_size=1, max_size=6), later=st.lists(TEXT, max_size=3), data=st.data())
    def by_seq(first: list[str], later: list[str], data: st.DataObject) -> None:
        context.examples += 1
        session_id = context.new_id()
        claim = store.claim(session_id, replica=REPLICAS[0], lease=LONG_LEASE)
        for text in first:
            replica.add_steer(session_id, text)
        peeked = store.peek_steers(session_id)
        check_equal([s.text for s in peeked], first, "peek_steers() after adding steers")
        check_equal(store.peek_steers(session_id), peeked, "peek_steers() again: peeking takes nothing")
        for text in later:
            replica.add_steer(session_id, text)
        taken = data.draw(st.lists(st.sampled_from(peeked), unique=True), label="taken")
        store.save_run(claim, [Message.user(s.text) for s in taken], taken=[s.seq for s in taken])
        left = [s.text for s in peeked if s not in taken] + later
        check_equal([s.text for s in store.peek_steers(session_id)], left, "peek_steers() after save_run(taken=...)")
        _delete(store, session_id)

    by_seq()
    _check_crash_recovered(context, store, replica)


def _check_crash_recovered(context: Context, store: RunStore, replica: RunStore) -> None:
    lease, session_id = _short_lease(store, context), context.new_id("crashes")
    store.save(session_id, _say("before"))
    store.claim(session_id, replica=REPLICAS[0], lease=lease)
    for text in ("first", "second"):
        store.add_steer(session_id, text)
    peeked = store.peek_steers(session_id)  # the run dies here, the steers in its memory only
    wait_stalled(replica, session_id, lease)
    claim = replica.claim(session_id, replica=REPLICAS[1], lease=LONG_LEASE)
    check_equal(replica.peek_steers(session_id), peeked, "peek_steers() after a run that had peeked them died")
    check_equal(replica.messages(session_id), _say("before"), "messages() after a run died")
    replica.add_steer(session_id, "third")
    carried = [*_say("before"), *(Message.user(s.text) for s in peeked)]
    check_equal(replica.save_run(claim, carried, taken=[s.seq for s in peeked]), Progress(), "save_run(taken=...)")
    check_equal([s.text for s in store.peek_steers(session_id)], ["third"], "peek_steers() after the new run's save")
    check_equal(store.messages(session_id), carried, "messages() after the new run saved the steers")
    _delete(store, session_id)


# --- Release unless steered -------------------------------------------------------------------


def _check_release(context: Context) -> None:
    store, replica = context.runs
    context.examples += 1
    session_id = context.new_id()
    claim = store.claim(session_id, replica=REPLICAS[0], lease=LONG_LEASE)
    replica.add_steer(session_id, "collected")
    (collected,) = store.peek_steers(session_id)
    check_equal(replica.add_steer(session_id, "late"), RunState.RUNNING, "add_steer() while a run holds the session")
    end = RunState.FINISHED
    progress = store.save_run(claim, _say("collected"), taken=[collected.seq], end=end, unless_steered=True)
    (late,) = store.peek_steers(session_id)
    check_equal(progress, Progress(pending=(late,)), "save_run(end=FINISHED, unless_steered=True) with a late steer")
    check_equal(store.info(session_id).state, RunState.RUNNING, "state after a release that steers held back")
    progress = store.save_run(claim, _say("late"), taken=[late.seq], end=end, unless_steered=True)
    check_equal(progress, Progress(), "save_run(end=FINISHED, unless_steered=True) with no steer waiting")
    check_equal(store.info(session_id).state, RunState.FINISHED, "state after the release")
    check_equal(replica.add_steer(session_id, "next"), RunState.FINISHED, "add_steer() after the run finished")
    check_equal([s.text for s in store.peek_steers(session_id)], ["next"], "peek_steers() after the run finished")
    _delete(store, session_id)
    failures: list[Exception] = []

    # Kept rather than raised: the failure depends on thread timing (see storetest's races).
    # Steers a few at a time, or steadily: then each release must report them at once.
    @context.threaded
    @given(per_adder=st.integers(1, 20), rounds=st.integers(0, 3), steady=st.booleans())
    @example(per_adder=1, rounds=1, steady=True)
    def at_release(per_adder: int, rounds: int, steady: bool) -> None:
        if failures:
            return
        context.examples += 1
        session_id = context.new_id()
        try:
            claim = store.claim(session_id, replica=REPLICAS[0], lease=LONG_LEASE)
            if steady:
                race_steady_release(context.runs, claim, releases=rounds + 1)
            else:
                race_release(context.runs, claim, per_adder, rounds)
            _delete(store, session_id)
        except Exception as error:
            failures.append(error)

    at_release()
    if failures:
        raise failures[0]


# --- save_run and the transcript ---------------------------------------------------------------------


def _check_save_run(context: Context) -> None:
    store, replica = context.runs
    kinds = ("save_run", "save_run", "save", "save through the replica")

    @context.settings
    @given(steps=st.lists(st.sampled_from(kinds), min_size=1, max_size=6), data=st.data())
    def transcripts(steps: list[str], data: st.DataObject) -> None:
        context.examples += 1
        session_id, tags = context.new_id(), itertools.count()
        saved: list[list[Message]] = []
        claim = store.claim(session_id, replica=REPLICAS[0], lease=LONG_LEASE)
        for step in steps:
            transcript = data.draw(next_transcript(saved, tags), label=step)
            if step == "save_run":
                check_equal(store.save_run(claim, transcript), Progress(), "save_run()")
            else:
                (replica if step.endswith("replica") else store).save(session_id, transcript)
            saved.append(transcript)
            for via, reader in enumerate((store, replica)):
                check_equal(reader.messages(session_id), transcript, f"messages() through {_VIA[via]} after {step}()")
        _release(store, claim, saved[-1])
        check_equal(replica.messages(session_id), saved[-1], "messages() after the release")
        _delete(store, session_id)

    transcripts()


# --- Leases --------------------------------------------------------------------------------------


def _check_leases(context: Context) -> None:
    store, replica = context.runs
    lease = _short_lease(store, context)
    context.examples += 1
    _check_takeover(store, replica, context.new_id("taken over"), lease)
    _check_stalled_holds(store, context.new_id("stalled"), lease)
    _check_renewals(store, replica, context.new_id("renewed"), lease)


def _check_takeover(store: RunStore, replica: RunStore, session_id: str, lease: float) -> None:
    store.save(session_id, _say("before"))
    started = time.monotonic()
    old = store.claim(session_id, replica=REPLICAS[0], lease=lease)
    state = replica.add_steer(session_id, "pending")
    try:
        early: Claim | None = replica.claim(session_id, replica=REPLICAS[1], lease=LONG_LEASE)
    except SessionBusyError:
        early = None
    if time.monotonic() - started < lease:  # else the lease may have run out, and nothing is wrong
        check_equal(state, RunState.RUNNING, f"add_steer() right after a claim with a lease of {lease} s")
        if early is not None:
            raise AssertionError("claim() did not raise SessionBusyError while another run's lease was live")
    (steer,) = store.peek_steers(session_id)
    if early is None:
        wait_stalled(replica, session_id, lease)
    new = early or replica.claim(session_id, replica=REPLICAS[1], lease=LONG_LEASE)
    if new.token <= old.token:
        raise AssertionError(f"claim() that took over a stalled session got token {new.token}, not above {old.token}")
    for end in (None, RunState.FINISHED):
        what = f"save_run(end={end}) by a claim that was taken over"
        call = lambda end=end: store.save_run(old, _say("lost"), taken=[steer.seq], end=end)  # noqa: E731
        check_raises(ConflictError, call, what)
        check_equal(replica.messages(session_id), _say("before"), f"messages() after {what}")
        check_equal(replica.peek_steers(session_id), [steer], f"peek_steers() after {what}")
    info = replica.info(session_id)
    check_equal((info.state, info.holder), (RunState.RUNNING, REPLICAS[1]), "state and holder after a take-over")
    check_equal(store.renew([old, new]), Renewal(lost=frozenset({old})), "renew() of the old claim and the new")
    _delete(store, session_id)


def _check_stalled_holds(store: RunStore, session_id: str, lease: float) -> None:
    claim = store.claim(session_id, replica=REPLICAS[0], lease=lease)
    wait_stalled(store, session_id, lease)
    started = time.monotonic()
    check_equal(store.save_run(claim, _say("late")), Progress(), "save_run() of a stalled claim nobody took over")
    if time.monotonic() - started < lease:
        check_equal(store.info(session_id).state, RunState.RUNNING, "state after a stalled claim saved")
    wait_stalled(store, session_id, lease)
    check_equal(store.renew([claim]), Renewal(), "renew() of a stalled claim nobody took over")
    _release(store, claim)
    _delete(store, session_id)


def _check_renewals(store: RunStore, replica: RunStore, session_id: str, lease: float) -> None:
    renewed = time.monotonic()
    claim = store.claim(session_id, replica=REPLICAS[0], lease=lease)
    stop, checked = renewed + 2.5 * lease, 0
    while time.monotonic() < stop:
        time.sleep(lease / 3)  # the cadence a runner renews at, not a wait for a state
        state = replica.info(session_id).state
        if time.monotonic() - renewed < lease:  # the last renewal was in time for this read
            check_equal(state, RunState.RUNNING, f"state of a session whose lease of {lease} s is renewed")
            checked += 1
        renewed = time.monotonic()
        check_equal(store.renew([claim]), Renewal(), "renew() of a live claim")
    if not checked:
        raise AssertionError(f"no info() of a renewed claim returned within its lease of {lease} s")
    _release(store, claim)
    _delete(store, session_id)


def _check_took_over(context: Context) -> None:
    """A first claim and one after a release say ``took_over=False``; one of a STALLED session, ``True``.

    Four claims racing for a STALLED session: one wins, and it is the one that says so.
    """
    store, replica = context.runs
    lease = _short_lease(store, context)
    context.examples += 1
    fresh, saved = context.new_id("first claim"), context.new_id("saved, then claimed")
    store.save(saved, _say("before"))
    for session_id in (fresh, saved):
        first = store.claim(session_id, replica=REPLICAS[0], lease=lease)
        check_equal(first.took_over, False, f"Claim.took_over of the first claim of {show_id(session_id)}")
        wait_stalled(replica, session_id, lease)
        taken = replica.claim(session_id, replica=REPLICAS[1], lease=LONG_LEASE)
        check_equal(taken.took_over, True, "Claim.took_over of a claim that took over a STALLED session")
        _release(replica, taken)
        again = store.claim(session_id, replica=REPLICAS[0], lease=LONG_LEASE)
        check_equal(again.took_over, False, "Claim.took_over of a claim after a release")
        _release(store, again)
    raced = context.new_id("raced for")
    store.claim(raced, replica=REPLICAS[0], lease=lease)
    wait_stalled(replica, raced, lease)
    _release(store, race_takeover(context.runs, raced, 4, LONG_LEASE))
    _delete(store, fresh, saved, raced)


# --- Listing ---------------------------------------------------------------------------------------


def _listed(what: str, infos: Any, prefix: str) -> dict[str, SessionInfo]:
    """The sessions listed whose ids start with ``prefix``, after checking order and uniqueness."""
    if not hasattr(infos, "__next__"):
        raise AssertionError(f"{what} returned {type(infos).__name__}, not an iterator")
    listed: list[SessionInfo] = list(infos)
    twice = [i for i, n in Counter(info.id for info in listed).items() if n > 1]
    if twice:
        raise AssertionError(f"{what} listed {len(twice)} sessions more than once, such as {show_id(twice[0])}")
    for at, (newer, older) in enumerate(itertools.pairwise(listed)):
        if (newer.updated_at is None and older.updated_at is not None) or (
            newer.updated_at and older.updated_at and newer.updated_at < older.updated_at
        ):
            pair = f"{short(newer)}, {short(older)}"
            raise AssertionError(f"{what}: items {at} and {at + 1} are not newest first: {pair}")
    return {info.id: info for info in listed if info.id.startswith(prefix)}


def _check_ids(got: dict[str, SessionInfo], want: Sequence[str], what: str) -> None:
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or extra:
        raise AssertionError(
            f"{what} listed {len(got)} of the {len(want)} sessions it should have and others made by this "
            f"check: {len(missing)} missing {short(missing[:3])}, {len(extra)} that should not be there "
            f"{short(extra[:3])}"
        )


def _check_listing(context: Context) -> None:
    store, replica = context.runs
    context.examples += 1
    prefix, count = context.new_id(), context.listing_sessions
    ids = [f"{prefix}{i:06d}" for i in range(count)]
    saved, unsaved = ids[: count // 2], ids[count // 2 :]
    for session_id in saved:
        store.save(session_id, _say(session_id))
    for session_id in unsaved:  # never saved: all share one updated_at, None
        store.add_steer(session_id, session_id)
    mine = _listed("sessions()", store.sessions(), prefix)
    _check_ids(mine, ids, "sessions()")
    for session_id, info in mine.items():
        on = session_id in saved
        want = (1 if on else 0, on, RunState.IDLE, 0 if on else 1)
        got = (info.length, info.updated_at is not None, info.state, info.pending_steers)
        check_equal(got, want, f"(length, updated, state, pending steers) of {show_id(session_id)} in sessions()")
    if saved:
        _check_updated_before(replica, prefix, mine, saved[len(saved) // 2])
    _check_state_filter(store, replica, prefix, ids)
    _check_listing_arguments(store)
    _delete(store, *ids)


def _check_updated_before(store: RunStore, prefix: str, mine: dict[str, SessionInfo], pivot: str) -> None:
    at = mine[pivot].updated_at
    assert at is not None
    older = [i for i, info in mine.items() if info.updated_at is not None and info.updated_at < at]
    what = f"sessions(updated_before={at.isoformat()}), the updated_at of {show_id(pivot)} as read back"
    _check_ids(_listed(what, store.sessions(updated_before=at), prefix), older, what)
    after = at + datetime.timedelta(microseconds=1)
    newer = [i for i, info in mine.items() if info.updated_at is not None and info.updated_at <= at]
    what = f"sessions(updated_before=a microsecond after the updated_at of {show_id(pivot)})"
    _check_ids(_listed(what, store.sessions(updated_before=after), prefix), newer, what)


def _check_state_filter(store: RunStore, replica: RunStore, prefix: str, ids: list[str]) -> None:
    lazy = replica.sessions(state=RunState.RUNNING)
    running = store.claim(ids[0], replica=REPLICAS[0], lease=LONG_LEASE)
    what = "sessions(state=RUNNING), called before a claim and iterated after it"
    if ids[0] not in _listed(what, lazy, prefix):
        raise AssertionError(f"{what} missed the claimed session: it listed when called, not lazily at next()")
    if len(ids) > 1:
        _release(store, store.claim(ids[-1], replica=REPLICAS[0], lease=LONG_LEASE))
    finished = ids[-1:] if len(ids) > 1 else []
    wanted: list[tuple[Any, list[str]]] = [
        (RunState.RUNNING, [ids[0]]),
        ([RunState.FINISHED, RunState.RUNNING], [ids[0], *finished]),
        (frozenset({RunState.IDLE}), ids[1 : len(ids) - len(finished)]),
        ((RunState.STALLED, RunState.CANCELLED), []),
    ]
    for state, want in wanted:
        what = f"sessions(state={state!r})"
        got = _listed(what, replica.sessions(state=state), prefix)
        _check_ids(got, want, what)
        states = {state} if isinstance(state, RunState) else set(state)
        odd = [info for info in got.values() if info.state not in states]
        if odd:
            raise AssertionError(f"{what} listed {short(odd[0])}")
    _release(store, running)


def _check_listing_arguments(store: RunStore) -> None:
    naive: Any = datetime.datetime(2020, 1, 1)
    no_state: Any = "no state"
    bad: list[tuple[type[Exception], Callable[[], object], str]] = [
        (TypeError, lambda: store.sessions(updated_before=naive), "sessions(updated_before=a naive datetime)"),
        (TypeError, lambda: store.sessions(updated_before=naive.isoformat()), "sessions(updated_before=a str)"),
        (ValueError, lambda: store.sessions(state=naive.isoformat()), "sessions(state='2020-01-01T00:00:00')"),
        (ValueError, lambda: store.sessions(state=[RunState.IDLE, no_state]), "sessions(state=[IDLE, 'no state'])"),
    ]
    for kind, call, what in bad:
        check_raises(kind, call, f"{what}, before its first next()")


listed_ids = _listed
"""The sessions a listing gave whose ids start with a prefix, its order and uniqueness checked."""

RUN_CHECKS: dict[str, Callable[[Context], None]] = {
    DELETE: _check_delete,
    TOKENS: _check_tokens,
    CANCEL: _check_cancel,
    CRASH: _check_crash,
    RELEASE: _check_release,
    SAVE_RUN: _check_save_run,
    ARGUMENTS: check_arguments,
    LEASES: _check_leases,
    TOOK_OVER: _check_took_over,
    LISTING: _check_listing,
    STATES: check_states,
}
"""What checks each of :data:`RUN_PROPERTIES`."""
