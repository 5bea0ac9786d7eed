"""storetest's property for stores that keep session metadata (:class:`~agentsessions.session.MetadataStore`).

``set_metadata`` replaces a session's whole mapping in one step, keeps every key and value
verbatim, leaves transcript, steers and ``updated_at`` alone, and survives saves and runs;
``sessions(metadata=...)`` lists exactly the sessions holding every given pair (exact
matches: no prefix, case or wildcard leaks), newest first across pages, combined with
``state=``; bad metadata is refused before any I/O and stores nothing; delete removes it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agentsessions.messages import Message
from agentsessions.metadata import MAX_KEY, MAX_KEYS, MAX_VALUE
from agentsessions.runs import Progress, RunState
from agentsessions.session import MetadataStore, Store
from agentsessions.testing._storetest_runmachine import LONG_LEASE, REPLICAS
from agentsessions.testing._storetest_runs import listed_ids
from agentsessions.testing._storetest_support import JOIN_SECONDS, Context, check_equal, check_raises, show_id

METADATA = "metadata is replaced whole and lists sessions by their pairs"

# Any text a store must keep: quotes, backslashes, SQL and JSON wildcards, astral characters.
_CHARS = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
_KEY = st.text(_CHARS, min_size=1, max_size=MAX_KEY)
_VALUE = st.text(_CHARS, max_size=MAX_VALUE) | st.sampled_from(["", "%", "_", "*", '"', "\\", "a'b", "{}", "[1]"])
_MAPPING = st.dictionaries(_KEY, _VALUE, max_size=MAX_KEYS)


def _metadata_store(store: Store) -> MetadataStore:
    """The store as a metadata store; storetest runs this property only for one."""
    assert isinstance(store, MetadataStore)
    return store


def _check_metadata(context: Context) -> None:
    store, replica = (_metadata_store(s) for s in context.both)

    @context.fewer()
    @given(first=_MAPPING, second=_MAPPING, saved=st.booleans())
    def replaced(first: dict[str, str], second: dict[str, str], saved: bool) -> None:
        context.examples += 1
        session_id = context.new_id("metadata")
        if saved:
            store.save(session_id, [Message.user("kept")])
        store.add_steer(session_id, "a steer stays")
        before = replica.info(session_id)
        store.set_metadata(session_id, first)
        check_equal(replica.info(session_id).metadata, first, "info().metadata after set_metadata")
        store.set_metadata(session_id, second)
        after = replica.info(session_id)
        check_equal(after.metadata, second, "info().metadata after a second set_metadata (it replaces the whole)")
        what = "(length, updated_at, pending steers) after set_metadata"
        check_equal(
            (after.length, after.updated_at, after.pending_steers),
            (before.length, before.updated_at, before.pending_steers),
            what,
        )
        check_equal(replica.messages(session_id), [Message.user("kept")] if saved else [], "messages after metadata")
        store.delete(session_id)
        check_equal(replica.info(session_id).metadata, {}, "info().metadata after delete")

    replaced()
    _check_kept(context, store, replica)
    _check_listing(context, store, replica)
    _check_exact(context, store, replica)
    _check_rejected(context, store, replica)
    _check_whole(context, store, replica)


def _check_kept(context: Context, store: MetadataStore, replica: MetadataStore) -> None:
    """Saves, claims and releases leave the metadata as it was set."""
    context.examples += 1
    session_id, tags = context.new_id("kept"), {"user": "42", "app": "support"}
    store.set_metadata(session_id, tags)
    store.save(session_id, [Message.user("one")])
    claim = store.claim(session_id, replica=REPLICAS[0], lease=LONG_LEASE)
    store.save_run(claim, [Message.user("one"), Message.user("two")])
    check_equal(replica.info(session_id).metadata, tags, "info().metadata during a run")
    check_equal(store.save_run(claim, [Message.user("one")], end=RunState.FINISHED), Progress(), "release")
    check_equal(replica.info(session_id).metadata, tags, "info().metadata after saves, a claim and a release")
    store.delete(session_id)


def _check_listing(context: Context, store: MetadataStore, replica: MetadataStore) -> None:
    """Listing by a pair finds exactly its sessions, across pages and ties, with and without ``state``."""
    context.examples += 1
    prefix = context.new_id()
    count = max(4, context.listing_sessions // 2)
    ids = [f"{prefix}{i:06d}" for i in range(count)]
    tag, other = {"storetest": prefix, "parity": "even"}, {"storetest": prefix, "parity": "odd"}
    for number, session_id in enumerate(ids):
        if number % 4 < 2:  # half never saved: they share one updated_at, so pages turn in ties
            store.save(session_id, [Message.user(session_id)])
        store.set_metadata(session_id, tag if number % 2 == 0 else other)
    even, odd = ids[0::2], ids[1::2]
    wanted: list[tuple[dict[str, Any], list[str]]] = [
        ({"metadata": {"storetest": prefix}}, ids),
        ({"metadata": tag}, even),
        ({"metadata": {"parity": "odd", "storetest": prefix}}, odd),
        ({"metadata": {**tag, "parity": "Even"}}, []),
        ({"metadata": {"storetest": prefix, "absent": ""}}, []),
    ]
    claim = store.claim(even[0], replica=REPLICAS[0], lease=LONG_LEASE)
    wanted += [
        ({"metadata": tag, "state": RunState.RUNNING}, [even[0]]),
        ({"metadata": other, "state": RunState.RUNNING}, []),
        ({"metadata": tag, "state": RunState.IDLE}, even[1:]),
    ]
    for arguments, want in wanted:
        what = f"sessions({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
        got = listed_ids(what, replica.sessions(**arguments), prefix)
        check_equal(sorted(got), sorted(want), what)
        odd_ones = [show_id(i) for i, info in got.items() if not tag.items() <= info.metadata.items()]
        if arguments["metadata"] == tag and odd_ones:
            raise AssertionError(f"{what} listed {odd_ones[0]}, whose metadata does not hold {tag!r}")
    check_equal(store.save_run(claim, [], end=RunState.FINISHED), Progress(), "release")
    for session_id in ids:
        store.delete(session_id)
    what = "sessions(metadata=...) after every tagged session was deleted"
    check_equal(list(listed_ids(what, replica.sessions(metadata={"storetest": prefix}), prefix)), [], what)


def _check_exact(context: Context, store: MetadataStore, replica: MetadataStore) -> None:
    """A pair matches itself only: no prefix, case, wildcard or key/value confusion."""
    context.examples += 1
    prefix = context.new_id()
    variants = ["42", "4", "420", "4%", "4_", "4*", " 42", "42 ", "٤٢"]
    ids = {value: f"{prefix}{i:03d}" for i, value in enumerate(variants)}
    for value, session_id in ids.items():
        store.set_metadata(session_id, {"storetest": prefix, "user": value})
    store.set_metadata(f"{prefix}key", {"storetest": prefix, "User": "42"})
    store.set_metadata(f"{prefix}swap", {"storetest": prefix, "42": "user"})
    store.set_metadata(f"{prefix}joined", {"storetest": prefix, "user=4": "2"})
    for value, session_id in ids.items():
        what = f"sessions(metadata={{'user': {value!r}, ...}})"
        got = listed_ids(what, replica.sessions(metadata={"storetest": prefix, "user": value}), prefix)
        check_equal(sorted(got), [session_id], what)
    for session_id in [*ids.values(), f"{prefix}key", f"{prefix}swap", f"{prefix}joined"]:
        store.delete(session_id)


def _check_rejected(context: Context, store: MetadataStore, replica: MetadataStore) -> None:
    """Bad metadata is a ``TypeError`` or ``ValueError`` before any I/O; nothing is stored."""
    context.examples += 1
    session_id = context.new_id("rejected")
    too_many = {f"k{i}": "v" for i in range(MAX_KEYS + 1)}
    bad: list[tuple[type[Exception], Any]] = [
        (TypeError, [("user", "42")]),
        (TypeError, {"user": 42}),
        (TypeError, {1: "42"}),
        (ValueError, too_many),
        (ValueError, {"": "empty key"}),
        (ValueError, {"k" * (MAX_KEY + 1): "long key"}),
        (ValueError, {"user": "v" * (MAX_VALUE + 1)}),
        (ValueError, {"user": "nul\x00"}),
        (ValueError, {"user": "lone \ud800"}),
    ]
    for kind, metadata in bad:
        check_raises(
            kind, functools.partial(store.set_metadata, session_id, metadata), f"set_metadata({metadata!r:.60})"
        )
        check_raises(kind, functools.partial(store.sessions, metadata=metadata), f"sessions(metadata={metadata!r:.60})")
    info = replica.info(session_id)
    check_equal((info.metadata, info.length, info.updated_at), ({}, 0, None), "the record after refused metadata")


def _check_whole(context: Context, store: MetadataStore, replica: MetadataStore) -> None:
    """Readers racing replacements see one whole mapping or the other, never a mix."""
    context.examples += 1
    session_id = context.new_id("whole")
    mappings = [{f"key{k}": f"{n}" for k in range(MAX_KEYS)} for n in range(2)]
    store.set_metadata(session_id, mappings[0])
    done, seen = threading.Event(), []

    def write() -> None:
        try:
            for n in range(40):
                store.set_metadata(session_id, mappings[n % 2])
        finally:
            done.set()

    def read() -> None:
        while not done.is_set():
            seen.append(replica.info(session_id).metadata)

    threads = [threading.Thread(target=target, daemon=True) for target in (write, read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
    mixed = [got for got in seen if got not in mappings]
    check_equal(mixed[:1], [], f"metadata read while it was replaced 40 times ({len(seen)} reads)")
    store.delete(session_id)


METADATA_CHECKS: dict[str, Callable[[Context], None]] = {METADATA: _check_metadata}
"""What checks the metadata property."""
