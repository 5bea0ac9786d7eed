"""The PostgreSQL store: the conformance suite, a missing schema, incremental saves,
parallel sessions, a connection killed mid-save, steers taken from several processes,
renewal in one statement, tokens across delete, forks copied by the server in one
statement (a prefix's preview read back from its last rows), and calls bounded in time
(a lock held elsewhere, a server that stops answering, the pool's check of a connection
that stopped answering).

Each run works in a schema of its own (``agentsessions_test_<random>``), dropped at the end.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("psycopg", "psycopg_pool", extra="postgres")  # before the imports that need them

import contextlib
import functools
import itertools
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import agentsessions as agent
from agentsessions.codec import encode_text
from agentsessions.runs import Renewal
from agentsessions.stores import postgres
from agentsessions.testing import storetest
from tests.support.backends import postgres_url
from tests.support.crossprocess import check_steers_across_processes
from tests.support.proxy import Proxy, proxied
from tests.support.replicas import check_replicas_notice_each_other, numbered_transcript
from tests.support.servers import POSTGRES_DSN, require_server
from tests.support.waiting import wait_for

pytestmark = pytest.mark.server  # PostgreSQL

# What a bounded call may take beyond its timeout on a loaded machine: the bound is the
# behaviour under test (an answer within the store's timeout), the slack is scheduling.
SLACK = 1.5
Pool = ConnectionPool[Any]


def _admin() -> Any:
    return psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5)


def make_pool(
    schema: str,
    max_size: int = 10,
    check: Callable[[Any], None] | None = None,
    min_size: int = 1,
    dsn: str = POSTGRES_DSN,
    **settings: Any,
) -> Pool:
    """A pool whose connections work in ``schema``, set up as the store's docstring asks (no ``check``)."""
    kwargs = {
        "options": f"-c search_path={schema}",
        "connect_timeout": 5,
        "tcp_user_timeout": 10_000,
        "keepalives_idle": 30,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        **settings,
    }
    return ConnectionPool(
        dsn,
        kwargs=kwargs,
        min_size=min_size,
        max_size=max_size,
        check=check,
        open=True,
    )


@pytest.fixture(scope="module")
def admin() -> Iterator[Any]:
    """An autocommit connection outside the store, to create schemas and watch and kill backends."""
    with require_server("PostgreSQL", _admin) as connection:
        yield connection


@pytest.fixture(scope="module")
def schema(admin: Any) -> Iterator[str]:
    """A fresh schema with the store's tables, dropped when the module is done."""
    name = f"agentsessions_test_{secrets.token_hex(4)}"
    admin.execute(f"CREATE SCHEMA {name}")
    try:
        with make_pool(name, max_size=1) as pool, pool.connection() as conn:
            conn.execute(postgres.SCHEMA)  # what the user's migration does
        yield name
    finally:
        admin.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture(scope="module")
def pool(schema: str) -> Iterator[Pool]:
    """The pool the store borrows from."""
    with make_pool(schema) as pool:
        yield pool


@pytest.fixture
def store(pool: Pool) -> postgres.PostgresStore:
    """A store over the module's pool."""
    return postgres.PostgresStore(pool)


@pytest.mark.parametrize("name", storetest.properties())
def test_the_postgres_store_keeps_the_contract(name: str, store: postgres.PostgresStore) -> None:
    # A new store object per call, over the same pool: the suite uses two as replicas.
    report = storetest.check(name, lambda: postgres.PostgresStore(store.pool))
    assert report.replicas and report.skipped == () and report.examples[name] > 0, report


def test_an_empty_schema_raises_schema_missing_naming_the_schema_to_run(admin: Any) -> None:
    empty = f"agentsessions_test_{secrets.token_hex(4)}"
    admin.execute(f"CREATE SCHEMA {empty}")
    try:
        with make_pool(empty, max_size=1) as pool:
            store = postgres.PostgresStore(pool)
            calls: list[Callable[[], object]] = [
                lambda: store.save("s", [agent.Message.user("hi")]),
                lambda: store.messages("s"),
                lambda: store.add_steer("s", "steer"),
                lambda: store.take_steers("s"),
            ]
            for call in calls:
                with pytest.raises(
                    agent.SchemaMissingError, match=r"agentsessions\.stores\.postgres\.SCHEMA"
                ) as caught:
                    call()
                assert isinstance(caught.value.__cause__, psycopg.errors.UndefinedTable)
                assert "'s'" in str(caught.value)
    finally:
        admin.execute(f"DROP SCHEMA {empty} CASCADE")


