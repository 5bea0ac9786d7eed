"""The Redis store: the conformance suite against a real Redis, incremental saves, steers
taken from several processes, renewal in one script call, forks copied by the server, clear
errors, and a client that would decode the stored bytes refused.

Each test works under a random prefix of its own, whose keys are deleted at the end.
"""

from __future__ import annotations

import functools
import secrets
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from backends import delete_prefix, open_redis
from conftest import REDIS_URL, check_replicas_notice_each_other, numbered_transcript, require_server
from crossprocess import check_steers_across_processes

import agentsessions as agent
from agentsessions.runs import Renewal
from agentsessions.stores import storetest
from agentsessions.stores.redis import RedisStore


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


def test_the_redis_store_keeps_the_contract(client: redis.Redis, prefix: str) -> None:
    # A new store object per call, over the same client: the suite uses two as replicas.
    report = storetest.run(lambda: RedisStore(client, prefix=prefix))
    assert report.replicas and report.skipped == ()
    assert tuple(report.examples) == storetest.PROPERTIES
    assert all(count > 0 for count in report.examples.values()), report.examples
    print(report)


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
    other = RedisStore(client, prefix=prefix + "other:")
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
