"""Session metadata through the public API: set, read, list by it, kept clear under encryption, over an index."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.metadata import MAX_KEYS, check_metadata
from agentsessions.runs import exists
from agentsessions.stores import sqlite
from agentsessions.stores.memory import MemoryStore
from tests.support.schema_v1 import scratch_at


class SeedStore:
    """The seed's four methods only."""

    def save(self, session_id: str, messages: Any) -> None:
        """Nothing kept."""

    def messages(self, session_id: str) -> list[agent.Message]:
        """Nothing kept."""
        return []

    def add_steer(self, session_id: str, text: str) -> None:
        """Nothing kept."""

    def take_steers(self, session_id: str) -> list[str]:
        """Nothing kept."""
        return []


def test_a_session_sets_its_metadata_and_the_store_lists_by_it() -> None:
    store = MemoryStore()
    first, second = agent.open("first", store), agent.open("second", store)
    first.set_metadata({"user": "42"})
    second.set_metadata({"user": "7"})
    assert [info.id for info in store.sessions(metadata={"user": "42"})] == ["first"]
    assert first.info().metadata == {"user": "42"}
    assert exists(first.info())  # metadata alone makes the record
    first.set_metadata({})
    assert first.info().metadata == {} and not exists(first.info())


def test_a_store_without_metadata_is_a_type_error_after_the_mapping_is_checked() -> None:
    session = agent.open("s", SeedStore())
    with pytest.raises(ValueError, match="at most 16 keys"):
        session.set_metadata({f"k{i}": "v" for i in range(MAX_KEYS + 1)})
    with pytest.raises(TypeError, match="keeps no session metadata"):
        session.set_metadata({"user": "42"})


def test_session_info_holds_its_own_copy() -> None:
    given = {"user": "42"}
    info = agent.SessionInfo("s", metadata=given)
    given["user"] = "changed"
    assert info.metadata == {"user": "42"}
    assert hash(info) == hash(agent.SessionInfo("s", metadata={"other": "x"}))  # a dict takes no part in the hash


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        ("user=42", TypeError, "mapping of str to str"),
        ({"user": 42}, TypeError, "maps str to str"),
        ({"": "v"}, ValueError, "1 to 64 characters"),
        ({"user": "x" * 257}, ValueError, "at most 256 characters"),
        ({"user": "a\x00b"}, ValueError, "NUL"),
        ({"user": "\udc80"}, ValueError, "lone surrogates"),
    ],
)
def test_bad_metadata_names_what_is_wrong(bad: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        check_metadata(bad)


def test_sqlite_lists_by_metadata_through_the_pair_index(tmp_path: Path) -> None:
    store = sqlite.open(tmp_path / "s.db")
    store.set_metadata("s", {"user": "42"})
    sent: list[str] = []
    store._connection().set_trace_callback(sent.append)  # the statements as run, their values in place
    assert [info.id for info in store.sessions(metadata={"user": "42"})] == ["s"]
    pages = [sql for sql in sent if "mkey = 'user' AND mvalue = '42'" in sql]
    assert len(pages) == 2  # the saved sessions' pages, then the never-saved ones'
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        for page in pages:
            plan = " ".join(str(row) for row in db.execute(f"EXPLAIN QUERY PLAN {page}"))
            assert "agentsessions_metadata_by_pair" in plan and "SCAN s" not in plan, plan


@pytest.mark.slow  # the previous release's schema, migrated
def test_a_version_1_sqlite_file_migrates_and_keeps_metadata(tmp_path: Path) -> None:
    with scratch_at("sqlite", tmp_path, version=1) as opener, opener() as store:
        assert isinstance(store, sqlite.SQLiteStore)
        store.save("old", [agent.Message.user("from before")])
        store.set_metadata("old", {"user": "42"})
        assert [(info.id, info.metadata) for info in store.sessions(metadata={"user": "42"})] == [
            ("old", {"user": "42"})
        ]
        assert store.schema_version() == sqlite.SCHEMA_VERSION