def _row_versions(admin: Any, schema: str, session_id: str) -> dict[int, str]:
    rows = admin.execute(
        f"SELECT position, xmin::text FROM {schema}.agentsessions_messages WHERE session_id = %s",
        (encode_text(session_id),),
    ).fetchall()
    return dict(rows)


def test_a_save_writes_only_the_new_messages(store: postgres.PostgresStore, admin: Any, schema: str) -> None:
    messages = numbered_transcript(50)
    store.save("incremental", messages)
    before = _row_versions(admin, schema, "incremental")
    store.save("incremental", [*messages, agent.Message.user("one more")])
    after = _row_versions(admin, schema, "incremental")
    assert {p for p in after if before.get(p) != after[p]} == {50}  # xmin changes only for rows written
    check_replicas_notice_each_other(store, lambda: postgres.PostgresStore(store.pool), "incremental", messages)


def test_eight_sessions_on_eight_threads_save_at_the_same_time(
    store: postgres.PostgresStore, admin: Any, schema: str
) -> None:
    ids = [f"parallel-{i}" for i in range(8)]
    for session_id in ids:
        store.save(session_id, numbered_transcript(2))
    # Hold all eight session records: each save then waits inside the database, so all
    # eight are seen waiting at once only if nothing in the store makes them queue.
    with psycopg.connect(POSTGRES_DSN, options=f"-c search_path={schema}") as blocker:
        blocker.execute(
            "SELECT 1 FROM agentsessions_sessions WHERE id = ANY(%s) FOR UPDATE", ([encode_text(i) for i in ids],)
        )
        blocker_pid = blocker.info.backend_pid
        errors: list[BaseException] = []

        def save(session_id: str) -> None:
            try:
                store.save(session_id, numbered_transcript(6, tag=session_id))
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=save, args=(i,)) for i in ids]
        for thread in threads:
            thread.start()
        blocked = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        wait_for("eight saves waiting at once", lambda: admin.execute(blocked, (blocker_pid,)).fetchone()[0] == 8)
        blocker.rollback()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert all(store.messages(i) == numbered_transcript(6, tag=i) for i in ids)


def test_a_connection_killed_mid_save_leaves_the_oldnumbered_transcript(
    store: postgres.PostgresStore, admin: Any, schema: str
) -> None:
    old = numbered_transcript(3)
    store.save("killed", old)
    with psycopg.connect(POSTGRES_DSN, options=f"-c search_path={schema}") as blocker:
        # An uncommitted row where the save will insert message 5: it writes messages 3
        # and 4 in its transaction, then waits there, and is killed.
        insert = "INSERT INTO agentsessions_messages (session_id, position, body) VALUES (%s, 5, '{}')"
        blocker.execute(insert, (encode_text("killed"),))
        caught: list[BaseException] = []

        def save() -> None:
            try:
                store.save("killed", numbered_transcript(8))
            except BaseException as error:
                caught.append(error)

        thread = threading.Thread(target=save)
        thread.start()
        query = "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        row = wait_for("the save to wait", lambda: admin.execute(query, (blocker.info.backend_pid,)).fetchone())
        admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        thread.join(30)
        blocker.rollback()
    assert len(caught) == 1 and type(caught[0]) is agent.StoreError, caught
    assert "could not save the transcript for session 'killed'" in str(caught[0])
    assert isinstance(caught[0].__cause__, psycopg.OperationalError)
    assert store.messages("killed") == old
    store.save("killed", numbered_transcript(8))  # the pool replaced the dead connection
    assert postgres.PostgresStore(store.pool).messages("killed") == numbered_transcript(8)


@contextlib.contextmanager
def pooled_store(schema: str) -> Iterator[postgres.PostgresStore]:
    """A store over a small pool of its own, as each replica process has."""
    with make_pool(schema, max_size=2) as pool:
        yield postgres.PostgresStore(pool)


def test_processes_hand_each_steer_to_exactly_one_taker(schema: str) -> None:
    check_steers_across_processes(functools.partial(pooled_store, schema))


def test_importing_without_psycopg_names_the_extra() -> None:
    code = "import sys; sys.modules['psycopg'] = None; import agentsessions.stores.postgres"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "ImportError: agentsessions.stores.postgres needs psycopg" in done.stderr
    assert "pip install agentsessions[postgres]" in done.stderr


def _backend_pid(pool: Pool) -> int:
    with pool.connection() as conn:
        pid: int = conn.info.backend_pid
    return pid


