"""The Redis store: the conformance suite against a real Redis, incremental saves, steers
taken from several processes, renewal in one script call, forks copied by the server, clear
errors, and a client that would decode the stored bytes refused.

Each test works under a random prefix of its own, whose keys are deleted at the end.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("redis", extra="redis")  # before the imports that need them

import functools
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runs import Progress, Renewal
from agentsessions.stores.kit.summary import fold_usage, stored_usage
from agentsessions.stores.redis import RedisStore
from agentsessions.testing import storetest
from tests.support.backends import delete_prefix, open_redis
from tests.support.crossprocess import check_steers_across_processes
from tests.support.proxy import Proxy, proxied
from tests.support.replicas import check_replicas_notice_each_other, numbered_transcript
from tests.support.scripts import call, double
from tests.support.servers import REDIS_URL, require_server

pytestmark = pytest.mark.server  # Redis


def _connect() -> redis.Redis:
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=30, socket_connect_timeout=5)
    client.ping()
    return client


@pytest.fixture(scope="module")
def client() -> Iterator[redis.Redis]:
    """The test Redis, as a caller's client."""
    with require_server("Redis", _connect) as client:
        yield client


@pytest.fixture
def prefix(client: redis.Redis) -> Iterator[str]:
    """A random prefix for one test; its keys are deleted afterwards."""
    name = f"agentsessions_test_{secrets.token_hex(4)}:"
    try:
        yield name
    finally:
        delete_prefix(client, name)


@pytest.fixture
def store(client: redis.Redis, prefix: str) -> RedisStore:
    return RedisStore(client, prefix=prefix)


@pytest.mark.parametrize("name", storetest.properties())
def test_the_redis_store_keeps_the_contract(name: str, client: redis.Redis, prefix: str) -> None:
    # A new store object per call, over the same client: the suite uses two as replicas.
    report = storetest.check(name, lambda: RedisStore(client, prefix=prefix))
    assert report.replicas and report.skipped == () and report.examples[name] > 0, report


def test_a_save_sends_only_the_new_messages(client: redis.Redis, store: RedisStore, prefix: str) -> None:
    messages = numbered_transcript(50)
    store.save("incremental", messages)
    # Change the stored first message behind the store's back: a save that rewrote the
    # transcript would put it back, one that appends leaves it.
    key = prefix.encode() + b"m:incremental"
    client.lset(key, 0, agentsessions_body(agent.Message.user("changed behind its back")))
    store.save("incremental", [*messages, agent.Message.user("one more")])
    stored = RedisStore(client, prefix=prefix).messages("incremental")
    assert stored == [agent.Message.user("changed behind its back"), *messages[1:], agent.Message.user("one more")]
    check_replicas_notice_each_other(store, lambda: RedisStore(client, prefix=prefix), "incremental", messages)


def agentsessions_body(message: agent.Message) -> str:
    from agentsessions.codec import dump_message

    return dump_message(message)


def test_processes_hand_each_steer_to_exactly_one_taker(prefix: str) -> None:
    check_steers_across_processes(functools.partial(open_redis, REDIS_URL, prefix))


