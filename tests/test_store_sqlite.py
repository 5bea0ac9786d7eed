"""The SQLite store: the conformance suite, several processes on one file, incremental saves."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import check_replicas_notice_each_other
from crossprocess import check_steers_across_processes

import agentsessions as agent
from agentsessions.stores import sqlite, storetest


def test_the_sqlite_store_keeps_the_contract(tmp_path: Path) -> None:
    # A new store object per call, as separate replicas would open: each checks the other.
    report = storetest.run(lambda: sqlite.open(tmp_path / "sessions.db"))
    assert report.replicas
    assert all(count > 0 for count in report.examples.values())
    print(report)


@contextlib.contextmanager
def opened(path: str) -> Iterator[sqlite.SQLiteStore]:
    """The store as another process opens it: by path."""
    yield sqlite.open(path)


def test_processes_sharing_the_file_hand_each_steer_to_exactly_one_taker(tmp_path: Path) -> None:
    check_steers_across_processes(functools.partial(opened, str(tmp_path / "sessions.db")))


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
    check_replicas_notice_each_other(store, lambda: sqlite.open(path), "s", messages)


def test_a_file_that_cannot_be_opened_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(agent.StoreError, match="could not create the tables"):
        sqlite.open(tmp_path)  # a directory