def _require_local(pid: int) -> None:
    """Skip unless backend ``pid`` is a process of this machine that this test may signal."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        pytest.skip(
            f"PostgreSQL's backend {pid} is not a process this test can signal (the server is not local, "
            "or runs as another user): this test stops it with SIGSTOP"
        )


@contextlib.contextmanager
def _record_locked(schema: str, session_id: str) -> Iterator[int]:
    """Hold the session's record locked from another connection; yields that backend's pid."""
    with psycopg.connect(POSTGRES_DSN, options=f"-c search_path={schema}") as blocker:
        found = blocker.execute(
            "SELECT 1 FROM agentsessions_sessions WHERE id = %s FOR UPDATE", (encode_text(session_id),)
        ).fetchone()
        assert found
        yield blocker.info.backend_pid
        blocker.rollback()


def test_a_lock_held_elsewhere_ends_in_the_servers_own_error_and_the_connection_lives_on(schema: str) -> None:
    with make_pool(schema, max_size=1) as pool:
        store = postgres.PostgresStore(pool, timeout=1.0)
        store.save("locked", numbered_transcript(2))
        pid = _backend_pid(pool)
        with _record_locked(schema, "locked"):
            started = time.monotonic()
            with pytest.raises(agent.StoreError, match=r"could not claim for session 'locked'.*lock timeout") as caught:
                store.claim("locked", replica="r", lease=30)
            elapsed = time.monotonic() - started
        assert isinstance(caught.value.__cause__, psycopg.errors.LockNotAvailable)
        assert 0.8 < elapsed < 1.0 + SLACK, elapsed  # 85% of the timeout, timed by the server
        assert store.claim("locked", replica="r", lease=30).token > 0
        assert _backend_pid(pool) == pid  # the same connection: nothing was cut


def test_a_server_that_stops_answering_gives_a_store_error_within_the_timeout(schema: str, admin: Any) -> None:
    with make_pool(schema, max_size=1) as pool:
        store = postgres.PostgresStore(pool, timeout=2.0)
        store.save("stalled", numbered_transcript(2))
        pid = _backend_pid(pool)
        caught: list[BaseException] = []
        finished = threading.Event()

        def claim() -> None:
            try:
                store.claim("stalled", replica="r", lease=30)
            except BaseException as error:
                caught.append(error)
            finished.set()

        with _record_locked(schema, "stalled"):
            thread = threading.Thread(target=claim)
            started = time.monotonic()
            thread.start()
            waiting = "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'"
            wait_for("the claim to wait for the lock", lambda: admin.execute(waiting, (pid,)).fetchone())
            # Stopped, the backend can neither time its lock wait out nor answer: to the store
            # it is a server that stopped answering, with the TCP connection still up.
            _require_local(pid)
            os.kill(pid, signal.SIGSTOP)
            try:
                finished.wait(10)
                elapsed = time.monotonic() - started
            finally:
                os.kill(pid, signal.SIGCONT)
        thread.join(10)
        assert len(caught) == 1 and type(caught[0]) is agent.StoreError, caught
        assert "no answer from PostgreSQL within the store's timeout of 2 s" in str(caught[0])
        assert isinstance(caught[0].__cause__, psycopg.OperationalError)
        assert elapsed < 2.0 + SLACK, elapsed
        # The pool dropped the cut connection; the next call gets a new one and works.
        assert store.claim("stalled", replica="r", lease=30).token > 0
        assert _backend_pid(pool) != pid


def _traced(pool: Pool, call: Callable[[], object]) -> list[list[str]]:
    """The protocol messages ``call`` exchanged on the pool's one connection (libpq's trace)."""
    with tempfile.TemporaryFile("w+") as trace:
        with pool.connection() as conn:
            conn.pgconn.trace(trace.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        try:
            call()
        finally:
            conn.pgconn.untrace()  # the pool's one connection, idle in the pool again: no I/O here
        trace.seek(0)
        # A message is one line, except that a statement's text keeps its own newlines.
        return [message.split("\t", 3) for message in re.split(r"\n(?=[FB]\t)", trace.read().strip())]


def _round_trips(messages: list[list[str]]) -> int:
    """How many times the client sent and then waited for the server.

    The client waits after a message that asks for an answer (Sync, Flush, a simple Query). While it
    sends a large pipeline, libpq may read what the server already answered (it does when its send
    buffer is full, under load), so the server's messages can appear among the client's without a wait.
    """
    return sum(1 for sent, got in itertools.pairwise(messages) if sent[0] == "F" and sent[2] in _ASKS and got[0] == "B")


_ASKS = frozenset({"Sync", "Flush", "Query"})


def test_renewing_a_thousand_claims_is_one_statement_in_one_round_trip(schema: str) -> None:
    # prepare_threshold=None: every statement travels with its text, so the trace names it.
    with make_pool(schema, max_size=1, prepare_threshold=None) as pool:
        store = postgres.PostgresStore(pool)
        claims = [store.claim(f"renew-{i}", replica="r", lease=30) for i in range(1000)]
        lost = store.claim("renew-lost", replica="r", lease=30)
        store.save_run(lost, [], end=agent.RunState.FINISHED)
        store.cancel("renew-7")
        before = {c.session_id: store.info(c.session_id).lease_expires_at for c in claims[:3]}
        renewal: list[Renewal] = []
        messages = _traced(pool, lambda: renewal.append(store.renew([*claims, lost])))
        assert renewal == [Renewal(frozenset({lost}), frozenset({claims[7]}))]
        statements = [m[3] for m in messages if m[0] == "F" and m[2] in {"Parse", "Query"}]
        assert "BEGIN" in statements[0]  # no check before it: borrowing a connection sends nothing
        touching = [s for s in statements if "agentsessions_" in s]
        assert len(touching) == 1 and re.match(r' "" "\s*UPDATE agentsessions_sessions .* unnest', touching[0], re.S)
        assert [m[2] for m in messages if m[0] == "F"].count("Execute") == 4  # BEGIN, limits, UPDATE, COMMIT
        assert _round_trips(messages) == 1  # the whole transaction: borrowing the connection sends nothing
        after = {c.session_id: store.info(c.session_id).lease_expires_at for c in claims[:3]}
        assert all(after[i] > before[i] for i in before)  # type: ignore[operator]


def test_renewing_one_claim_is_one_round_trip(schema: str) -> None:
    with make_pool(schema, max_size=1, prepare_threshold=None) as pool:
        store = postgres.PostgresStore(pool)
        claim = store.claim("renew-one", replica="r", lease=30)
        renewal: list[Renewal] = []
        messages = _traced(pool, lambda: renewal.append(store.renew([claim])))
        assert renewal == [Renewal()]
        assert _round_trips(messages) == 1  # the whole transaction: borrowing the connection sends nothing
        store.cancel("renew-one")
        assert store.renew([claim]) == Renewal(frozenset(), frozenset({claim}))
        store.save_run(claim, [], end=agent.RunState.FINISHED)
        assert store.renew([claim]) == Renewal(frozenset({claim}), frozenset())


def test_a_save_of_what_the_store_saw_last_is_one_round_trip_and_after_another_writer_three(schema: str) -> None:
    with make_pool(schema, max_size=1, prepare_threshold=None) as pool:
        store, other = postgres.PostgresStore(pool), postgres.PostgresStore(pool)
        store.save("save-traced", numbered_transcript(20))
        messages = _traced(pool, lambda: store.save("save-traced", numbered_transcript(21)))
        assert _round_trips(messages) == 1  # the whole transaction: borrowing the connection sends nothing
        messages = _traced(pool, lambda: store.save("save-traced", numbered_transcript(15)))
        assert _round_trips(messages) == 1  # a shorter transcript too
        assert other.messages("save-traced") == numbered_transcript(15)
        other.save("save-traced", numbered_transcript(5, tag="other"))
        # The first transaction finds another revision and writes nothing; the second, as for a
        # session this store never saw, locks and reads the record, reads the stored rows (so
        # as to keep those the new transcript repeats), then writes the rest.
        messages = _traced(pool, lambda: store.save("save-traced", numbered_transcript(22)))
        assert _round_trips(messages) == 4
        assert other.messages("save-traced") == numbered_transcript(22)
        assert other.delete("save-traced")
        store.save("save-traced", numbered_transcript(23))  # the record it knew is gone: made anew
        assert other.messages("save-traced") == numbered_transcript(23)
        assert other.info("save-traced").length == 23


def test_tokens_keep_growing_across_delete_and_store_objects(store: postgres.PostgresStore) -> None:
    first = store.claim("tokens", replica="a", lease=30)
    assert store.delete("tokens")
    other = postgres.PostgresStore(store.pool)  # knows nothing of the first: the count is the database's
    second = other.claim("tokens", replica="b", lease=30)
    assert second.token > first.token
    with pytest.raises(agent.ConflictError):
        store.save_run(first, [agent.Message.user("late")])
    assert other.delete("tokens") and not other.delete("tokens")
    assert store.claim("tokens", replica="a", lease=30).token > second.token


# --- Fork ------------------------------------------------------------------------------------


def _stored(admin: Any, schema: str, session_id: str) -> tuple[Any, ...]:
    """The record's run fields and how many message rows the session has, read past the store."""
    key = encode_text(session_id)
    record = admin.execute(
        f"SELECT run_state, token, holder, lease_expires_at, cancel_requested FROM {schema}.agentsessions_sessions "
        "WHERE id = %s",
        (key,),
    ).fetchone()
    rows = admin.execute(f"SELECT count(*) FROM {schema}.agentsessions_messages WHERE session_id = %s", (key,))
    return record, rows.fetchone()[0]


