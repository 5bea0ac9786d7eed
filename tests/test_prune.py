"""``store.prune`` (issue 28) on every store: what it deletes, keeps, refuses."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import pytest

import agentsessions as agent
from agentsessions.runs import exists, utcnow
from agentsessions.stores.memory import MemoryStore
from agentsessions.stores.sqlite import SQLiteStore
from tests.support.backends import PERSISTENT, scratch_opener, store_params

if TYPE_CHECKING:  # psycopg is an extra: the module must collect without it
    from agentsessions.stores.mongodb import MongoStore
    from agentsessions.stores.mysql import MySQLStore
    from agentsessions.stores.postgres import PostgresStore
    from agentsessions.stores.redis import RedisStore

Pruning: TypeAlias = "MemoryStore | SQLiteStore | PostgresStore | MySQLStore | MongoStore | RedisStore"


@pytest.fixture(params=store_params("memory", "sqlite", *PERSISTENT[1:]))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pruning]:
    if request.param == "memory":
        yield MemoryStore()
        return
    with scratch_opener(request.param, tmp_path) as opener, opener() as made:
        yield made


OLD = [agent.Message.user("old")]


def ended(store: Pruning, session_id: str, end: agent.RunState) -> None:
    claim = store.claim(session_id, replica="r", lease=30)
    store.save_run(claim, OLD, end=end)


def population(store: Pruning) -> datetime.datetime:
    """Sessions in each state before the returned cutoff, and a finished one after it."""
    store.save("idle", OLD)
    for end in (agent.RunState.FINISHED, agent.RunState.FAILED, agent.RunState.CANCELLED):
        ended(store, end.value, end)
    store.save("live", OLD)
    store.claim("live", replica="r", lease=60)  # under a live lease: never pruned
    store.set_metadata("finished", {"user": "42"})  # metadata is no save: updated_at stays
    cutoff = utcnow()
    ended(store, "recent", agent.RunState.FINISHED)
    return cutoff


@pytest.mark.parametrize("batch", [1, 2, 500])
def test_prune_deletes_the_old_ended_sessions_whole(store: Pruning, batch: int) -> None:
    cutoff = population(store)
    assert store.prune(updated_before=cutoff, batch=batch) == 4
    assert {i.id for i in store.sessions()} == {"live", "recent"}
    for gone in ("idle", "finished", "failed", "cancelled"):
        assert not exists(store.info(gone)) and store.messages(gone) == []
    assert store.prune(updated_before=cutoff, batch=batch) == 0  # nothing left to prune


def test_prune_narrows_by_state_and_metadata(store: Pruning) -> None:
    cutoff = population(store)
    assert store.prune(updated_before=cutoff, state=agent.RunState.FAILED) == 1
    assert store.prune(updated_before=cutoff, metadata={"user": "7"}) == 0
    assert store.prune(updated_before=cutoff, metadata={"user": "42"}) == 1
    assert {i.id for i in store.sessions()} == {"idle", "cancelled", "live", "recent"}
    later = utcnow() + datetime.timedelta(hours=1)
    assert store.prune(updated_before=later, state=[agent.RunState.STALLED]) == 0
    assert store.prune(updated_before=later) == 3  # the recent one too, never the live one
    assert [i.id for i in store.sessions()] == ["live"]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"updated_before": datetime.datetime(2020, 1, 1)}, TypeError),  # naive: its zone is unknown
        ({"updated_before": None}, TypeError),
        ({"batch": 0}, ValueError),
        ({"batch": True}, TypeError),
        ({"batch": 2.0}, TypeError),
        ({"state": "bogus"}, ValueError),
        ({"state": agent.RunState.RUNNING}, ValueError),  # a live lease is never pruned
        ({"metadata": {"": "x"}}, ValueError),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_deleted(
    store: Pruning, arguments: dict[str, Any], error: type
) -> None:
    cutoff = population(store)
    with pytest.raises(error):
        store.prune(**{"updated_before": cutoff, **arguments})
    assert len(list(store.sessions())) == 6


def test_a_claim_racing_a_prune_keeps_its_session_or_finds_none(store: Pruning) -> None:
    ids = [f"s{n}" for n in range(200)]
    for session_id in ids:
        ended(store, session_id, agent.RunState.FINISHED)
    cutoff = utcnow()
    start = threading.Barrier(3)
    counted: list[int] = []

    def prune() -> None:
        start.wait()
        # SQLite: the prune goes through a second store object on the file, as another process's would.
        pruner = SQLiteStore(store.path) if isinstance(store, SQLiteStore) else store
        counted.append(pruner.prune(updated_before=cutoff, batch=7))
        if isinstance(pruner, SQLiteStore) and pruner is not store:
            pruner.close()

    def run(half: list[str]) -> None:
        start.wait()
        for session_id in half:
            claim = store.claim(session_id, replica="racer", lease=30)
            seen = store.messages(session_id)  # what the run resumes from: all or nothing
            store.save_run(claim, [*seen, agent.Message.user("new")], end=agent.RunState.FINISHED)

    threads = [threading.Thread(target=prune)] + [threading.Thread(target=run, args=(ids[n::2],)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finals = {session_id: [m.text for m in store.messages(session_id)] for session_id in ids}
    assert all(final in (["old", "new"], ["new"]) for final in finals.values()), finals
    # Each session the prune deleted was made anew by its run's claim: the count says how many.
    assert counted == [sum(final == ["new"] for final in finals.values())]
