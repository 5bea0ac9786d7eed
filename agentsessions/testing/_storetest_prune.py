"""storetest's property for stores that prune (:class:`~agentsessions.session.PruneStore`).

For random populations of sessions (each state a session can be in, saved at different
moments, with different metadata) and random arguments, ``prune`` deletes exactly the
sessions last updated before ``updated_before``, in the states asked for (by default the
ended ones: idle, finished, failed, cancelled), holding every pair asked for, each whole,
says how many, and leaves every other session as it was: a session under a live lease
never goes, nor a waiting one unless ``state`` names ``WAITING``. The model is written here,
apart from the library's own rule, from the sessions' records as the store reports them.
Then a prune races two runs claiming its sessions: each run ends with its whole session (the
claim came first) or with one made anew (the prune came first), never with part of one, and
the count says how many the prune took.

Every session of a population holds a pair fresh to the example, and every prune names it,
so a store that honours ``metadata`` deletes nothing that is not the property's own. A
store whose ``prune`` ignores ``metadata`` (one of the mistakes this property catches) would
also delete other old sessions: check a store of your own against a database for tests.
"""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Callable, Mapping, Sequence

import attrs
from hypothesis import example, given
from hypothesis import strategies as st

from agentsessions.approvals import Approval, ApprovalStore
from agentsessions.messages import Message
from agentsessions.runs import RunState, SessionInfo, exists
from agentsessions.session import MetadataStore, PruneStore, RunStore, Store
from agentsessions.testing._storetest_runmachine import LONG_LEASE, REPLICAS
from agentsessions.testing._storetest_support import JOIN_SECONDS, Context, check_equal, run_threads, wait_until

PRUNE = "prune deletes exactly the old sessions that match, never a live lease"

_ENDED = frozenset({RunState.IDLE, RunState.FINISHED, RunState.FAILED, RunState.CANCELLED})
_NAMEABLE = (*sorted(_ENDED), RunState.WAITING, RunState.STALLED)  # every state but RUNNING
_KINDS = ("idle", "finished", "failed", "cancelled", "running", "waiting", "stalled", "metadata only")
_TAG = "storetest-prune"
_STALL_LEASE = 0.05


def prunes(store: Store) -> bool:
    """Whether the property applies: a run store that prunes and keeps metadata (its prunes name a pair)."""
    return isinstance(store, RunStore) and isinstance(store, PruneStore) and isinstance(store, MetadataStore)


@attrs.frozen
class _Ask:
    """One prune's arguments, the cutoff as an index into the population's update times."""

    cutoff_at: int
    state: tuple[RunState, ...] | None
    narrow: bool
    batch: int
    via_replica: bool


_ASKS = st.builds(
    _Ask,
    cutoff_at=st.integers(0, 10),
    state=st.none() | st.lists(st.sampled_from(_NAMEABLE), min_size=1, unique=True).map(tuple),
    narrow=st.booleans(),
    batch=st.integers(1, 3),
    via_replica=st.booleans(),
)
_POPULATIONS = st.lists(st.tuples(st.sampled_from(_KINDS), st.sampled_from("ab")), min_size=1, max_size=7)
_EVERY_KIND = [(kind, "ab"[n % 2]) for n, kind in enumerate(_KINDS)]


def _stores(context: Context) -> tuple[PruneStore, PruneStore]:
    store, replica = context.both
    assert isinstance(store, PruneStore)
    return store, replica if isinstance(replica, PruneStore) else store


def _check_prune(context: Context) -> None:
    @context.fewer()
    @given(population=_POPULATIONS, ask=_ASKS)
    @example(population=_EVERY_KIND, ask=_Ask(99, None, narrow=False, batch=2, via_replica=False))
    @example(population=_EVERY_KIND, ask=_Ask(99, _NAMEABLE, narrow=True, batch=1, via_replica=True))
    def exactly(population: list[tuple[str, str]], ask: _Ask) -> None:
        context.examples += 1
        token = context.new_id()
        ids = _populate(context, token, population)
        try:
            _prune_and_compare(context, token, ids, ask)
        finally:
            for session_id in ids:
                context.runs[0].delete(session_id)

    exactly()
    _check_race(context)


_RACED = 24  # sessions a prune and two runs race for


def _check_race(context: Context) -> None:
    """A prune racing runs that claim its sessions: each run keeps its whole session or starts on none."""
    context.examples += 1
    replica = _stores(context)[1]
    runs = context.runs[0]
    token = context.new_id()
    ids = [f"{token}{n:02d}" for n in range(_RACED)]
    for session_id in ids:
        assert isinstance(runs, MetadataStore)
        runs.set_metadata(session_id, {_TAG: token})
        claim = runs.claim(session_id, replica=REPLICAS[0], lease=LONG_LEASE)
        runs.save_run(claim, [Message.user("old")], end=RunState.FINISHED)
    cutoff = _cutoff({session_id: runs.info(session_id) for session_id in ids}, len(ids))
    _after(runs, f"{token}clock", cutoff)
    counted: list[int] = []

    def prune() -> None:
        counted.append(replica.prune(updated_before=cutoff, metadata={_TAG: token}, batch=3))

    def run(half: Sequence[str]) -> None:
        for session_id in half:
            claim = runs.claim(session_id, replica=REPLICAS[1], lease=LONG_LEASE)
            seen = runs.messages(session_id)  # what the run resumes from
            try:
                runs.save_run(claim, [*seen, Message.user("new")], end=RunState.FINISHED)
            except Exception as error:
                what = f"save_run of the run holding {session_id[len(token) :]!r} while a prune ran"
                raise AssertionError(f"{what} raised {type(error).__name__}: {error}") from error
            time.sleep(0.002)  # the runs span some milliseconds, however fast the store: the prune lands among them

    try:
        run_threads([prune, functools.partial(run, ids[0::2]), functools.partial(run, ids[1::2])])
        finals = {session_id[len(token) :]: [m.text for m in runs.messages(session_id)] for session_id in ids}
        mixed = {name: texts for name, texts in finals.items() if texts not in (["old", "new"], ["new"])}
        what = "transcripts of runs raced by a prune (each one whole: ['old', 'new'], or ['new'] if pruned first)"
        check_equal(mixed, {}, what)
        made_anew = sum(texts == ["new"] for texts in finals.values())
        check_equal(counted, [made_anew], "the prune's count, beside the runs that found their session gone")
    finally:
        for session_id in ids:
            runs.delete(session_id)


