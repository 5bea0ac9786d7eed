"""The MongoDB store: the conformance suite, missing indexes, 16 MB limits, incremental saves, races, runs.

Against a SecantusDB server started in this process (a MongoDB wire-protocol server), or
the server at ``AGENTSESSIONS_TEST_MONGODB``. Each test uses a database of its own.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("pymongo", extra="mongodb")  # before the imports that need them

import contextlib
import datetime
import functools
import itertools
import statistics
import subprocess
import sys
import threading
import time
import timeit
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pymongo
import pytest
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.monitoring import CommandFailedEvent, CommandListener, CommandStartedEvent, CommandSucceededEvent

import agentsessions as agent
from agentsessions.codec import dump_message
from agentsessions.runs import Progress, Renewal
from agentsessions.stores import mongodb
from agentsessions.stores.kit.summary import fold_usage
from agentsessions.stores.mongodb import _layout
from agentsessions.testing import storetest
from tests.support.crossprocess import check_steers_across_processes
from tests.support.servers import MONGODB_URI, require_server
from tests.support.waiting import wait_for

pytestmark = pytest.mark.server  # a MongoDB wire-protocol server

Client = MongoClient[dict[str, Any]]

# SecantusDB's find_one_and_update scans the whole collection, and every example of the
# suite adds sessions, so the suite runs fewer examples here than its default of 50.
EXAMPLES = 25


def _connect(stack: contextlib.ExitStack, **options: Any) -> Client:
    uri = MONGODB_URI
    if not uri:
        from secantus import SecantusDBServer

        uri = stack.enter_context(SecantusDBServer(storage_path=":memory:", **options)).uri
    client: Client = stack.enter_context(MongoClient(uri, serverSelectionTimeoutMS=5000))
    client.admin.command("ping")
    return client


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with contextlib.ExitStack() as stack:
        yield require_server("MongoDB", functools.partial(_connect, stack))


def _create_indexes(database: Database[Any]) -> None:
    for name, models in mongodb.INDEXES.items():
        database[name].create_indexes(models)


@contextlib.contextmanager
def _scratch(client: Client, *, indexes: bool = True) -> Iterator[Database[Any]]:
    database: Database[Any] = client[f"agentsessions_test_{uuid.uuid4().hex[:12]}"]
    if indexes:
        _create_indexes(database)
    try:
        yield database
    finally:
        client.drop_database(database.name)


@pytest.fixture
def database(client: Client) -> Iterator[Database[Any]]:
    with _scratch(client) as database:
        yield database


def _transcript(n: int, tag: str = "") -> list[agent.Message]:
    return [agent.Message.user(f"{tag}message {i}") for i in range(n)]


@pytest.mark.parametrize("name", storetest.properties())
def test_the_mongodb_store_keeps_the_contract(name: str, database: Database[Any]) -> None:
    # A new store object each time, over the same database: the suite uses two as replicas.
    report = storetest.check(name, lambda: mongodb.MongoStore(database), max_examples=EXAMPLES)
    assert report.replicas and report.skipped == () and report.examples[name] > 0, report


def test_missing_indexes_raise_schema_missing_error_naming_indexes(client: Client) -> None:
    with _scratch(client, indexes=False) as database:
        store = mongodb.MongoStore(database)
        for call in (lambda: store.messages("s"), lambda: store.save("s", []), lambda: store.add_steer("s", "x")):
            with pytest.raises(agent.SchemaMissingError, match=r"agentsessions\.stores\.mongodb\.INDEXES"):
                call()
        _create_indexes(database)
        store.save("s", _transcript(2))  # the same store object checks again, and finds them
        assert store.messages("s") == _transcript(2)


def test_importing_without_pymongo_names_the_extra() -> None:
    probe = "import sys; sys.modules['pymongo'] = None; import agentsessions.stores.mongodb"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "pip install agentsessions[mongodb]" in result.stderr


def test_a_transcript_over_16_mb_round_trips(database: Database[Any]) -> None:
    big = [agent.Message.user(f"{i}: " + "é" * 500_000) for i in range(20)]  # 20 MB of UTF-8
    mongodb.MongoStore(database).save("big", big)
    assert mongodb.MongoStore(database).messages("big") == big


def test_a_single_17_mb_message_round_trips(database: Database[Any]) -> None:
    # 17 MB of UTF-8 in 10-byte runs, so the 15 MiB cut falls inside a character.
    text = "\x00\ud800" + "é€🙂a" * (17 * 1024 * 1024 // 10)
    transcript = [agent.Message.user("before"), agent.Message.assistant(text), agent.Message.user("after")]
    store = mongodb.MongoStore(database)
    store.save("huge", transcript)
    assert database[mongodb.MESSAGES].count_documents({"session_id": "huge", "position": 1}) == 2
    assert mongodb.MongoStore(database).messages("huge") == transcript
    store.save("huge", [*transcript, agent.Message.user("one more")])  # appends after a split message
    assert mongodb.MongoStore(database).messages("huge") == [*transcript, agent.Message.user("one more")]


class _Inserts(CommandListener):
    """Counts the message documents sent in insert commands, and every command by name."""

    def __init__(self) -> None:
        self.documents = 0
        self.commands: list[str] = []

    def started(self, event: CommandStartedEvent) -> None:
        self.commands.append(event.command_name)
        if event.command_name == "insert" and event.command["insert"] == mongodb.MESSAGES:
            self.documents += len(event.command["documents"])

    def succeeded(self, event: CommandSucceededEvent) -> None:
        pass

    def failed(self, event: CommandFailedEvent) -> None:
        pass


def test_a_save_inserts_only_the_new_messages(client: Client, database: Database[Any]) -> None:
    inserts = _Inserts()
    host, port = client.address or ("127.0.0.1", 27017)
    watched: Client
    with MongoClient(host, port, event_listeners=[inserts]) as watched:
        store = mongodb.MongoStore(watched[database.name])
        messages = _transcript(50)
        store.save("s", messages)
        assert inserts.documents == 50
        store.save("s", [*messages, agent.Message.assistant("one more")])
        assert inserts.documents == 51
        store.save("s", [*messages[:-1], agent.Message.user("changed"), agent.Message.assistant("one more")])
        assert inserts.documents == 53  # the changed message and the one after it
        store.save("s", messages[:10])
        assert inserts.documents == 53  # a cut writes nothing
        mongodb.MongoStore(database).save("s", messages[:3])  # another writer: the store notices
        store.save("s", messages[:4])
        assert inserts.documents == 54  # it reads the three stored, which stay, and adds the fourth
        assert mongodb.MongoStore(database).messages("s") == messages[:4]
    assert database[mongodb.MESSAGES].count_documents({"session_id": "s"}) == 4  # garbage is collected


def _race(database: Database[Any], candidates: list[list[agent.Message]], writers: int, seconds: float) -> set[int]:
    """Writers save the candidates in turn while readers check each read is one of them; the lengths seen."""
    allowed = {tuple(c) for c in candidates}
    seen: set[int] = set()
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(offset: int) -> None:
        store = mongodb.MongoStore(database)
        for transcript in itertools.islice(itertools.cycle(candidates), offset, None):
            if stop.is_set():
                return
            store.save("raced", transcript)

    def read() -> None:
        store = mongodb.MongoStore(database)
        while not stop.is_set():
            got = store.messages("raced")
            assert tuple(got) in allowed, f"a transcript of {len(got)} messages that was never saved"
            seen.add(len(got))

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as error:
            errors.append(error)
            stop.set()

    mongodb.MongoStore(database).save("raced", candidates[0])
    targets = [functools.partial(write, w) for w in range(writers)] + [read] * 3
    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(30)
    if errors:
        raise errors[0]
    return seen


def test_readers_never_see_a_mix_while_a_writer_alternates(database: Database[Any]) -> None:
    base = _transcript(30)
    candidates = [
        base,
        [*base, *_transcript(5, "more ")],  # an append
        [*base[:-1], agent.Message.user("a steer joined the last message")],  # a change at the end
        base[:10],  # a cut
        _transcript(25, "other "),  # a different transcript
    ]
    seen = _race(database, candidates, writers=1, seconds=3.0)
    assert len(seen) >= 2  # the readers did overlap the writer
    assert mongodb.MongoStore(database).messages("raced") in candidates


def test_writers_racing_on_one_session_leave_one_whole_transcript(database: Database[Any]) -> None:
    candidates = [_transcript(12, "first "), [*_transcript(12, "first "), *_transcript(3)], _transcript(7, "second ")]
    _race(database, candidates, writers=3, seconds=3.0)
    final = mongodb.MongoStore(database).messages("raced")
    assert final in candidates
    assert database[mongodb.MESSAGES].count_documents({"session_id": "raced"}) >= len(final)


def test_a_dead_writers_documents_do_not_block_the_next_save(database: Database[Any]) -> None:
    store = mongodb.MongoStore(database)
    store.save("s", _transcript(3))
    state = database[mongodb.SESSIONS].find_one({"_id": "s"})
    assert state is not None
    epoch = state["segments"][-1]["epoch"]
    # What a writer leaves when it dies between inserting an append and committing it.
    database[mongodb.MESSAGES].insert_one({"session_id": "s", "epoch": epoch, "position": 3, "body": "left behind"})
    assert mongodb.MongoStore(database).messages("s") == _transcript(3)
    store.save("s", _transcript(5))
    assert mongodb.MongoStore(database).messages("s") == _transcript(5)
    assert database[mongodb.MESSAGES].count_documents({"body": "left behind"}) == 0


def test_a_read_that_a_save_and_a_stale_writer_overtook_starts_over(database: Database[Any]) -> None:
    store = mongodb.MongoStore(database)
    store.save("s", _transcript(5))
    before = _layout.parse_state(database[mongodb.SESSIONS].find_one({"_id": "s"}))
    assert before is not None
    # A reader has read `before`. A save changes message 3, commits, and deletes the old 3 and 4...
    changed = [*_transcript(3), agent.Message.user("changed"), agent.Message.assistant("after")]
    store.save("s", changed)
    # ...then a writer that read `before` too puts other messages back under the old keys.
    epoch = before.segments[-1][0]
    for position in (3, 4):
        stale = {"session_id": "s", "epoch": epoch, "position": position, "body": dump_message(agent.Message.user("x"))}
        database[mongodb.MESSAGES].insert_one(stale)
    # Every message `before` names is there again, but they are not what was saved: start over.
    assert store._bodies("s", before) is None
    assert store.messages("s") == changed


def test_many_changes_keep_few_segments(database: Database[Any]) -> None:
    store = mongodb.MongoStore(database)
    transcript = _transcript(5)
    for step in range(40):  # a steer joins the last message, then the run goes on
        transcript = [*transcript[:-1], agent.Message.user(f"steered {step}"), agent.Message.assistant(f"{step}")]
        store.save("s", transcript)
    state = database[mongodb.SESSIONS].find_one({"_id": "s"})
    assert state is not None and len(state["segments"]) <= 16
    assert mongodb.MongoStore(database).messages("s") == transcript
    assert database[mongodb.MESSAGES].count_documents({"session_id": "s"}) == len(transcript)


def test_driver_errors_are_store_errors_naming_the_action_and_session() -> None:
    unreachable: Client = MongoClient("127.0.0.1", 9, serverSelectionTimeoutMS=200, connect=False)
    store = mongodb.MongoStore(unreachable["nowhere"], timeout=1.0)
    with pytest.raises(agent.StoreError, match=r"could not save the transcript for session 'lost'") as caught:
        store.save("lost", _transcript(1))
    assert isinstance(caught.value.__cause__, pymongo.errors.PyMongoError)
    with pytest.raises(agent.StoreError, match=r"could not take steers for session 'lost'"):
        store.take_steers("lost")


def test_a_standalone_server_is_enough() -> None:
    if MONGODB_URI:
        pytest.skip("starts its own standalone SecantusDB server")
    with contextlib.ExitStack() as stack:
        client = require_server("MongoDB", functools.partial(_connect, stack, replica_set_name=None))
        assert "setName" not in client.admin.command("hello")
        with _scratch(client) as database:
            store = mongodb.MongoStore(database)
            store.save("s", _transcript(3))
            store.save("s", [*_transcript(2), agent.Message.user("changed")])
            store.add_steer("s", "steer")
            assert mongodb.MongoStore(database).messages("s") == [*_transcript(2), agent.Message.user("changed")]
            assert store.take_steers("s") == ["steer"]
            # And a run, start to end: every call of a RunStore.
            claim = store.claim("s", replica="r", lease=30)
            assert store.add_steer("s", "during") is agent.RunState.RUNNING
            (steer,) = store.peek_steers("s")
            carried = [*_transcript(2), agent.Message.user("during")]
            assert store.save_run(claim, carried, taken=[steer.seq]) == Progress()
            assert store.renew([claim]) == Renewal()
            assert store.cancel("s")
            assert store.save_run(claim, carried, end=agent.RunState.CANCELLED) == Progress()
            assert [info.state for info in store.sessions()] == [agent.RunState.CANCELLED]
            store.fork("s", "f", at=2)  # the server copies with $merge, no transaction either
            assert mongodb.MongoStore(database).messages("f") == _transcript(2)
            assert store.info("f").state is agent.RunState.IDLE and store.messages("s") == carried
            assert store.delete("s") and store.info("s") == agent.SessionInfo("s")


def test_ids_with_lone_surrogates_are_kept_apart(database: Database[Any]) -> None:
    store = mongodb.MongoStore(database)
    ids = ["a\ud800", "a\udc00", "a", "a\x00"]
    for session_id in ids:
        store.save(session_id, [agent.Message.user(session_id)])
        store.add_steer(session_id, session_id)
    for session_id in ids:
        assert mongodb.MongoStore(database).messages(session_id) == [agent.Message.user(session_id)]
        assert store.take_steers(session_id) == [session_id]


@contextlib.contextmanager
def connected_store(uri: str, name: str) -> Iterator[mongodb.MongoStore]:
    """A store over a client of its own, as each replica process has."""
    client: Client = MongoClient(uri)
    with client:
        yield mongodb.MongoStore(client[name])


def test_processes_hand_each_steer_to_exactly_one_taker(client: Client, database: Database[Any]) -> None:
    host, port = client.address or ("127.0.0.1", 27017)
    uri = MONGODB_URI or f"mongodb://{host}:{port}/?directConnection=true"
    check_steers_across_processes(functools.partial(connected_store, uri, database.name))


@contextlib.contextmanager
def _watched(client: Client, database: Database[Any]) -> Iterator[tuple[mongodb.MongoStore, _Inserts]]:
    """A store over a client of its own whose commands are counted."""
    listener = _Inserts()
    host, port = client.address or ("127.0.0.1", 27017)
    watched: Client
    with MongoClient(host, port, event_listeners=[listener]) as watched:
        yield mongodb.MongoStore(watched[database.name]), listener


def test_renewing_many_claims_is_one_write_and_one_read(client: Client, database: Database[Any]) -> None:
    with _watched(client, database) as (store, commands):
        claims = [store.claim(f"s{i}", replica="r", lease=60) for i in range(40)]
        store.cancel("s1")
        lost = store.claim("gone", replica="r", lease=60)
        store.delete("gone")
        taken_over = store.claim("over", replica="r", lease=0.001)
        wait_for("the short lease to run out", lambda: store.info("over").state is agent.RunState.STALLED)
        store.claim("over", replica="other", lease=60)
        commands.commands.clear()
        renewal = store.renew([*claims, lost, taken_over])
        assert commands.commands == ["update", "find"]
        assert renewal == Renewal(lost=frozenset({lost, taken_over}), cancelling=frozenset({claims[1]}))
        commands.commands.clear()
        assert store.renew([]) == Renewal() and commands.commands == []


def test_a_steer_past_the_document_limit_is_a_store_error_that_changes_nothing(database: Database[Any]) -> None:
    store = mongodb.MongoStore(database)
    store.add_steer("s", "small")
    before = database[mongodb.SESSIONS].find_one({"_id": "s"})
    with pytest.raises(agent.StoreError, match="16 MB") as caught:
        store.add_steer("s", "x" * 20_000_000)
    assert not isinstance(caught.value, agent.ConflictError)
    assert database[mongodb.SESSIONS].find_one({"_id": "s"}) == before  # the counter did not move
    assert store.add_steer("s", "next") is agent.RunState.IDLE
    assert [(steer.seq, steer.text) for steer in store.peek_steers("s")] == [(1, "small"), (2, "next")]
    # Steers that fit one by one but not together: refused when the waiting ones would pass 15 MiB.
    chunk = "é" * (2 * 1024 * 1024)  # 4 MiB of UTF-8
    for _ in range(3):
        store.add_steer("s", chunk)
    with pytest.raises(agent.StoreError, match="16 MB"):
        store.add_steer("s", chunk)
    assert len(store.peek_steers("s")) == 5
    assert len(store.take_steers("s")) == 5
    assert store.add_steer("s", chunk) is agent.RunState.IDLE  # taking made room again
    claim = store.claim("s", replica="r", lease=60)
    (steer,) = store.peek_steers("s")
    store.save_run(claim, [agent.Message.user(steer.text)], taken=[steer.seq])  # so does a run's save
    for _ in range(3):
        store.add_steer("s", chunk)


def test_listing_pages_through_sessions_that_share_one_updated_at(
    database: Database[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mongodb, "PAGE_SIZE", 3)
    store = mongodb.MongoStore(database)
    # Byte order of the ids, across the str and Binary keys and across lengths.
    ids = ["b", "aa", "a", "a\x00", "a\ud800", "\ud800", "é", "ab", "a\uffff", "z" * 255]
    for session_id in ids:
        store.save(session_id, [])
    never = ["n1", "n2", "n3", "n4"]
    for session_id in never:
        store.add_steer(session_id, "steer")
    database[mongodb.SESSIONS].update_many({"updated_at": {"$ne": None}}, {"$set": {"updated_at": 10**15}})
    store.save("newest", [])
    store.save("oldest", [])
    database[mongodb.SESSIONS].update_one({"_id": "oldest"}, {"$set": {"updated_at": 10**15 - 1}})
    by_bytes = sorted(ids, key=lambda i: i.encode("utf-8", "surrogatepass"), reverse=True)
    listed = [info.id for info in store.sessions()]
    assert listed == ["newest", *by_bytes, "oldest", *sorted(never, reverse=True)]
    at = store.info("a").updated_at
    assert at is not None
    assert [info.id for info in store.sessions(updated_before=at)] == ["oldest"]
    idle = [info.id for info in store.sessions(state=agent.RunState.IDLE, updated_before=at + datetime.timedelta(1))]
    assert idle == [*by_bytes, "oldest"]


def test_a_run_that_lost_its_claim_writes_nothing(database: Database[Any]) -> None:
    store = mongodb.MongoStore(database)
    store.save("s", _transcript(2))
    old = store.claim("s", replica="old", lease=0.001)
    store.add_steer("s", "pending")
    (steer,) = store.peek_steers("s")
    wait_for("the lease to run out", lambda: store.info("s").state is agent.RunState.STALLED)
    new = store.claim("s", replica="new", lease=60)
    assert new.token > old.token
    with pytest.raises(agent.ConflictError):
        store.save_run(old, _transcript(5), taken=[steer.seq], end=agent.RunState.FINISHED)
    assert store.messages("s") == _transcript(2) and store.peek_steers("s") == [steer]
    assert database[mongodb.MESSAGES].count_documents({"session_id": "s"}) == 2
    info = store.info("s")
    assert (info.state, info.holder, info.length, info.pending_steers) == (agent.RunState.RUNNING, "new", 2, 1)
    with pytest.raises(agent.SessionBusyError, match="'new'"):
        store.claim("s", replica="third", lease=60)


class _AfterFirstRead(CommandListener):
    """While armed, calls ``then`` once, after the next read of a session document."""

    def __init__(self, then: Callable[[], object]) -> None:
        self.then, self.armed = then, False

    def started(self, event: CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: CommandSucceededEvent) -> None:
        if self.armed and event.command_name == "find":
            self.armed = False
            self.then()

    def failed(self, event: CommandFailedEvent) -> None:
        pass


def test_usage_is_folded_into_the_text_read_and_a_change_since_the_read_starts_over(
    client: Client, database: Database[Any]
) -> None:
    sessions = database[mongodb.SESSIONS]
    earlier = ""  # an earlier run's figures, written meanwhile
    listener = _AfterFirstRead(lambda: sessions.update_one({"_id": "s"}, {"$set": {"usage": earlier}}))
    host, port = client.address or ("127.0.0.1", 27017)
    watched: Client
    with MongoClient(host, port, event_listeners=[listener]) as watched:
        store = mongodb.MongoStore(watched[database.name])
        claim = store.claim("s", replica="r", lease=60)
        store.save_run(claim, _transcript(1), usage=agent.Usage(1, 2, 3, 4))
        assert _usage_text(sessions) == fold_usage(None, claim.token, agent.Usage(1, 2, 3, 4))
        earlier = fold_usage(None, claim.token - 1, agent.Usage(100, 200, 300, 400))
        listener.armed = True
        store.save_run(claim, _transcript(2), usage=agent.Usage(5, 6, 7, 8))
        assert not listener.armed  # the text changed after the save read it: its commit failed, and it read again
    assert _usage_text(sessions) == fold_usage(earlier, claim.token, agent.Usage(5, 6, 7, 8))
    assert mongodb.MongoStore(database).info("s").usage == agent.Usage(105, 206, 307, 408)


def test_a_stored_usage_this_version_cannot_read_is_a_format_error_and_nothing_is_written(
    database: Database[Any],
) -> None:
    store, sessions = mongodb.MongoStore(database), database[mongodb.SESSIONS]
    claim = store.claim("s", replica="r", lease=60)
    store.save_run(claim, _transcript(1), usage=agent.Usage(1))
    sessions.update_one({"_id": "s"}, {"$set": {"usage": '{"token":1}'}})
    with pytest.raises(agent.FormatError, match="stored usage is not one this version reads"):
        store.save_run(claim, _transcript(3), usage=agent.Usage(2))
    assert store.messages("s") == _transcript(1) and _usage_text(sessions) == '{"token":1}'
    store.save_run(claim, _transcript(3))  # without usage, the text is only read
    assert store.messages("s") == _transcript(3)


def _usage_text(sessions: pymongo.collection.Collection[dict[str, Any]]) -> object:
    doc = sessions.find_one({"_id": "s"}, {"usage": 1})
    return None if doc is None else doc.get("usage")


def test_a_preview_with_lone_surrogates_round_trips(database: Database[Any]) -> None:
    store = mongodb.MongoStore(database)
    store.save("s", [agent.Message.user("a\ud800b")])
    store.fork("s", "fork")
    reader = mongodb.MongoStore(database)
    assert [reader.info(i).preview for i in ("s", "fork")] == ["a\ud800b"] * 2
    assert [info.preview for info in reader.sessions()] == ["a\ud800b"] * 2


def test_a_fork_reads_back_past_messages_without_text_for_its_preview(database: Database[Any]) -> None:
    store = mongodb.MongoStore(database)
    said = agent.Message.assistant("the last words " * 20)
    quiet = [agent.Message.user(agent.Content.tool_result(f"t{i}", "a result is not text")) for i in range(40)]
    store.save("quiet", [agent.Message.user("first"), said, *quiet])
    for fork, at, preview in [("all", None, said.text[:200]), ("some", 30, said.text[:200]), ("first", 1, "first")]:
        store.fork("quiet", fork, at=at)
        assert store.info(fork).preview == preview
    store.fork("quiet", "none", at=0)
    assert store.info("none").preview == ""


class _SteerAfterEachRead(CommandListener):
    """While armed, adds a steer (through ``steer``) after every read of a session document: steady steering."""

    def __init__(self, steer: Callable[[int], object]) -> None:
        self.steer, self.armed, self.added = steer, False, 0

    def started(self, event: CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: CommandSucceededEvent) -> None:
        if self.armed and event.command_name == "find":
            self.added += 1
            self.steer(self.added)

    def failed(self, event: CommandFailedEvent) -> None:
        pass


def test_a_release_under_steady_steering_reports_the_steers_instead_of_retrying_until_the_timeout(
    client: Client, database: Database[Any]
) -> None:
    other = mongodb.MongoStore(database)
    listener = _SteerAfterEachRead(lambda n: other.add_steer("steady", f"steer {n}"))
    host, port = client.address or ("127.0.0.1", 27017)
    watched: Client
    with MongoClient(host, port, event_listeners=[listener]) as watched:
        store = mongodb.MongoStore(watched[database.name], timeout=3.0)  # the defect retried until this, then failed
        claim = store.claim("steady", replica="r", lease=60)
        listener.armed = True  # from now on a steer lands between every read and the write that follows it
        progress = store.save_run(claim, _transcript(2), end=agent.RunState.FINISHED, unless_steered=True)
        listener.armed = False
    # The release lost once to the steer after its read; the next attempt reported what it read.
    assert [steer.text for steer in progress.pending] == ["steer 1"], progress
    info = other.info("steady")
    assert (info.state, info.length, info.pending_steers) == (agent.RunState.RUNNING, 2, listener.added)
    taken = [steer.seq for steer in other.peek_steers("steady")]
    other.save_run(claim, _transcript(3), taken=taken, end=agent.RunState.FINISHED)
    assert other.info("steady").state is agent.RunState.FINISHED


# --- Fork: the server copies under a fresh epoch, the new session document commits ---------


class _OnAggregate(CommandListener):
    """Calls ``then`` once, when the store's first aggregate (a fork's copy) has succeeded; keeps their $match."""

    def __init__(self, then: Callable[[], object]) -> None:
        self.then: Callable[[], object] | None = then
        self.aggregates = 0
        self.matches: list[dict[str, Any]] = []

    def started(self, event: CommandStartedEvent) -> None:
        if event.command_name == "aggregate":
            self.matches.append(event.command["pipeline"][0]["$match"])

    def succeeded(self, event: CommandSucceededEvent) -> None:
        if event.command_name == "aggregate":
            self.aggregates += 1
            then, self.then = self.then, None
            if then is not None:
                then()

    def failed(self, event: CommandFailedEvent) -> None:
        pass


@contextlib.contextmanager
def _forking(client: Client, database: Database[Any], listener: CommandListener) -> Iterator[mongodb.MongoStore]:
    """A store over a client of its own that calls ``listener`` on each of its commands."""
    host, port = client.address or ("127.0.0.1", 27017)
    watched: Client
    with MongoClient(host, port, event_listeners=[listener]) as watched:
        yield mongodb.MongoStore(watched[database.name])


def _copies(database: Database[Any], session_id: str) -> int:
    return database[mongodb.MESSAGES].count_documents({"session_id": session_id})


def test_a_fork_sends_no_message_through_the_client(client: Client, database: Database[Any]) -> None:
    mongodb.MongoStore(database).save("source", _transcript(30))
    with _watched(client, database) as (store, commands):
        store.info("source")  # the first call checks the indexes
        commands.commands.clear()
        store.fork("source", "fork", at=20)
        # Read the source and look for the target; copy (one segment); read the source again;
        # read the copies back from the last for the preview (one batch); commit.
        assert commands.commands == ["find", "find", "aggregate", "find", "find", "insert"]
        assert commands.documents == 0  # no message document was inserted from here
    assert mongodb.MongoStore(database).messages("fork") == _transcript(20)
    assert mongodb.MongoStore(database).info("fork").preview == "message 19"
    assert _copies(database, "fork") == 20


def test_a_fork_copies_every_chunk_of_a_split_message(database: Database[Any]) -> None:
    text = "é€🙂a" * (16 * 1024 * 1024 // 10)  # 16 MB of UTF-8: two chunks
    transcript = [agent.Message.user("before"), agent.Message.assistant(text), agent.Message.user("after")]
    store = mongodb.MongoStore(database)
    store.save("huge", transcript)
    store.save("huge", [*transcript[:2], agent.Message.user("changed")])  # a second segment, after the split one
    store.fork("huge", "whole")
    store.fork("huge", "split", at=2)
    store.fork("huge", "before", at=1)
    reader = mongodb.MongoStore(database)
    assert reader.messages("whole") == [*transcript[:2], agent.Message.user("changed")]
    assert reader.messages("split") == transcript[:2]
    assert reader.messages("before") == transcript[:1]
    assert database[mongodb.MESSAGES].count_documents({"session_id": "split", "position": 1}) == 2
    assert (_copies(database, "whole"), _copies(database, "split"), _copies(database, "before")) == (4, 3, 1)
    previews = [reader.info(fork).preview for fork in ("whole", "split", "before")]
    assert previews == ["changed", text[:200], "before"]  # the split message's pieces read back joined
    store.save("split", [*transcript[:2], agent.Message.user("on the fork")])  # a fork saves like any session
    assert reader.messages("split") == [*transcript[:2], agent.Message.user("on the fork")]
    assert reader.messages("huge") == [*transcript[:2], agent.Message.user("changed")]


def test_a_fork_into_an_existing_id_raises_conflict_and_changes_nothing(database: Database[Any]) -> None:
    store = mongodb.MongoStore(database)
    store.save("source", _transcript(5))
    store.save("saved", _transcript(1, "mine "))
    store.add_steer("steered", "only a steer: a document with no transcript")
    store.claim("held", replica="r", lease=60)
    sessions, messages = database[mongodb.SESSIONS], database[mongodb.MESSAGES]
    for taken in ["saved", "steered", "held", "source"]:
        before = (sessions.find_one({"_id": taken}), messages.count_documents({}))
        with pytest.raises(agent.ConflictError, match=f"cannot fork into session '{taken}': it exists"):
            store.fork("source", taken)
        assert (sessions.find_one({"_id": taken}), messages.count_documents({})) == before
    assert store.take_steers("steered") == ["only a steer: a document with no transcript"]
    assert store.messages("saved") == _transcript(1, "mine ") and store.messages("source") == _transcript(5)


def test_a_target_created_while_the_fork_copies_is_a_conflict_and_the_copies_go(
    client: Client, database: Database[Any]
) -> None:
    other = mongodb.MongoStore(database)
    other.save("source", _transcript(5))
    # The steer arrives after the fork found no document under its target, before it commits.
    listener = _OnAggregate(lambda: other.add_steer("target", "first"))
    conflict = pytest.raises(agent.ConflictError, match="cannot fork into session 'target': it exists")
    with _forking(client, database, listener) as store, conflict:
        store.fork("source", "target")
    assert listener.aggregates == 1  # it had copied
    assert _copies(database, "target") == 0  # and removed its copies
    assert other.take_steers("target") == ["first"] and other.messages("target") == []
    assert other.info("target").length == 0


@pytest.mark.parametrize("at", [None, 3])
def test_a_fork_that_loses_a_race_with_a_save_of_its_source_starts_over(
    client: Client, database: Database[Any], at: int | None
) -> None:
    old = _transcript(5)
    new = [*old[:1], agent.Message.user("changed"), *_transcript(6, "new ")]
    other = mongodb.MongoStore(database)
    other.save("source", old)
    # A save of the source commits after the fork copied, before it commits: the copy is of
    # a version no longer stored, and the save deletes what the fork read.
    listener = _OnAggregate(lambda: other.save("source", new))
    with _forking(client, database, listener) as store:
        store.fork("source", "fork", at=at)
    assert other.messages("fork") == new[:at]
    assert _copies(database, "fork") == len(new[:at])  # the outdated copies are gone
    # It copied again only from the changed message on: the first copy of message 0 stays right.
    first, again = {"$gte": 0, "$lt": len(old[:at])}, {"$gte": 1, "$lt": len(new[:at])}
    assert [match["position"] for match in listener.matches] == [first, again]


def test_forks_racing_saves_of_their_source_copy_a_prefix_of_one_saved_version(database: Database[Any]) -> None:
    shared = _transcript(60, "shared ")
    versions = [[*shared, *_transcript(40, "a ")], [*shared, *_transcript(20, "b ")]]
    store = mongodb.MongoStore(database)
    store.save("churned", versions[0])
    done = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        saver = mongodb.MongoStore(database)
        try:
            for n in itertools.count(1):
                # A run saves between turns, not back to back: a fork of the whole transcript
                # must find one quiet moment as long as its copy takes (0.05 s was shorter than
                # a 100-message copy on a loaded 2-core CI machine, and the fork timed out).
                if done.wait(0.2):
                    return
                saver.save("churned", versions[n % 2])
        except BaseException as error:
            errors.append(error)

    saver = threading.Thread(target=churn)
    saver.start()
    forked: list[tuple[int | None, list[agent.Message]]] = []
    try:
        for n in range(12):
            at = None if n % 2 else 50
            store.fork("churned", f"churned-{n}", at=at)
            forked.append((at, store.messages(f"churned-{n}")))
    finally:
        done.set()
        saver.join(30)
    assert not errors
    for at, messages in forked:
        assert any(messages == version[:at] for version in versions), f"a fork at {at} is a prefix of no saved version"
    assert {len(messages) for at, messages in forked if at is None} <= {80, 100}


def _median_seconds(call: Callable[[], object], times: int) -> float:
    return statistics.median(timeit.repeat(call, number=1, repeat=times))


def test_a_fork_of_2000_messages_beside_a_save_run_of_one(database: Database[Any]) -> None:
    # SecantusDB's figures, not MongoDB's: printed for the record, not compared with a bound.
    big = [agent.Message.user(f"{i}:" + "x" * 1000) for i in range(2000)]  # 2 MB of transcript
    store = mongodb.MongoStore(database)
    store.save("big", big)
    claim, serial = store.claim("run", replica="r", lease=60), itertools.count()
    transcript: list[agent.Message] = []

    def save_one() -> None:
        transcript.append(agent.Message.user(f"m{len(transcript)}"))
        store.save_run(claim, transcript)

    figures = {
        "save_run of one new message": _median_seconds(save_one, 30),
        "fork of 2,000 messages": _median_seconds(lambda: store.fork("big", f"big-{next(serial)}"), 5),
        "save of the 2,000 from Python": _median_seconds(lambda: store.save(f"big-{next(serial)}", big), 3),
    }
    print("SecantusDB:", {what: f"{seconds * 1000:.1f} ms" for what, seconds in figures.items()})
    assert mongodb.MongoStore(database).messages("big-0") == big
    assert store.messages("run") == transcript
