"""The SQLite store: the conformance suite, several processes on one file, incremental saves."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

import agentsessions as agent
from agentsessions.stores import sqlite, storetest


def test_the_sqlite_store_keeps_the_contract(tmp_path: Path) -> None:
    # A new store object per call, as separate replicas would open: each checks the other.
    report = storetest.run(lambda: sqlite.open(tmp_path / "sessions.db"))
    assert report.replicas
    assert all(count > 0 for count in report.examples.values())
    print(report)


def _add(path: str, worker: int, count: int) -> None:
    store = sqlite.open(path)
    for n in range(count):
        store.add_steer("shared", f"{worker}:{n}")


def _take(path: str, until: int, results: multiprocessing.Queue[list[str]]) -> None:
    store = sqlite.open(path)
    taken: list[str] = []
    for _ in range(2000):
        taken += store.take_steers("shared")
        if len(taken) >= until or store.messages("done") != []:
            break
    results.put(taken)


def test_processes_sharing_the_file_hand_each_steer_to_exactly_one_taker(tmp_path: Path) -> None:
    path = str(tmp_path / "sessions.db")
    sqlite.open(path)
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[list[str]] = context.Queue()
    takers = [context.Process(target=_take, args=(path, 10**9, results)) for _ in range(3)]
    adders = [context.Process(target=_add, args=(path, w, 50)) for w in range(3)]
    for process in takers + adders:
        process.start()
    for process in adders:
        process.join(60)
    sqlite.open(path).save("done", [agent.Message.user("stop taking")])
    batches = [results.get(timeout=60) for _ in takers]
    for process in takers:
        process.join(60)
    taken = [steer for batch in batches for steer in batch] + sqlite.open(path).take_steers("shared")
    assert sorted(taken) == sorted(f"{w}:{n}" for w in range(3) for n in range(50))
    for batch in batches:  # each taker saw every adder's steers in the order they were added
        for worker in range(3):
            mine = [int(s.split(":")[1]) for s in batch if s.startswith(f"{worker}:")]
            assert mine == sorted(mine)


def test_a_save_writes_only_the_new_messages(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = sqlite.open(path)
    messages = [agent.Message.user(f"m{i}") for i in range(50)]
    store.save("s", messages)
    watcher = sqlite3.connect(path)
    before = watcher.execute("SELECT count(*) FROM agentsessions_messages").fetchone()[0]
    changes = store._connection().total_changes
    store.save("s", [*messages, agent.Message.assistant("one more")])
    assert store._connection().total_changes - changes == 2  # one message row, one session row
    assert watcher.execute("SELECT count(*) FROM agentsessions_messages").fetchone()[0] == before + 1
    other = sqlite.open(path)  # never saw the session: it replaces every row, and is right
    other.save("s", messages[:3])
    assert store.messages("s") == messages[:3]
    store.save("s", messages[:4])  # another process wrote since: the store notices
    assert sqlite.open(path).messages("s") == messages[:4]


def test_a_file_that_cannot_be_opened_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(agent.StoreError, match="could not create the tables"):
        sqlite.open(tmp_path)  # a directory