def test_a_fork_copies_the_first_messages_into_a_new_idle_session(
    store: postgres.PostgresStore, admin: Any, schema: str
) -> None:
    messages = numbered_transcript(10)
    store.save("fork-source", messages)
    store.claim("fork-source", replica="r", lease=30)
    store.add_steer("fork-source", "for the source's run only")
    assert store.cancel("fork-source")
    source = store.info("fork-source")
    for new_id, at in [("fork-4", 4), ("fork-all", None), ("fork-0", 0), ("fork-10", 10)]:
        store.fork("fork-source", new_id, at=at)
    replica = postgres.PostgresStore(store.pool)  # reads what the database holds, nothing remembered
    for new_id, count in [("fork-4", 4), ("fork-all", 10), ("fork-0", 0), ("fork-10", 10)]:
        assert replica.messages(new_id) == messages[:count]
        info = replica.info(new_id)
        assert (info.length, info.state, info.holder, info.pending_steers) == (count, agent.RunState.IDLE, None, 0)
        assert info.updated_at is not None and source.updated_at is not None and info.updated_at > source.updated_at
        assert _stored(admin, schema, new_id) == ((None, 0, None, None, False), count)
    assert store.info("fork-source") == source  # the source is untouched, its run and steer too
    assert store.messages("fork-source") == messages
    # A fork is a session like any other: it saves, and runs.
    store.save("fork-4", [*messages[:4], agent.Message.user("on the fork")])
    assert replica.messages("fork-4") == [*messages[:4], agent.Message.user("on the fork")]
    assert replica.claim("fork-4", replica="r", lease=30).token > 0
    # An id with no record forks into an empty session, which is listed like any other.
    store.fork("fork-nobody", "fork-empty")
    assert store.info("fork-empty").length == 0 and store.info("fork-empty").updated_at is not None
    assert "fork-empty" in {info.id for info in store.sessions(state=agent.RunState.IDLE)}


