"""storetest's property for stores that fork sessions (:class:`~agentsessions.session.ForkStore`).

A fork copies a prefix of one session into a new one in one step: the new session holds
exactly the first ``at`` messages, is ``IDLE`` with no steers, the source is untouched, an
existing target is a ``ConflictError`` that changes nothing, ``at`` outside ``0..length``
is refused, and a reader never sees part of a fork.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from agentsessions.errors import ConflictError
from agentsessions.messages import Message
from agentsessions.runs import RunState
from agentsessions.session import ForkStore, RunStore, Store
from agentsessions.testing._storetest_support import (
    JOIN_SECONDS,
    Context,
    check_equal,
    check_raises,
    transcripts,
)

FORK = "fork copies a prefix into a new idle session in one step"


def _fork_of(store: Store) -> Callable[..., None]:
    """The store's ``fork``; storetest runs this property only for a :class:`ForkStore`."""
    assert isinstance(store, ForkStore)
    return store.fork


def _check_fork(context: Context) -> None:
    store, replica = context.both
    fork = _fork_of(store)

    @context.settings
    @given(transcript=transcripts(max_size=6), cut=st.integers(0, 6), whole=st.booleans(), steers=st.booleans())
    def prefix(transcript: list[Message], cut: int, whole: bool, steers: bool) -> None:
        context.examples += 1
        source, target = context.new_id("source"), context.new_id("fork")
        store.save(source, transcript)
        if steers:
            store.add_steer(source, "a steer stays with its session")
        at = None if whole else min(cut, len(transcript))
        fork(source, target, at=at)
        want = transcript if at is None else transcript[:at]
        check_equal(replica.messages(target), want, f"the fork of {len(transcript)} messages at {at}")
        check_equal(replica.messages(source), transcript, "the source after a fork")
        if isinstance(replica, RunStore):
            info = replica.info(target)
            check_equal((info.state, info.length, info.pending_steers), (RunState.IDLE, len(want), 0), "fork's info")
            check_equal(replica.take_steers(source), ["a steer stays with its session"] if steers else [], "steers")
            replica.delete(source), replica.delete(target)

    prefix()
    _check_refusals(context, store, replica)
    _check_readers(context, store, replica)


def _check_refusals(context: Context, store: Store, replica: Store) -> None:
    fork = _fork_of(store)
    context.examples += 1
    source, taken, steered = context.new_id("source"), context.new_id("taken"), context.new_id("steered")
    three = [Message.user(f"message {i}") for i in range(3)]
    store.save(source, three)
    store.save(taken, three[:1])
    store.add_steer(steered, "only a steer")
    for target in (taken, steered):
        check_raises(ConflictError, functools.partial(fork, source, target), f"fork into the existing {target!r}")
    check_equal(replica.messages(taken), three[:1], "a session a refused fork was aimed at")
    check_equal(replica.take_steers(steered), ["only a steer"], "the steers of a refused fork's target")
    for bad, error in ((-1, ValueError), (4, ValueError), (True, TypeError), ("1", TypeError)):
        fresh = context.new_id("never")
        check_raises(error, functools.partial(fork, source, fresh, at=bad), f"fork at {bad!r}")
        check_equal(replica.messages(fresh), [], f"a fork refused for at={bad!r} left messages")


def _check_readers(context: Context, store: Store, replica: Store) -> None:
    """A reader polling the fork's id sees nothing, or all of the prefix: never a part."""
    context.examples += 1
    source = context.new_id("big source")
    transcript = [Message.user(f"message {i} " + "x" * 100) for i in range(300)]
    store.save(source, transcript)
    target = context.new_id("big fork")
    seen: list[int] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(len(replica.messages(target)))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        _fork_of(store)(source, target, at=250)
    finally:
        done.set()
        reader.join(JOIN_SECONDS)
    partial = sorted({n for n in seen if n not in (0, 250)})
    check_equal(partial, [], "lengths a reader saw while a 250-message fork was made")


FORK_CHECKS: dict[str, Callable[[Context], None]] = {FORK: _check_fork}
"""What checks the fork property."""
