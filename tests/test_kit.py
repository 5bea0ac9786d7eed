"""The store kit on its own: the page loop, the failure translation and the values, without a store."""

from __future__ import annotations

import datetime
import gc
import sqlite3
from collections.abc import Sequence

import pytest

import agentsessions as agent
from agentsessions.errors import FormatError, SchemaMissingError, StoreError
from agentsessions.messages import Message
from agentsessions.runs import Claim, SessionInfo
from agentsessions.stores.kit import values
from agentsessions.stores.kit.failures import first_line, translated
from agentsessions.stores.kit.incremental import KnownSessions
from agentsessions.stores.kit.listing import Page, pages
from agentsessions.stores.memory import MemoryStore

IDS = [f"s{n:02}" for n in range(7)]


def _info(row: str) -> SessionInfo:
    if row == "unreadable":
        raise FormatError("a record from a newer version")
    return SessionInfo(row)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 8])
def test_pages_reads_every_row_once_in_order_asking_past_a_full_page(size: int) -> None:
    asked: list[int | None] = []

    def fetch(bound: int | None) -> Page[str]:
        asked.append(bound)
        start = 0 if bound is None else bound
        return IDS[start : start + size], _info

    listed = [info.id for info in pages(fetch, lambda row: IDS.index(row) + 1, "test store", size)]
    assert listed == IDS
    # One query per page, and one more when the last page came back full (it cannot know it was the last).
    assert len(asked) == len(IDS) // size + 1 and asked[0] is None


def test_pages_is_lazy_and_leaves_an_unreadable_record_out(caplog: pytest.LogCaptureFixture) -> None:
    rows: list[Sequence[str]] = [["a", "unreadable"], ["b"]]
    fetched: list[str | None] = []

    def fetch(bound: str | None) -> Page[str]:
        fetched.append(bound)
        return rows[len(fetched) - 1], _info

    listing = pages(fetch, lambda row: row, "test store", 2)
    assert fetched == []  # nothing is read before the first next()
    assert [info.id for info in listing] == ["a", "b"]
    assert fetched == [None, "unreadable"]
    assert "test store: a session left out of the listing" in caplog.text


def test_translated_words_chains_and_forgets_what_the_store_knew() -> None:
    known = KnownSessions()
    known.remember("s1", 1, [Message.user("hi")])
    assert known.get("s1") is not None
    with pytest.raises(StoreError) as raised, translated(sqlite3.Error, "My store", "save", "s1", known=known):
        sqlite3.connect(":memory:").execute("SELECT * FROM missing")
    assert str(raised.value) == "My store could not save for session 's1': no such table: missing"
    assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
    assert known.get("s1") is None  # the next save writes the whole transcript


def test_translated_lets_other_errors_through_and_uses_the_failure_given() -> None:
    with pytest.raises(KeyError), translated(sqlite3.Error, "My store", "save"):
        raise KeyError("not the driver's")

    def missing(what: str, error: BaseException) -> StoreError:
        return SchemaMissingError(f"{what}: {first_line(error)}; create the tables")

    with (
        pytest.raises(SchemaMissingError) as raised,
        translated(ValueError, "My store", "list the sessions", failure=missing),
    ):
        raise ValueError("first\nsecond")
    assert str(raised.value) == "My store could not list the sessions: first; create the tables"


def test_first_line_is_the_type_name_when_the_error_says_nothing() -> None:
    assert first_line(ValueError("  one\ntwo ")) == "one"
    assert first_line(ValueError()) == "ValueError"


def test_values_read_back_as_aware_utc() -> None:
    naive = datetime.datetime(2025, 6, 1, 12, 0, 3, 7)  # MySQL's DATETIME: UTC by convention
    paris = datetime.datetime(2025, 6, 1, 14, 0, 3, 7, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    expected = naive.replace(tzinfo=datetime.UTC)
    assert values.utc(naive) == expected and values.utc(naive).tzinfo is datetime.UTC
    assert values.utc(paris) == expected and values.utc(paris).tzinfo is datetime.UTC
    assert values.utc(None) is None
    assert values.moment(values.micros(expected)) == expected
    assert values.moment(b"%d" % values.micros(expected)) == expected
    assert values.micros(values.EPOCH) == 0 and values.span(1.5) == 1_500_000
    assert values.text("ü\ud800".encode("utf-8", "surrogatepass")) == "ü\ud800" and values.text(None) is None


def test_a_runs_session_is_remembered_past_the_bound_while_its_claim_lives() -> None:
    known = KnownSessions(size=2)
    claim = Claim("held", 1, "replica", 30.0)
    known.remember("held", 7, [Message.user("a")], claim)
    for n in range(5):  # plain saves of more sessions than the bound
        known.remember(f"plain {n}", n, [Message.user("b")])
    assert known.get("plain 0") is None and known.get("plain 4") is not None
    held = known.get("held", claim)
    assert held is not None and held.revision == 7
    assert known.get("held") is None  # a plain save does not build on a run's memory
    assert known.get("held", Claim("held", 2, "replica", 30.0)) is None  # nor another run's


def test_a_released_session_joins_the_recent_and_a_dropped_claim_is_forgotten() -> None:
    known = KnownSessions(size=2)
    kept, dropped = Claim("kept", 1, "r", 30.0), Claim("dropped", 2, "r", 30.0)
    known.remember("kept", 1, [], kept)
    known.remember("dropped", 2, [], dropped)
    known.release("kept", kept)
    assert known.get("kept") is not None and len(known) == 2
    del dropped
    gc.collect()
    assert len(known) == 1  # what the run saved went with its claim


def test_a_handles_save_is_remembered_past_the_bound_while_the_handle_lives() -> None:
    store = MemoryStore()
    known = KnownSessions(size=2)
    kept, dropped = agent.open("kept", store), agent.open("dropped", store)
    known.remember("kept", 1, [Message.user("a")], kept)
    known.remember("dropped", 2, [Message.user("b")], dropped)
    for n in range(5):  # plain saves of more sessions than the bound
        known.remember(f"plain {n}", n, [Message.user("c")])
    held = known.get("kept", kept)
    assert held is not None and held.revision == 1
    assert known.get("kept", agent.open("kept", MemoryStore())) is None  # a handle on another store
    del dropped
    gc.collect()
    assert len(known) == 3  # the two recent plain saves and the kept handle's: the dropped handle's went with it