def test_a_fork_into_an_existing_id_raises_conflict_and_copies_nothing(store: postgres.PostgresStore) -> None:
    store.save("fork-from", numbered_transcript(5))
    store.save("fork-saved", [agent.Message.user("mine")])
    store.add_steer("fork-steered", "only a steer: a record with no transcript")
    store.claim("fork-held", replica="r", lease=30)
    for taken in ["fork-saved", "fork-steered", "fork-held", "fork-from"]:
        before = (store.messages(taken), store.info(taken), store.peek_steers(taken))
        with pytest.raises(agent.ConflictError, match=f"cannot fork into session '{taken}': it exists") as caught:
            store.fork("fork-from", taken)
        assert type(caught.value) is agent.ConflictError
        assert (store.messages(taken), store.info(taken), store.peek_steers(taken)) == before


@pytest.mark.parametrize(
    ("at", "error", "message"),
    [
        (-1, ValueError, "between 0 and the session's length 5, got -1"),
        (6, ValueError, "between 0 and the session's length 5, got 6"),
        (2**80, ValueError, "between 0 and the session's length 5"),  # past any integer column
        (True, TypeError, "must be an int or None, got bool"),
        ("3", TypeError, "must be an int or None, got str"),
        (3.0, TypeError, "must be an int or None, got float"),
    ],
)
def test_a_fork_at_outside_the_transcript_raises_and_writes_nothing(
    store: postgres.PostgresStore, admin: Any, schema: str, at: Any, error: type[Exception], message: str
) -> None:
    store.save("fork-bounds", numbered_transcript(5))
    with pytest.raises(error, match=re.escape(message)):
        store.fork("fork-bounds", "fork-out-of-bounds", at=at)
    assert _stored(admin, schema, "fork-out-of-bounds") == (None, 0)
    with pytest.raises(ValueError, match=re.escape("the session's length 0, got 1")):
        store.fork("fork-unknown-source", "fork-out-of-bounds", at=1)
    assert _stored(admin, schema, "fork-out-of-bounds") == (None, 0)


