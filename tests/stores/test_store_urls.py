"""agentsessions.stores.from_url: each store from its URL, bad URLs a ValueError, passwords never shown."""

from __future__ import annotations

from tests.support.servers import skip_without

# Bad URLs of every scheme reach that store's driver check: every driver, before the imports.
skip_without("pymysql", "pymongo", "redis", extra="all")

import secrets
from pathlib import Path

import pytest
import redis

import agentsessions as agent
from agentsessions import stores
from agentsessions.stores.redis import RedisStore
from agentsessions.stores.sqlite import SQLiteStore
from tests.support.backends import delete_prefix
from tests.support.servers import REDIS_URL, require_server

SECRET = "s3cr3t-pw"


def test_a_sqlite_url_opens_the_file_and_creates_it_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with pytest.raises(agent.StoreError) as missing:
        stores.from_url(f"sqlite://{path}").__enter__()
    # Said to a Python caller in its own terms (not the command's import), chained from the cause.
    assert str(missing.value) == f"no SQLite file at {str(path)!r}: from_url makes one only with create=True"
    assert isinstance(missing.value.__cause__, FileNotFoundError) and missing.value.__cause__.filename == str(path)
    with stores.from_url(f"sqlite://{path}", create=True) as store:
        assert isinstance(store, SQLiteStore)
        store.save("s", [agent.Message.user("hi")])
    with stores.from_url(f"sqlite:///{path}") as store:
        assert store.messages("s") == [agent.Message.user("hi")]


@pytest.mark.server
def test_a_redis_url_opens_a_store_under_its_prefix() -> None:
    client = require_server("Redis", lambda: redis.Redis.from_url(REDIS_URL, socket_timeout=30))
    client.ping()
    prefix = f"agentsessions_test_{secrets.token_hex(4)}:"
    try:
        with stores.from_url(f"{REDIS_URL}?prefix={prefix}", connections=3) as store:
            assert isinstance(store, RedisStore) and store.prefix == prefix
            # A pool that makes calls wait for one of its connections, for a bounded time.
            pool = store.client.connection_pool
            assert isinstance(pool, redis.BlockingConnectionPool) and (pool.max_connections, pool.timeout) == (3, 30)
            store.save("s", [agent.Message.user("hi")])
        assert RedisStore(client, prefix=prefix).messages("s") == [agent.Message.user("hi")]
        with stores.from_url(REDIS_URL) as store:
            assert isinstance(store, RedisStore) and store.prefix == "agentsessions:"
    finally:
        delete_prefix(client, prefix)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://host/x", "unknown store URL ftp://host/x: use sqlite:///path"),
        ("sqlite://host/x.db", "a SQLite URL is sqlite:///absolute/path"),
        ("mysql://root@localhost/", "a MySQL URL is mysql://user:password@host:port/database"),
        ("mongodb://localhost", "a MongoDB URL names its database"),
        ("redis://localhost/zero", "a Redis URL is redis://user:password@host:6379/DB with DB a number"),
        (f"redis://app:{SECRET}@127.0.0.1:6379/0?bogus=1", "cannot use the store URL redis://app:***@127.0.0.1"),
        (f"postgresql://app:{SECRET}/x@db/x", "cannot read the store URL (postgresql://...): percent-encode"),
        (f"mysql://app:{SECRET}@db/x?password={SECRET}", "a MySQL URL is mysql://user:password@host:port/database"),
    ],
)
def test_a_bad_url_is_a_value_error_that_shows_no_password(url: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        stores.from_url(url).__enter__()
    assert message in str(caught.value) and SECRET not in str(caught.value)


def test_an_unreachable_server_is_a_store_error_that_shows_no_password() -> None:
    with pytest.raises(agent.StoreError) as caught:
        stores.from_url(f"redis://app:{SECRET}@127.0.0.1:1/0").__enter__()
    assert "cannot connect to redis://app:***@127.0.0.1:1/0" in str(caught.value)
    assert SECRET not in str(caught.value)
    with pytest.raises(ValueError, match="connections is a number above 0"):
        stores.from_url("sqlite:///x.db", connections=0)


def test_urls_are_shown_masked() -> None:
    url = stores.urls.parse_url(f"redis://app:{SECRET}@h:6379/0?prefix=x:")
    assert url.shown == "redis://app:***@h:6379/0?prefix=x:" and url.mask(f"said {SECRET}") == "said ***"