def _populate(context: Context, token: str, population: Sequence[tuple[str, str]]) -> list[str]:
    """Sessions of the kinds drawn, made one after another (so their update times differ), each tagged."""
    store = context.runs[0]
    ids, stalled = [], []
    for number, (kind, user) in enumerate(population):
        if kind == "waiting" and not isinstance(store, ApprovalStore):
            kind = "finished"
        session_id = f"{token}{number}-{kind}-{user}"
        ids.append(session_id)
        assert isinstance(store, MetadataStore)
        store.set_metadata(session_id, {_TAG: token, "user": user})
        if kind == "metadata only":
            continue
        if kind in ("idle", "running"):
            store.save(session_id, [Message.user(session_id)])
        if kind == "running":
            store.claim(session_id, replica=REPLICAS[0], lease=LONG_LEASE)
        elif kind == "stalled":
            store.claim(session_id, replica=REPLICAS[0], lease=_STALL_LEASE)
            stalled.append(session_id)
        elif kind != "idle":
            claim = store.claim(session_id, replica=REPLICAS[0], lease=LONG_LEASE)
            store.save_run(claim, [Message.user(session_id)], end=None if kind == "waiting" else RunState(kind))
            if kind == "waiting":
                assert isinstance(store, ApprovalStore)
                store.wait(claim, [Approval("call", "tool", "{}", datetime.datetime.now(datetime.UTC))])

    def lapsed() -> bool:
        return all(store.info(session_id).state is RunState.STALLED for session_id in stalled)

    wait_until(f"{len(stalled)} sessions turning STALLED after a lease of {_STALL_LEASE} s", lapsed, JOIN_SECONDS)
    return ids


def _after(store: RunStore, probe: str, cutoff: datetime.datetime) -> None:
    """Wait until the store's saves are dated after ``cutoff`` (a store may keep milliseconds only)."""

    def later() -> bool:
        store.save(probe, [Message.user("what time is it?")])
        updated = store.info(probe).updated_at
        return updated is not None and updated > cutoff

    wait_until(f"a save dated after {cutoff.isoformat()}", later, JOIN_SECONDS)
    store.delete(probe)


def _cutoff(infos: Mapping[str, SessionInfo], at: int) -> datetime.datetime:
    """The ``at``-th of the population's update times (so the sessions saved at it stay), or past the last."""
    times = sorted({info.updated_at for info in infos.values() if info.updated_at is not None})
    if not times:
        return datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    return times[at] if at < len(times) else times[-1] + datetime.timedelta(microseconds=1)


def _matches(
    info: SessionInfo, cutoff: datetime.datetime, states: frozenset[RunState], pairs: Mapping[str, str]
) -> bool:
    return (
        info.state in states
        and info.updated_at is not None
        and info.updated_at < cutoff
        and pairs.items() <= info.metadata.items()
    )


def _prune_and_compare(context: Context, token: str, ids: list[str], ask: _Ask) -> None:
    store, replica = _stores(context)
    runs = context.runs[1]
    before = {session_id: runs.info(session_id) for session_id in ids}
    transcripts = {session_id: runs.messages(session_id) for session_id in ids}
    cutoff = _cutoff(before, ask.cutoff_at)
    pairs = {_TAG: token, "user": "a"} if ask.narrow else {_TAG: token}
    states = _ENDED if ask.state is None else frozenset(ask.state)
    gone = {session_id for session_id, info in before.items() if _matches(info, cutoff, states, pairs)}
    state: Sequence[RunState] | None = None if ask.state is None else list(ask.state)
    shown = None if state is None else [s.value for s in state]
    call = f"prune(updated_before={cutoff.isoformat()}, state={shown}, metadata={pairs!r}, batch={ask.batch})"
    pruner = replica if ask.via_replica else store
    counted = pruner.prune(updated_before=cutoff, state=state, metadata=pairs, batch=ask.batch)
    after = {session_id: runs.info(session_id) for session_id in ids}
    deleted = {session_id for session_id, info in after.items() if not exists(info)}

    def named(chosen: set[str]) -> list[str]:  # the id after the example's prefix: its number and kind
        return sorted(session_id[len(token) :] for session_id in chosen)

    check_equal(named(deleted), named(gone), f"the sessions {call} deleted, of {named(set(ids))}")
    check_equal(counted, len(gone), f"the count {call} returned")
    for session_id in ids:
        what = f"session {session_id[len(token) :]!r} ({before[session_id].state.value}) after {call}"
        if session_id in gone:
            check_equal(runs.messages(session_id), [], f"messages() of deleted {what}")
        else:
            check_equal(after[session_id], before[session_id], f"info() of kept {what}")
            check_equal(runs.messages(session_id), transcripts[session_id], f"messages() of kept {what}")
    again = store.prune(updated_before=cutoff, state=state, metadata=pairs, batch=ask.batch)
    check_equal(again, 0, f"the count of {call} run a second time")


PRUNE_CHECKS: dict[str, Callable[[Context], None]] = {PRUNE: _check_prune}
"""What checks the prune property."""