def test_a_fork_racing_the_creation_of_its_new_id_waits_for_it_then_raises_conflict(
    store: postgres.PostgresStore, admin: Any, schema: str
) -> None:
    store.save("fork-racer", numbered_transcript(3))
    caught: list[BaseException] = []

    def fork() -> None:
        try:
            store.fork("fork-racer", "fork-raced")
        except BaseException as error:
            caught.append(error)

    with psycopg.connect(POSTGRES_DSN, options=f"-c search_path={schema}") as creator:
        insert = "INSERT INTO agentsessions_sessions (id, revision, length) VALUES (%s, 0, 0)"
        creator.execute(insert, (encode_text("fork-raced"),))  # not committed yet
        thread = threading.Thread(target=fork)
        thread.start()
        blocked = "SELECT 1 FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        wait_for("the fork to wait", lambda: admin.execute(blocked, (creator.info.backend_pid,)).fetchone())
        creator.commit()
    thread.join(30)
    assert len(caught) == 1 and type(caught[0]) is agent.ConflictError, caught
    assert _stored(admin, schema, "fork-raced") == ((None, 0, None, None, False), 0)


def test_a_fork_of_the_whole_transcript_is_one_round_trip_and_no_message_leaves_the_server(schema: str) -> None:
    with make_pool(schema, max_size=1, prepare_threshold=None) as pool:
        store = postgres.PostgresStore(pool)
        store.save("fork-traced", numbered_transcript(100))
        messages = _traced(pool, lambda: store.fork("fork-traced", "fork-traced-all"))
        statements = [m[3] for m in messages if m[0] == "F" and m[2] in {"Parse", "Query"}]
        touching = [s for s in statements if "agentsessions_" in s]
        assert len(touching) == 1 and re.match(r' "" "\s*WITH source AS', touching[0])
        assert _round_trips(messages) == 1  # the whole transaction: borrowing the connection sends nothing
        rows = [m for m in messages if m[0] == "B" and m[2] == "DataRow"]
        assert len(rows) == 2  # the limits and the one row of lengths: no message came to Python
        assert store.messages("fork-traced-all") == numbered_transcript(100)
        assert store.info("fork-traced-all").preview == "m99"  # the source's, copied by the server


def test_a_fork_of_a_prefix_reads_its_last_messages_back_once_for_its_preview(schema: str) -> None:
    with make_pool(schema, max_size=1, prepare_threshold=None) as pool:
        store = postgres.PostgresStore(pool)
        store.save("fork-prefix", numbered_transcript(100))
        messages = _traced(pool, lambda: store.fork("fork-prefix", "fork-prefix-60", at=60))
        statements = [m[3] for m in messages if m[0] == "F" and m[2] in {"Parse", "Query"}]
        touching = [s for s in statements if "agentsessions_" in s]
        assert len(touching) == 2 and re.match(r' "" "\s*UPDATE agentsessions_sessions SET preview', touching[1])
        assert _round_trips(messages) == 2  # the copy and its last rows; then the preview with the commit
        assert store.messages("fork-prefix-60") == numbered_transcript(60)
        assert store.info("fork-prefix-60").preview == "m59"


def _tool_turn(n: int) -> list[agent.Message]:
    """A tool call and its result: two messages without text."""
    call = agent.Message(agent.Role.ASSISTANT, (agent.Content.tool_use(f"call-{n}", "look", "{}"),))
    return [call, agent.Message.user(agent.Content.tool_result(f"call-{n}", f"result {n}"))]


@pytest.mark.parametrize("tools", [0, 7, 8, 30])  # the fork reads 16 rows at a time: within, at and past them
def test_a_fork_of_a_prefix_ending_in_tool_calls_reads_back_to_the_last_text(
    store: postgres.PostgresStore, tools: int
) -> None:
    turns = [message for n in range(tools) for message in _tool_turn(n)]
    source = f"fork-tools-{tools}"
    store.save(source, [agent.Message.user("ask"), agent.Message.assistant("the last words"), *turns, *_tool_turn(99)])
    store.fork(source, f"{source}-prefix", at=2 + len(turns))
    store.fork(source, f"{source}-none", at=0)
    replica = postgres.PostgresStore(store.pool)
    assert replica.info(f"{source}-prefix").preview == "the last words"
    assert replica.info(f"{source}-none").preview == ""
    store.save(f"{source}-only-tools", turns)
    store.fork(f"{source}-only-tools", f"{source}-only-tools-fork", at=len(turns))
    assert replica.info(f"{source}-only-tools-fork").preview == ""


