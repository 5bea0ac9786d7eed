"""storetest's property for steer keys (``add_steer(..., key=...)``), which make a steer safe to retry.

A key the session already holds stores nothing: with the same text the call returns the
session's state as any steer would; with another text it raises ``ConflictError`` and
stores nothing. Keys are the session's (another session may use the same one), survive
taking the steer, go with ``delete``, are not copied by a fork, and two threads retrying
one key at once store one steer. A bad key is refused before anything is stored.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from agentsessions.errors import ConflictError
from agentsessions.session import MAX_STEER_KEY, ForkStore, RunStore, Store
from agentsessions.testing._storetest_support import (
    TEXT,
    Context,
    check_equal,
    check_raises,
    run_threads,
    short,
)

KEYS = "steer keys store a retried steer once"

# Keys a database could confuse, as it could ids: case, trailing spaces, NUL, normal forms,
# lone surrogates, and keys at the length limit that differ only in their last character.
_TRICKY_KEYS = (
    *("a", "A", "a ", "a\x00", "é", "e\u0301", "\ud800", "%", "_", "🙂"),
    *("k" * (MAX_STEER_KEY - 1) + "a", "k" * (MAX_STEER_KEY - 1) + "b", "🙂" * MAX_STEER_KEY),
)
_KEYS = st.text(min_size=1, max_size=20)


def _add(store: Store) -> Callable[..., Any]:
    """The store's ``add_steer``; storetest runs this property only for a store that keeps keys."""
    assert isinstance(store, RunStore)
    return store.add_steer


def _check_keys(context: Context) -> None:
    store, replica = context.both
    add = _add(store)

    @context.settings
    @given(text=TEXT, other=TEXT, key=_KEYS, retries=st.integers(1, 3))
    @example(text="same", other="different", key="a", retries=1)
    def retried(text: str, other: str, key: str, retries: int) -> None:
        context.examples += 1
        session_id, neighbour = context.new_id("keyed"), context.new_id("neighbour")
        first = add(session_id, text, key=key)
        for attempt in range(retries):
            via = (store, replica)[attempt % 2]
            check_equal(_add(via)(session_id, text, key=key), first, "the state a retried keyed steer returned")
        if other != text:
            conflict = functools.partial(add, session_id, other, key=key)
            check_raises(ConflictError, conflict, "add_steer() with a kept key and another text")
        _add(replica)(neighbour, other, key=key)  # the same key in another session is another key
        check_equal(replica.take_steers(session_id), [text], f"steers after {retries} retries of one keyed steer")
        check_equal(replica.take_steers(neighbour), [other], "the steers of a session that used the same key")
        _after_taking(context, session_id, text, other, key)

    retried()
    _check_tricky_keys(context)
    _check_delete_and_fork(context)
    _check_refused(context)
    _check_racing_retries(context)


def _after_taking(context: Context, session_id: str, text: str, other: str, key: str) -> None:
    """A key outlives its steer: once taken, a retry still stores nothing; unkeyed steers are unaffected."""
    store, replica = context.both
    _add(replica)(session_id, text, key=key)
    if other != text:
        check_raises(ConflictError, functools.partial(_add(store), session_id, other, key=key), "after taking")
    store.add_steer(session_id, text)
    store.add_steer(session_id, text)
    check_equal(replica.take_steers(session_id), [text, text], "steers without a key beside a kept key")
    assert isinstance(replica, RunStore)
    replica.delete(session_id)


def _check_tricky_keys(context: Context) -> None:
    """Keys that differ in a byte are different keys; each is kept as given."""
    context.examples += 1
    store, replica = context.both
    session_id = context.new_id("tricky keys")
    for key in _TRICKY_KEYS:
        _add(store)(session_id, f"steer of {key!r}", key=key)
    for key in _TRICKY_KEYS:
        _add(replica)(session_id, f"steer of {key!r}", key=key)
        what = f"add_steer() with a kept key {short(key, 40)} and another text"
        check_raises(ConflictError, functools.partial(_add(replica), session_id, "other", key=key), what)
    want = [f"steer of {key!r}" for key in _TRICKY_KEYS]
    check_equal(store.take_steers(session_id), want, "steers of keys that differ only in a byte")
    assert isinstance(store, RunStore)
    store.delete(session_id)


def _check_delete_and_fork(context: Context) -> None:
    """``delete`` removes a session's keys; a fork starts with none."""
    context.examples += 1
    store, replica = context.both
    assert isinstance(store, RunStore) and isinstance(replica, RunStore)
    session_id, fork_id = context.new_id("deleted"), context.new_id("fork")
    store.add_steer(session_id, "before", key="k")
    if isinstance(store, ForkStore):
        store.fork(session_id, fork_id)
        replica.add_steer(fork_id, "in the fork", key="k")
        check_equal(replica.take_steers(fork_id), ["in the fork"], "a fork's steer under its source's key")
        replica.delete(fork_id)
    check_equal(replica.delete(session_id), True, "delete() of a session with only a keyed steer")
    replica.add_steer(session_id, "after", key="k")
    check_equal(store.take_steers(session_id), ["after"], "a steer under a key its deleted session had")
    store.delete(session_id)


_BAD_KEYS: tuple[tuple[object, type[Exception]], ...] = (
    ("", ValueError),
    ("k" * (MAX_STEER_KEY + 1), ValueError),
    (b"k", TypeError),
    (1, TypeError),
    (["k"], TypeError),
)


def _check_refused(context: Context) -> None:
    """A bad key is a ``TypeError`` or ``ValueError`` that stores nothing, not even the record."""
    store, replica = context.both
    assert isinstance(replica, RunStore)
    for bad, error in _BAD_KEYS:
        context.examples += 1
        session_id = context.new_id("refused key")
        check_raises(error, functools.partial(_add(store), session_id, "refused", key=bad), f"key={short(bad, 40)}")
        check_equal(replica.take_steers(session_id), [], f"steers after a refused key={short(bad, 40)}")
        check_equal(replica.info(session_id).pending_steers, 0, f"info() after a refused key={short(bad, 40)}")


def _check_racing_retries(context: Context) -> None:
    """Threads retrying one key at once, through the store and its replica, store one steer."""
    store, replica = context.runs
    for trial in range(context.threaded.max_examples):
        context.examples += 1
        session_id = context.new_id(f"racing retries {trial}")
        stored, conflicts = _race_one_key(store, replica, session_id)
        texts = replica.take_steers(session_id)
        check_equal(len(texts), 1, f"steers stored by 8 threads racing one key: {short(texts)}")
        check_equal(sorted(set(stored)), texts, "the text the racing threads that did not conflict saw kept")
        others = sorted({"the retried text", "another text"} - set(texts))
        check_equal(sorted(set(conflicts)), others, "the texts of the racing calls that raised ConflictError")
        store.delete(session_id)


def _race_one_key(store: RunStore, replica: RunStore, session_id: str) -> tuple[list[str], list[str]]:
    """Eight threads add one keyed steer at once, six with one text and two with another.

    Returns the texts of the calls that returned and of those that raised ``ConflictError``.
    """
    stored: list[str] = []
    conflicts: list[str] = []

    def retry(n: int) -> None:
        text = "the retried text" if n < 6 else "another text"
        try:
            (store, replica)[n % 2].add_steer(session_id, text, key="one key")
        except ConflictError:
            conflicts.append(text)  # list.append is atomic
        else:
            stored.append(text)

    run_threads([functools.partial(retry, n) for n in range(8)])
    return stored, conflicts


KEY_CHECKS: dict[str, Callable[[Context], None]] = {KEYS: _check_keys}
"""What checks the steer-key property."""
