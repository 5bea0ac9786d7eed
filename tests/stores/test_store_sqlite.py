"""The SQLite store: the conformance suite, several processes on one file, runs and their records."""

from __future__ import annotations

import contextlib
import datetime
import functools
import multiprocessing
import sqlite3
from collections.abc import Iterator
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

import agentsessions as agent
from agentsessions.runs import Claim, Renewal, RunState, utcnow
from agentsessions.stores import sqlite
from agentsessions.testing import storetest
from tests.support.crossprocess import check_steers_across_processes
from tests.support.replicas import check_replicas_notice_each_other, numbered_transcript
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow  # the whole conformance suite

UTC = datetime.UTC
MICROSECOND = datetime.timedelta(microseconds=1)
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)

# The seed's table, as a file made by version 0.1 holds it.
OLD_SESSIONS = """
CREATE TABLE agentsessions_sessions (
    id BLOB PRIMARY KEY, revision INTEGER NOT NULL, length INTEGER NOT NULL, updated_at REAL NOT NULL
) WITHOUT ROWID
"""


@pytest.mark.parametrize("name", storetest.properties())
def test_the_sqlite_store_keeps_the_contract(name: str, tmp_path: Path) -> None:
    # A new store object per call, as separate replicas would open: each checks the other.
    report = storetest.check(name, lambda: sqlite.open(tmp_path / "sessions.db"))
    assert report.replicas and report.skipped == () and report.examples[name] > 0, report


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