# --- The pool's check ------------------------------------------------------------------------


@contextlib.contextmanager
def _stopped(pid: int) -> Iterator[None]:
    """The backend stopped: its TCP connection stays up, and it answers nothing for the block (10 s at most).

    The limit makes a call that never gives up fail the test on its time instead of hanging it.
    """
    _require_local(pid)
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(10, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        yield
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)


def test_check_connection_gives_up_on_a_server_that_stopped_answering() -> None:
    with psycopg.connect(POSTGRES_DSN, connect_timeout=5) as conn:
        postgres.check_connection(conn)  # a live one passes, left as it was
        assert not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with _stopped(conn.info.backend_pid):
            started = time.monotonic()
            late = "no answer from PostgreSQL to the pool's check within 0.5 s"
            with pytest.raises(psycopg.OperationalError, match=re.escape(late)):
                postgres.check_connection(conn, timeout=0.5)
            elapsed = time.monotonic() - started
        assert 0.5 <= elapsed < 0.5 + SLACK, elapsed
        assert conn.closed  # so a pool drops it
    with pytest.raises(ValueError, match="timeout is a number of seconds above 0"):
        postgres.check_connection(conn, timeout=0)


def test_a_pooled_connection_that_stopped_answering_is_dropped_by_the_check_and_the_call_goes_on(schema: str) -> None:
    check = functools.partial(postgres.check_connection, timeout=0.5)
    with make_pool(schema, max_size=1, check=check) as pool:
        store = postgres.PostgresStore(pool, timeout=5.0)
        store.save("checked", numbered_transcript(2))
        pid = _backend_pid(pool)
        with _stopped(pid):
            started = time.monotonic()
            assert store.messages("checked") == numbered_transcript(2)
            elapsed = time.monotonic() - started
        assert 0.5 <= elapsed < 0.5 + 1.0 + SLACK, elapsed  # the check's timeout, then a new connection
        assert _backend_pid(pool) != pid


def test_a_check_that_gets_no_answer_ends_within_the_store_timeout(schema: str) -> None:
    # The check's own timeout (5 s) is longer than the store's.
    with make_pool(schema, max_size=1, check=postgres.check_connection) as pool:
        store = postgres.PostgresStore(pool, timeout=1.0)
        store.save("unchecked", numbered_transcript(2))
        pid = _backend_pid(pool)
        with _stopped(pid):
            started = time.monotonic()
            with pytest.raises(agent.StoreError, match="could not read the record for session 'unchecked'") as caught:
                store.info("unchecked")
            elapsed = time.monotonic() - started
        assert "no answer from PostgreSQL within the store's timeout of 1 s" in str(caught.value)
        assert isinstance(caught.value.__cause__, psycopg.OperationalError)
        assert 1.0 <= elapsed < 1.0 + SLACK, elapsed
        assert store.info("unchecked").length == 2  # the pool made a new connection
        assert _backend_pid(pool) != pid


# --- Stalls at each stage of a call, and dropped connections (issue 32 item 4, issue 33 item 3) ---

# The bound the store promises: a call ends within its timeout and this much more (docs/stores/postgresql-mysql.md).
STALL_BOUND = 0.25


def _proxied_pool(schema: str, proxy: Proxy, **settings: Any) -> Pool:
    """The documented pool, two connections, reaching the server through ``proxy``."""
    dsn = psycopg.conninfo.make_conninfo(POSTGRES_DSN, host="127.0.0.1", port=proxy.port)
    return make_pool(schema, max_size=2, min_size=2, dsn=dsn, **settings)


def _server_address() -> tuple[str, int]:
    settings = psycopg.conninfo.conninfo_to_dict(POSTGRES_DSN)
    return str(settings.get("host") or "127.0.0.1"), int(settings.get("port") or 5432)


