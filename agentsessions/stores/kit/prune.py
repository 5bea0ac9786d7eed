"""``store.prune(...)``: which sessions it may delete, its arguments checked before any I/O.

A store's ``prune`` deletes, in batches of at most ``batch`` sessions (each batch its own short
step), the sessions :meth:`PruneFilter.matches` accepts, deciding each one in the same step
that deletes it: a claim that got there first keeps its session (it is then under a live
lease, which no prune deletes).
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable, Collection, Iterable, Mapping

import attrs

from agentsessions.metadata import metadata_filter
from agentsessions.runs import RunState, SessionInfo, check_updated_before, state_filter

PRUNED_BY_DEFAULT = frozenset({RunState.IDLE, RunState.FINISHED, RunState.FAILED, RunState.CANCELLED})
"""The ended states ``prune(state=None)`` deletes: never a live or stalled run, nor a wait for approval."""


@attrs.frozen
class PruneFilter:
    """What a prune deletes: sessions last updated before ``before``, in ``states``, holding ``pairs``."""

    before: datetime.datetime
    states: frozenset[RunState]
    pairs: Mapping[str, str] | None
    batch: int

    def matches(self, info: SessionInfo) -> bool:
        """Whether ``info`` (read in the step that would delete it) is to be deleted."""
        return (
            info.state in self.states
            and info.updated_at is not None
            and info.updated_at < self.before
            and (self.pairs is None or self.pairs.items() <= info.metadata.items())
        )


def check_prune(
    updated_before: object,
    state: RunState | Collection[RunState] | None,
    metadata: Mapping[str, str] | None,
    batch: object,
) -> PruneFilter:
    """``prune``'s arguments as a :class:`PruneFilter`; a ``TypeError`` or ``ValueError`` naming the bad one."""
    before = check_updated_before(updated_before)
    if before is None:
        raise TypeError("prune needs updated_before, an aware datetime: the sessions last updated before it go")
    states = PRUNED_BY_DEFAULT if state is None else state_filter(state)
    assert states is not None  # state_filter answers None only for None
    if RunState.RUNNING in states:
        raise ValueError("prune never deletes a session under a live lease: state cannot name RUNNING")
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise TypeError(f"batch must be an int, got {batch!r:.80}")
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    return PruneFilter(before, states, metadata_filter(metadata), batch)


def in_batches(ids: Iterable[str], size: int, delete: Callable[[list[str]], int]) -> int:
    """Hand ``ids`` to ``delete`` (one short step each) ``size`` at a time; the total it deleted."""
    taken, removed = iter(ids), 0
    while batch := list(itertools.islice(taken, size)):
        removed += delete(batch)
    return removed


def prune_listed(
    sessions: Callable[..., Iterable[SessionInfo]], wanted: PruneFilter, delete: Callable[[list[str]], int]
) -> int:
    """Hand the ids a store's ``sessions`` lists for ``wanted`` to ``delete``, a batch at a time; the total deleted.

    ``delete`` decides each session again in the step that deletes it: the listing is only a candidate list.
    """
    listing = sessions(state=wanted.states, updated_before=wanted.before, metadata=wanted.pairs)
    return in_batches((info.id for info in listing), wanted.batch, delete)