def test_renewing_a_thousand_claims_is_one_script_call(prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with _connect() as own:  # a client of this test's own: other test runs share the server
        store = RedisStore(own, prefix=prefix)
        claims = [store.claim(f"renew-{i}", replica="r", lease=30) for i in range(1000)]
        lost = store.claim("renew-lost", replica="r", lease=30)
        store.save_run(lost, [], end=agent.RunState.FINISHED)
        store.cancel("renew-7")
        before = store.info("renew-3").lease_expires_at
        sent = _commands(own, monkeypatch)
        assert store.renew([*claims, lost]) == Renewal(frozenset({lost}), frozenset({claims[7]}))
        assert sent == ["EVALSHA"], sent  # one script call for them all
        after = store.info("renew-3").lease_expires_at
    assert before is not None and after is not None and after > before


def _commands(client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each command ``client`` sends from now on (pipelines aside), in order."""
    sent: list[str] = []
    execute: Callable[..., Any] = client.execute_command

    def counted(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]).upper())
        return execute(*args, **options)

    monkeypatch.setattr(client, "execute_command", counted)
    return sent


def test_a_fork_copies_on_the_server_and_an_existing_id_is_a_conflict(store: RedisStore) -> None:
    messages = numbered_transcript(2500)  # past the scripts' chunks of 1000
    store.save("fork-source", messages)
    store.claim("fork-source", replica="r", lease=30)
    store.add_steer("fork-source", "for the source's run only")
    store.fork("fork-source", "fork-2100", at=2100)
    store.fork("fork-source", "fork-all")
    assert store.messages("fork-2100") == messages[:2100]
    assert store.messages("fork-all") == messages
    info = store.info("fork-all")
    assert (info.length, info.state, info.holder, info.pending_steers) == (2500, agent.RunState.IDLE, None, 0)
    with pytest.raises(agent.ConflictError, match="cannot fork into session 'fork-all': it exists"):
        store.fork("fork-source", "fork-all", at=1)
    with pytest.raises(ValueError, match="between 0 and the session's length 2500, got 2501"):
        store.fork("fork-source", "fork-out", at=2501)
    with pytest.raises(ValueError, match="between 0 and the session's length 2500, got -1"):
        store.fork("fork-source", "fork-out", at=-1)
    with pytest.raises(TypeError, match="must be an int or None, got bool"):
        store.fork("fork-source", "fork-out", at=True)
    assert store.info("fork-out") == agent.SessionInfo("fork-out")


def test_the_script_folds_usage_into_the_same_text_as_kit_summary(client: redis.Redis, store: RedisStore) -> None:
    record = store._record(b"usage")
    used = [agent.Usage(1, 2, 3, 4), agent.Usage(7), agent.Usage(10, 20, 30, 2**53 - 1)]  # each run's so far
    expected: str | None = None
    for _ in range(2):  # runs
        claim = store.claim("usage", replica="r", lease=30)
        for usage in used:
            store.save_run(claim, numbered_transcript(2), usage=usage)
            expected = fold_usage(expected, claim.token, usage)
            assert client.hget(record, "us") == expected.encode()  # digits and all, as Python writes it
        store.save_run(claim, numbered_transcript(2), end=agent.RunState.FINISHED)  # no usage: left as it is
        assert expected is not None and client.hget(record, "us") == expected.encode()
    assert store.info("usage").usage == stored_usage(expected) == agent.Usage(20, 40, 60, 2 * (2**53 - 1))


def test_a_stored_usage_the_script_cannot_read_is_a_format_error_and_nothing_is_written(
    client: redis.Redis, store: RedisStore
) -> None:
    claim = store.claim("bad-usage", replica="r", lease=30)
    store.save_run(claim, numbered_transcript(1), usage=agent.Usage(1))
    for bad in (
        b"{",
        b'{"token":1,"run":[1,2,3],"before":[0,0,0,0]}',
        b'{"token":"1","run":[0,0,0,0],"before":[0,0,0,0]}',
    ):
        client.hset(store._record(b"bad-usage"), "us", bad)
        with pytest.raises(agent.FormatError, match="stored usage is not one this version reads"):
            store.save_run(claim, numbered_transcript(3), usage=agent.Usage(2))
        assert store.messages("bad-usage") == numbered_transcript(1)
        assert client.hget(store._record(b"bad-usage"), "us") == bad
    store.save_run(claim, numbered_transcript(3))  # without usage, the text is not read
    assert store.messages("bad-usage") == numbered_transcript(3)


def test_a_fork_reads_back_past_messages_without_text_for_its_preview(client: redis.Redis, store: RedisStore) -> None:
    said = agent.Message.assistant("the last words " * 20)
    quiet = [agent.Message.user(agent.Content.tool_result(f"t{i}", "a result is not text")) for i in range(20)]
    store.save("quiet", [agent.Message.user("first"), said, *quiet])
    store.fork("quiet", "quiet-all")
    assert store.info("quiet-all").preview == said.text[:200]
    store.fork("quiet", "quiet-some", at=12)
    assert store.info("quiet-some").preview == said.text[:200]
    store.fork("quiet", "quiet-none", at=0)
    assert store.info("quiet-none").preview == ""
    store.fork("quiet", "quiet-first", at=1)
    assert store.info("quiet-first").preview == "first"
    assert store.messages("quiet-all") == store.messages("quiet")


def test_keys_stay_under_the_prefix_and_delete_leaves_none(client: redis.Redis, store: RedisStore, prefix: str) -> None:
    weird = "a:b*\ud800\x00é"
    store.save(weird, numbered_transcript(3))
    store.add_steer(weird, "steer")
    claim = store.claim(weird, replica="r", lease=30)
    store.save_run(claim, numbered_transcript(4), end=agent.RunState.FINISHED)
    other = RedisStore(client, prefix=prefix[:-1] + "-other:")  # a sibling: neither starts with the other
    assert other.info(weird) == agent.SessionInfo(weird)
    assert list(other.sessions()) == []
    assert store.delete(weird)
    # What is left is the counters (never reset, so tokens keep growing), the schema version
    # recorded at the first call, and nothing of the session.
    left = set(client.scan_iter(match=prefix.replace("*", "\\*") + "*"))
    assert left == {prefix.encode() + b"counters", prefix.encode() + b"schema"}


def test_a_failing_server_is_a_store_error_that_shows_no_password() -> None:
    client = redis.Redis.from_url("redis://user:hunter2@127.0.0.1:1/0", socket_timeout=1)
    store = RedisStore(client)
    with pytest.raises(
        agent.StoreError, match=r"^Redis store could not save the transcript for session 's': "
    ) as caught:
        store.save("s", [agent.Message.user("hi")])
    assert isinstance(caught.value.__cause__, redis.ConnectionError)
    assert "hunter2" not in str(caught.value) and "hunter2" not in repr(store)


def test_a_client_that_decodes_responses_is_refused(client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="decode_responses=False"):
        RedisStore(redis.Redis.from_url(REDIS_URL, decode_responses=True))
    with pytest.raises(TypeError, match=r"takes a redis\.Redis client"):
        RedisStore("redis://127.0.0.1")  # type: ignore[arg-type]


def test_importing_without_redis_names_the_extra() -> None:
    code = "import sys; sys.modules['redis'] = None; import agentsessions.stores.redis"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "ImportError: agentsessions.stores.redis needs redis" in done.stderr
    assert "pip install agentsessions[redis]" in done.stderr


RUNS = 300  # in one process, each calling two tools: issue 33's load
SLACK = 1.5  # what a bounded call may take beyond its bound on a loaded machine: scheduling

# What the docs recommend, and what the store's refusal of redis-py's default retries says to pass.
DROPS_ONLY = Retry(ExponentialWithJitterBackoff(), 3, supported_errors=(redis.ConnectionError,))


def _through(proxy: Proxy, **options: Any) -> redis.Redis:
    """A client of the test Redis through ``proxy``, with a bounded blocking pool as the docs recommend."""
    where = urlsplit(REDIS_URL)
    userinfo = where.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@127.0.0.1:{proxy.port}" if userinfo else f"127.0.0.1:{proxy.port}"
    pool = redis.BlockingConnectionPool.from_url(where._replace(netloc=netloc).geturl(), **options)
    return redis.Redis(connection_pool=pool)


@pytest.fixture
def lossy(client: redis.Redis, prefix: str) -> Iterator[tuple[RedisStore, Proxy]]:
    """A store whose client talks to Redis through a :class:`Proxy` and retries after a dropped connection.

    With the retry the docs recommend (connection errors only, never a timeout), a reply the
    proxy loses makes redis-py send the command again on a new connection, and the server
    runs the step a second time.
    """
    where = urlsplit(REDIS_URL)
    with proxied((where.hostname or "127.0.0.1", where.port or 6379)) as proxy:
        through = _through(proxy, socket_timeout=10, timeout=10, retry=DROPS_ONLY)
        through.ping()
        yield RedisStore(through, prefix=prefix), proxy
        through.connection_pool.disconnect()


def _lose_one(proxy: Proxy, call: Callable[[], Any]) -> Any:
    before = proxy.lost
    proxy.lose_next_reply()
    result = call()
    assert proxy.lost == before + 1  # the reply was lost, and the call retried
    return result


def test_every_step_run_twice_by_a_retry_after_a_lost_reply_counts_once(
    lossy: tuple[RedisStore, Proxy], client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, proxy = lossy
    direct = RedisStore(client, prefix=prefix)
    assert _lose_one(proxy, lambda: store.add_steer("retried", "once")) is agent.RunState.IDLE
    assert [s.text for s in direct.peek_steers("retried")] == ["once"]  # not twice
    assert _lose_one(proxy, lambda: store.take_steers("retried")) == ["once"]  # not lost
    claim = _lose_one(proxy, lambda: store.claim("retried", replica="r", lease=30))  # not busy with itself
    assert direct.info("retried").state is agent.RunState.RUNNING
    store.add_steer("retried", "pending")
    steer = direct.peek_steers("retried")[0]
    messages = numbered_transcript(3)
    progress = _lose_one(proxy, lambda: store.save_run(claim, messages, taken=[steer.seq], end=agent.RunState.FINISHED))
    assert progress == Progress()  # released, not "superseded" by its own first run
    info = direct.info("retried")
    assert (info.state, info.length, info.pending_steers) == (agent.RunState.FINISHED, 3, 0)
    _lose_one(proxy, lambda: store.save("retried", [*messages, agent.Message.user("more")]))
    assert direct.messages("retried") == [*messages, agent.Message.user("more")]
    read = store._fork_preview  # the fork's read of its preview goes through; its script's reply is lost

    def then_lose(*args: Any) -> Any:
        found = read(*args)
        proxy.lose_next_reply()
        return found

    monkeypatch.setattr(store, "_fork_preview", then_lose)
    lost = proxy.lost
    store.fork("retried", "retried-fork", at=2)  # no conflict with itself
    assert proxy.lost == lost + 1
    assert direct.messages("retried-fork") == messages[:2]
    assert direct.info("retried-fork").preview == messages[1].text
    claim = store.claim("retried", replica="r", lease=30)
    store.add_steer("retried", "late")
    kept = _lose_one(proxy, lambda: store.save_run(claim, messages, end=agent.RunState.FINISHED, unless_steered=True))
    assert [s.text for s in kept.pending] == ["late"] and direct.info("retried").state is agent.RunState.RUNNING


def test_a_server_that_stops_answering_is_a_store_error_within_the_clients_timeout(
    lossy: tuple[RedisStore, Proxy], prefix: str
) -> None:
    _, proxy = lossy
    quiet = _through(proxy, socket_timeout=0.5, timeout=0.5, retry=DROPS_ONLY)  # the docs' client, short timeouts
    store = RedisStore(quiet, prefix=prefix)
    store.save("quiet", numbered_transcript(2))
    proxy.stall()
    spent = {}
    calls: dict[str, Callable[[], object]] = {
        "claim": lambda: store.claim("quiet", replica="r", lease=30),
        "messages": lambda: store.messages("quiet"),
        "save": lambda: store.save("quiet", numbered_transcript(3)),
    }
    for name, step in calls.items():
        started = time.monotonic()
        with pytest.raises(agent.StoreError, match=r"^Redis store could not ") as caught:
            step()
        spent[name] = time.monotonic() - started
        assert isinstance(caught.value.__cause__, redis.TimeoutError), caught.value
    quiet.connection_pool.disconnect()
    print({name: f"{seconds:.2f} s" for name, seconds in spent.items()})
    # One socket_timeout (0.5 s) each: nothing retried the timed-out command. The slack is scheduling.
    assert max(spent.values()) < 0.5 + SLACK, spent


def test_a_client_that_would_retry_a_timed_out_call_is_refused_saying_what_to_pass() -> None:
    # The client users make by default: redis-py retries a timed-out command 10 times.
    default = redis.Redis(host="127.0.0.1", port=6379, socket_timeout=10)
    with pytest.raises(ValueError, match="does not retry a command that timed out") as caught:
        RedisStore(default)
    assert "up to 10 times" in str(caught.value) and "supported_errors=(redis.ConnectionError,)" in str(caught.value)
    with pytest.raises(ValueError, match="no socket_timeout"):
        RedisStore(redis.Redis.from_url(REDIS_URL))
    with pytest.raises(ValueError, match="retries once"):
        RedisStore(redis.Redis.from_url(REDIS_URL + "?retry_on_timeout=true", socket_timeout=10))
    unbounded = redis.BlockingConnectionPool.from_url(REDIS_URL, timeout=None, socket_timeout=10)
    with pytest.raises(ValueError, match="timeout=None"):
        RedisStore(redis.Redis(connection_pool=unbounded))
    # What the messages say to pass is accepted: no I/O happens in the constructor either way.
    RedisStore(redis.Redis(host="127.0.0.1", port=6379, socket_timeout=10, retry=DROPS_ONLY))
    RedisStore(redis.Redis.from_url(REDIS_URL, socket_timeout=10))


def test_three_hundred_runs_in_one_process_wait_for_the_pools_connections_and_all_end(
    client: redis.Redis, prefix: str
) -> None:
    pool = redis.BlockingConnectionPool.from_url(REDIS_URL, max_connections=8, timeout=30, socket_timeout=30)
    store = RedisStore(redis.Redis(connection_pool=pool), prefix=prefix)
    runner = agent.Runner(replica="many")
    runs = []
    try:
        for n in range(RUNS):
            script = [call("double", n=n), call("double", n=2 * n), agent.Message.assistant(f"done {n}")]
            spec = agent.Spec(session=agent.open(f"run-{n}", store), tools=(double,), lease=30)
            runs.append(runner.start(spec, [agent.Message.user(f"run {n}")], ScriptedEndpoint(script)))
        results = [run.wait(120) for run in runs]  # raises RunError for a run that failed
    finally:
        pool.disconnect()
    assert [result.text for result in results] == [f"done {n}" for n in range(RUNS)]
    states = {info.state for info in RedisStore(client, prefix=prefix).sessions()}
    assert states == {agent.RunState.FINISHED}, states