@contextlib.contextmanager
def _stalled_at(
    stage: str, store: postgres.PostgresStore, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[], object]]:
    """The stall for ``stage`` set up for the block; yields the call that meets it."""
    if stage == "checkout":
        # Every pooled connection lent to someone else, and new ones black-holed: the pool has
        # nothing to lend, and the connection it tries to add gets no answer.
        with _all_pooled(store.pool):
            proxy.stall()
            yield lambda: store.messages("stall")
        return
    if stage == "statement":
        proxy.stall()  # the pooled connections look alive; the first statement gets no answer
        yield lambda: store.messages("stall")
        return
    # commit: a first save reads the record, then writes and commits in a second round trip;
    # the stall starts between the two, so the COMMIT is what gets no answer.
    write = postgres._write_messages

    def stall_then_write(*args: Any) -> None:
        proxy.stall()
        write(*args)

    monkeypatch.setattr(postgres, "_write_messages", stall_then_write)
    yield lambda: store.save(f"stall-{secrets.token_hex(4)}", numbered_transcript(2))


@pytest.mark.parametrize("stage", ["checkout", "statement", "commit"])
def test_a_stall_at_any_stage_of_a_call_ends_it_within_the_timeout(
    schema: str, stage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with proxied(_server_address()) as proxy, _proxied_pool(schema, proxy) as pool:
        store = postgres.PostgresStore(pool, timeout=1.0)
        store.save("stall", numbered_transcript(2))
        with _stalled_at(stage, store, proxy, monkeypatch) as call:
            started = time.monotonic()
            with pytest.raises(agent.StoreError) as caught:
                call()
            elapsed = time.monotonic() - started
        # Not a failure of its own: the call waited for the server (or for a connection) until its time was up.
        late = "the pool lent no connection within" if stage == "checkout" else "no answer from PostgreSQL within"
        assert f"{late} the store's timeout of 1 s" in str(caught.value), caught.value
        assert 1.0 * 0.99 <= elapsed <= 1.0 + STALL_BOUND, (stage, elapsed)
        # The server answers again; the stalled connections end (as keepalives would end them) and are replaced.
        proxy.resume()
        proxy.drop()
        assert store.messages("stall") == numbered_transcript(2)


@contextlib.contextmanager
def _all_pooled(pool: Pool) -> Iterator[list[Any]]:
    """Every connection of the pool, borrowed at once (so each is seen) and given back after the block."""
    held = [pool.getconn(timeout=10) for _ in range(pool.max_size)]
    try:
        yield held
    finally:
        for conn in held:
            pool.putconn(conn)


def _pooled_pids(pool: Pool) -> set[int]:
    with _all_pooled(pool) as held:
        return {conn.info.backend_pid for conn in held}


def _wait_until_closed_by_the_server(pool: Pool) -> None:
    """Until the kernel has every pooled connection's end from the server (loopback delivers it a moment later)."""
    with _all_pooled(pool) as held:
        sockets = [conn.fileno() for conn in held]
        wait_for("the pool's connections to be closed", lambda: len(select.select(sockets, [], [], 0)[0]) == len(held))


@pytest.mark.parametrize("how", ["pg_terminate_backend", "restart"])
def test_connections_dropped_while_pooled_are_replaced_and_no_call_fails(schema: str, admin: Any, how: str) -> None:
    with proxied(_server_address()) as proxy, _proxied_pool(schema, proxy) as pool:
        store = postgres.PostgresStore(pool, timeout=5.0)
        sid = f"dropped-{how}"
        store.save(sid, numbered_transcript(2))
        pids = _pooled_pids(pool)
        assert len(pids) == 2
        if how == "pg_terminate_backend":
            for pid in pids:  # waits until each backend is gone, its goodbye sent
                assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)
        else:
            proxy.drop()  # what a server restart does to its clients: every connection cut
        _wait_until_closed_by_the_server(pool)
        # Each call borrows a dead connection first; the store finds it dead without asking the server.
        assert store.messages(sid) == numbered_transcript(2)
        claim = store.claim(sid, replica="r", lease=30)
        store.save_run(claim, numbered_transcript(3))
        assert store.messages(sid) == numbered_transcript(3)
        assert not _pooled_pids(pool) & pids


def test_a_store_from_url_survives_its_connections_being_terminated(schema: str, admin: Any) -> None:
    with agent.stores.from_url(postgres_url(POSTGRES_DSN, schema), connections=2) as store:
        assert isinstance(store, postgres.PostgresStore) and store.pool._check is None  # no round trip per call
        store.save("from-url", numbered_transcript(2))
        pids = _pooled_pids(store.pool)
        for pid in pids:
            assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)
        _wait_until_closed_by_the_server(store.pool)
        assert store.messages("from-url") == numbered_transcript(2)
        assert not _pooled_pids(store.pool) & pids
