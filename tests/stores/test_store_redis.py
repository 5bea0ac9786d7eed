"""The Redis store: the conformance suite against a real Redis, incremental saves, steers
taken from several processes, renewal in one script call, forks copied by the server, clear
errors, and a client that would decode the stored bytes refused.

Each test works under a random prefix of its own, whose keys are deleted at the end.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("redis", extra="redis")  # before the imports that need them

import contextlib
import functools
import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import agentsessions as agent
from agentsessions.runs import Progress, Renewal
from agentsessions.stores.redis import RedisStore
from agentsessions.testing import storetest
from tests.support.backends import delete_prefix, open_redis
from tests.support.crossprocess import check_steers_across_processes
from tests.support.replicas import check_replicas_notice_each_other, numbered_transcript
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


def test_renewing_a_thousand_claims_is_one_script_call(client: redis.Redis, store: RedisStore) -> None:
    claims = [store.claim(f"renew-{i}", replica="r", lease=30) for i in range(1000)]
    lost = store.claim("renew-lost", replica="r", lease=30)
    store.save_run(lost, [], end=agent.RunState.FINISHED)
    store.cancel("renew-7")
    before = store.info("renew-3").lease_expires_at
    calls = _evalsha_calls(client)
    assert store.renew([*claims, lost]) == Renewal(frozenset({lost}), frozenset({claims[7]}))
    assert _evalsha_calls(client) - calls in {1, 2}  # one call (a second only if another client ran one meanwhile)
    after = store.info("renew-3").lease_expires_at
    assert before is not None and after is not None and after > before


def _evalsha_calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


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
    # What is left is the counters (never reset, so tokens keep growing) and nothing of the session.
    assert set(client.scan_iter(match=prefix.replace("*", "\\*") + "*")) == {prefix.encode() + b"counters"}


def test_a_failing_server_is_a_store_error_that_shows_no_password() -> None:
    client = redis.Redis.from_url("redis://user:hunter2@127.0.0.1:1/0", socket_connect_timeout=1)
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


class ReplyLosingProxy:
    """A TCP proxy to the test Redis that can lose one reply: the server ran the command, the client never hears.

    After ``lose_next_reply()``, the next bytes the server sends are dropped and both
    sides of that connection closed, as a network cut would; redis-py then retries the
    command on a new connection, and the server runs it a second time.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.lost, self.stalled = 0, False
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def lose_next_reply(self) -> None:
        self.armed.set()

    def stall(self) -> None:
        """Drop every reply from now on, keeping the connections open: a server that stopped answering."""
        self.stalled = True

    def close(self) -> None:
        for sock in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if replies and self.stalled:
                    continue
                if replies and self.armed.is_set():
                    self.armed.clear()
                    self.lost += 1
                    break
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def lossy(client: redis.Redis, prefix: str) -> Iterator[tuple[RedisStore, ReplyLosingProxy]]:
    """A store whose client talks to Redis through a :class:`ReplyLosingProxy`, with redis-py's default retries.

    ``redis.Redis(host=..., port=...)`` retries a command 10 times by default (a client from
    ``Redis.from_url`` does not), so a lost reply makes the server run the step again.
    """
    where = urlsplit(REDIS_URL)
    proxy = ReplyLosingProxy((where.hostname or "127.0.0.1", where.port or 6379))
    db = int(where.path.strip("/") or 0)
    through = redis.Redis(host="127.0.0.1", port=proxy.port, db=db, password=where.password, socket_timeout=10)
    with through:
        through.ping()
        yield RedisStore(through, prefix=prefix), proxy
    proxy.close()


def _lose_one(proxy: ReplyLosingProxy, call: Callable[[], Any]) -> Any:
    before = proxy.lost
    proxy.lose_next_reply()
    result = call()
    assert proxy.lost == before + 1  # the reply was lost, and the call retried
    return result


def test_every_step_run_twice_by_a_retry_after_a_lost_reply_counts_once(
    lossy: tuple[RedisStore, ReplyLosingProxy], client: redis.Redis, prefix: str
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
    _lose_one(proxy, lambda: store.fork("retried", "retried-fork", at=2))  # no conflict with itself
    assert direct.messages("retried-fork") == messages[:2]
    claim = store.claim("retried", replica="r", lease=30)
    store.add_steer("retried", "late")
    kept = _lose_one(proxy, lambda: store.save_run(claim, messages, end=agent.RunState.FINISHED, unless_steered=True))
    assert [s.text for s in kept.pending] == ["late"] and direct.info("retried").state is agent.RunState.RUNNING


def test_a_server_that_stops_answering_is_a_store_error_after_the_clients_timeout(
    lossy: tuple[RedisStore, ReplyLosingProxy], prefix: str
) -> None:
    _, proxy = lossy
    # No retries, as a client from Redis.from_url has: the timeout ends the call.
    with redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=0.5, retry=Retry(NoBackoff(), 0)) as quiet:
        store = RedisStore(quiet, prefix=prefix)
        store.save("quiet", numbered_transcript(2))
        proxy.stall()
        with pytest.raises(agent.StoreError, match=r"^Redis store could not claim for session 'quiet': ") as caught:
            store.claim("quiet", replica="r", lease=30)
        assert isinstance(caught.value.__cause__, redis.TimeoutError)