def test_a_malformed_row_is_a_format_error_naming_the_session_and_the_message(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    sqlite.open(path).save("s-1", [agent.Message.user(f"m{i}") for i in range(3)])
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        row = '{"v":4,"role":"user","content":[{"type":"text","text":"a","covers":2}]}'
        db.execute("UPDATE agentsessions_messages SET body = ? WHERE position = 1", (row,))
    with pytest.raises(agent.FormatError, match=r"^session 's-1' message 1: .*a text block has no covers"):
        sqlite.open(path).messages("s-1")


def test_a_file_that_cannot_be_opened_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(agent.StoreError, match="could not create the tables"):
        sqlite.open(tmp_path)  # a directory


def test_a_file_of_the_older_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path)) as old:
        old.execute(OLD_SESSIONS)
    with pytest.raises(agent.StoreError, match="made by an older version of agentsessions"):
        sqlite.open(path)
    with contextlib.closing(sqlite3.connect(path)) as old:
        tables = {name for (name,) in old.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    assert tables == {"agentsessions_sessions"}


# --- Records: timestamps and listing ---------------------------------------------------------


def test_updated_at_keeps_the_microsecond_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sessions.db"
    moment = datetime.datetime(2031, 5, 6, 7, 8, 9, 123457, tzinfo=UTC)
    monkeypatch.setattr(sqlite, "utcnow", lambda: moment)
    sqlite.open(path).save("s", numbered_transcript(2))
    with contextlib.closing(sqlite3.connect(path)) as raw:
        [(stored,)] = raw.execute("SELECT updated_at FROM agentsessions_sessions").fetchall()
    assert stored == (moment - EPOCH) // MICROSECOND
    other = sqlite.open(path)  # another replica reads it back
    assert other.info("s").updated_at == moment
    elsewhere = datetime.timezone(datetime.timedelta(hours=5, minutes=30))
    assert [i.id for i in other.sessions(updated_before=moment.astimezone(elsewhere))] == []
    assert [i.id for i in other.sessions(updated_before=moment + MICROSECOND)] == ["s"]


def test_updated_at_from_the_clock_is_not_rounded(tmp_path: Path) -> None:
    store = sqlite.open(tmp_path / "sessions.db")
    seen = set()
    for n in range(20):
        before = utcnow()
        store.save("s", numbered_transcript(n + 1))
        updated = store.info("s").updated_at
        assert updated is not None and before <= updated <= utcnow()
        seen.add(updated.microsecond % 1000)
    assert len(seen) > 1  # not milliseconds: twenty saves all on a whole millisecond would be a 1e-57 chance


def test_listing_walks_pages_of_equal_timestamps_each_session_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, path = sqlite.open(tmp_path / "sessions.db"), tmp_path / "sessions.db"
    older, newer = datetime.datetime(2030, 1, 1, tzinfo=UTC), datetime.datetime(2030, 1, 2, tzinfo=UTC)
    groups = {older: [f"o{i:04}" for i in range(700)], newer: [f"n{i:04}" for i in range(450)]}
    for moment, ids in groups.items():
        monkeypatch.setattr(sqlite, "utcnow", functools.partial(lambda m: m, moment))
        for session_id in ids:
            store.save(session_id, [agent.Message.user(session_id)])
    never = [f"s{i:04}" for i in range(520)]
    for session_id in never:
        store.add_steer(session_id, "made by a steer")
    monkeypatch.undo()
    running = groups[older][::7]
    for session_id in running:
        store.claim(session_id, replica="me", lease=600)
    expected = [*sorted(groups[newer], reverse=True), *sorted(groups[older], reverse=True)]
    expected += sorted(never, reverse=True)
    reader = sqlite.open(path)
    assert [info.id for info in reader.sessions()] == expected
    assert [i.id for i in reader.sessions(state=RunState.RUNNING)] == sorted(running, reverse=True)
    idle = [i.id for i in reader.sessions(state={RunState.IDLE, RunState.FINISHED})]
    assert idle == [session_id for session_id in expected if session_id not in running]
    assert [i.id for i in reader.sessions(updated_before=newer)] == sorted(groups[older], reverse=True)
    assert list(reader.sessions(state=())) == []


def test_listing_checks_its_arguments_at_once_and_fetches_one_page_at_a_time(tmp_path: Path) -> None:
    store = sqlite.open(tmp_path / "sessions.db")
    for n in range(sqlite.PAGE_SIZE + 1):
        store.save(f"s{n}", [])
    store.add_steer("s0", "hello")
    with pytest.raises(ValueError):
        store.sessions(state="busy")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.sessions(updated_before=datetime.datetime(2030, 1, 1))  # naive
    queries: list[str] = []
    store._connection().set_trace_callback(queries.append)
    listing = store.sessions()
    assert queries == []
    assert next(listing).id == f"s{sqlite.PAGE_SIZE}"  # the newest save
    assert len(queries) == 1
    rest = list(listing)
    assert len(rest) == sqlite.PAGE_SIZE and rest[-1].id == "s0" and rest[-1].pending_steers == 1
    assert len(queries) == 3  # two pages of saved sessions, one finding no never-saved one


# --- Holding runs --------------------------------------------------------------------------


def test_tokens_keep_growing_across_a_delete_and_another_store_object(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    first = sqlite.open(path).claim("t", replica="a", lease=60)
    assert sqlite.open(path).delete("t")
    again = sqlite.open(path).claim("t", replica="b", lease=60)
    assert again.token > first.token
    with pytest.raises(agent.ConflictError):
        sqlite.open(path).save_run(first, [])


def test_renewing_many_claims_is_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = sqlite.open(tmp_path / "sessions.db")
    claims = [store.claim(f"r{i}", replica="me", lease=30 + i % 3) for i in range(300)]
    assert store.cancel("r2")
    store.delete("r0")
    monkeypatch.setattr(sqlite, "utcnow", lambda: utcnow() + datetime.timedelta(seconds=40))  # r1 stalls
    store.claim("r1", replica="other", lease=30)
    later = utcnow() + datetime.timedelta(seconds=1)
    monkeypatch.setattr(sqlite, "utcnow", lambda: later)
    statements: list[str] = []
    store._connection().set_trace_callback(statements.append)
    renewal = store.renew(claims)
    store._connection().set_trace_callback(None)
    assert [s for s in statements if s.split()[0] in {"BEGIN", "COMMIT", "ROLLBACK"}] == ["BEGIN IMMEDIATE", "COMMIT"]
    assert renewal.lost == {claims[0], claims[1]} and renewal.cancelling == {claims[2]}
    for claim in claims[2:]:
        assert store.info(claim.session_id).lease_expires_at == later + datetime.timedelta(seconds=claim.lease)
    statements.clear()
    store._connection().set_trace_callback(statements.append)
    assert store.renew([]) == Renewal() and statements == []


def _claim_in_step(path: str, name: str, barrier: Barrier, rounds: int, results: Queue[tuple[str, list[str]]]) -> None:
    store, outcomes = sqlite.open(path), []
    for n in range(rounds):
        barrier.wait(30)  # both processes leave the barrier together, then race for the same session
        try:
            store.claim(f"race{n}", replica=name, lease=600)
            outcomes.append("claimed")
        except agent.SessionBusyError:
            outcomes.append("busy")
    results.put((name, outcomes))


def test_two_processes_claiming_one_session_at_once_one_gets_busy(tmp_path: Path) -> None:
    path, rounds = str(tmp_path / "sessions.db"), 20
    sqlite.open(path)
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    processes = [context.Process(target=_claim_in_step, args=(path, name, barrier, rounds, results)) for name in "ab"]
    for process in processes:
        process.start()
    outcomes = dict(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(60)
    store = sqlite.open(path)
    for n in range(rounds):
        assert sorted([outcomes["a"][n], outcomes["b"][n]]) == ["busy", "claimed"]
        winner = "a" if outcomes["a"][n] == "claimed" else "b"
        assert store.info(f"race{n}").holder == winner


def _claim_and_leave(path: str, lease: float, claims: Queue[Claim]) -> None:
    claims.put(sqlite.open(path).claim("leased", replica="child", lease=lease))


def test_a_claims_lease_is_seen_by_another_process(tmp_path: Path) -> None:
    path, lease = str(tmp_path / "sessions.db"), 3.0
    store = sqlite.open(path)
    context = multiprocessing.get_context("spawn")
    claims: Queue[Claim] = context.Queue()
    child = context.Process(target=_claim_and_leave, args=(path, lease, claims))
    started = utcnow()
    child.start()
    theirs = claims.get(timeout=60)
    info = store.info("leased")
    assert info.holder == "child" and info.lease_expires_at is not None
    assert (
        started + datetime.timedelta(seconds=lease)
        <= info.lease_expires_at
        <= utcnow() + datetime.timedelta(seconds=lease)
    )
    if utcnow() < info.lease_expires_at:  # always, unless this machine stalled for the whole lease
        assert info.state is RunState.RUNNING
        with pytest.raises(agent.SessionBusyError, match="child"):
            store.claim("leased", replica="parent", lease=60)
    child.join(60)
    wait_for("the child's lease to lapse", lambda: store.info("leased").state is RunState.STALLED)
    mine = store.claim("leased", replica="parent", lease=60)
    assert mine.token > theirs.token
    with pytest.raises(agent.ConflictError):
        store.save_run(theirs, [agent.Message.user("too late")])
    assert store.renew([theirs, mine]).lost == {theirs}


# --- Failures ------------------------------------------------------------------------------


def test_a_commit_that_fails_is_rolled_back_and_the_next_call_works(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = sqlite.SQLiteStore(path, timeout=0.2)
    one, two, three = numbered_transcript(3)
    store.save("s", [one])
    # A file that cannot be kept in WAL mode runs with a rollback journal, where COMMIT waits for
    # every reader to leave the file: with one that stays past the timeout, COMMIT fails with
    # SQLITE_BUSY and, unlike a statement, leaves its transaction open.
    store._connection().execute("PRAGMA journal_mode = DELETE")
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as reader:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM agentsessions_messages").fetchall()
        with pytest.raises(agent.StoreError, match="could not save the transcript for session 's': database is locked"):
            store.save("s", [one, two])
        assert not store._connection().in_transaction
        reader.execute("COMMIT")
    assert sqlite.open(path).messages("s") == [one]  # the failed save left nothing
    store.save("s", [one, two, three])
    assert sqlite.open(path).messages("s") == [one, two, three]
