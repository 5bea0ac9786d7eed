"""Scratch places on every persistent backend, and openers that a spawned process can call.

Each ``scratch_*`` context manager makes a fresh schema, database or file with the store's
tables, and yields a picklable zero-argument opener: ``opener()`` is a context manager
yielding a store over that place, opened the way another replica would open it. Tests that
run code in other processes (the kill tests) hand the opener to them.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

import agentsessions as agent
from tests.support.servers import (
    MONGODB_URI,
    MYSQL_HOST,
    MYSQL_PASSWORD,
    MYSQL_PORT,
    MYSQL_USER,
    POSTGRES_DSN,
    REDIS_URL,
    require_server,
)

Opener = Callable[[], AbstractContextManager[Any]]

PERSISTENT = ("sqlite", "postgres", "mysql", "mongodb", "redis")
"""Every persistent store, as :func:`scratch_opener` (and conftest's ``opener`` fixture) name them."""

IN_PROCESS = ("memory", "sqlite")
"""The stores that need no database server."""


def store_params(*kinds: str) -> list[object]:
    """``kinds`` as pytest parameters (ids the names), each store that needs a server marked ``server``."""
    return [pytest.param(kind, id=kind, marks=() if kind in IN_PROCESS else pytest.mark.server) for kind in kinds]


def postgres_url(dsn: str, schema: str, password: str | None = None) -> str:
    """A ``postgresql://`` URL for the conninfo ``dsn``, working in ``schema`` (with ``password``, if given)."""
    from psycopg.conninfo import conninfo_to_dict

    settings = conninfo_to_dict(dsn)
    user = quote(str(settings.get("user", "postgres")))
    secret = password if password is not None else settings.get("password")
    userinfo = f"{user}:{quote(str(secret))}" if secret else user
    where = f"{settings.get('host', '127.0.0.1')}:{settings.get('port', 5432)}/{settings.get('dbname', 'test')}"
    return f"postgresql://{userinfo}@{where}?options=-csearch_path%3D{schema}"


def mysql_url(host: str, port: int, user: str, password: str, database: str) -> str:
    """A ``mysql://`` URL for these connection settings."""
    userinfo = f"{quote(user)}:{quote(password)}" if password else quote(user)
    return f"mysql://{userinfo}@{host}:{port}/{database}"


def mongodb_url(uri: str, database: str) -> str:
    """The MongoDB ``uri`` with ``database`` as its path."""
    return urlunsplit(urlsplit(uri)._replace(path=f"/{database}"))


def redis_url(url: str, prefix: str) -> str:
    """The Redis ``url`` with the store's key ``prefix`` in its query."""
    return f"{url}?prefix={quote(prefix)}"


def store_url(opener: Opener) -> str:
    """The URL ``agentsessions.stores.from_url`` (and the command) opens for the place ``opener`` opens."""
    assert isinstance(opener, functools.partial), opener
    urls: dict[Callable[..., Any], Callable[..., str]] = {
        open_sqlite: lambda path: f"sqlite://{Path(path).resolve()}",
        open_postgres: postgres_url,
        open_mysql: mysql_url,
        open_mongodb: mongodb_url,
        open_redis: redis_url,
    }
    return urls[opener.func](*opener.args)


@contextlib.contextmanager
def open_sqlite(path: str) -> Iterator[agent.RunStore]:
    from agentsessions.stores import sqlite

    with contextlib.closing(sqlite.open(path)) as store:
        yield store


@contextlib.contextmanager
def open_postgres(dsn: str, schema: str) -> Iterator[agent.RunStore]:
    from psycopg_pool import ConnectionPool

    from agentsessions.stores import postgres

    options = {"options": f"-c search_path={schema}"}
    with ConnectionPool(dsn, kwargs=options, min_size=1, max_size=4, open=True) as pool:
        yield postgres.PostgresStore(pool)


@contextlib.contextmanager
def open_mysql(host: str, port: int, user: str, password: str, database: str) -> Iterator[agent.RunStore]:
    import pymysql

    from agentsessions.stores import mysql

    connect = functools.partial(
        pymysql.connect,
        host=host,
        port=port,
        user=user,
        password=password,
        database=database,
        connect_timeout=5,
        read_timeout=30,
        write_timeout=30,
        # PyMySQL 1.2 tries TLS by default, building an SSL context (about 27 ms) for every
        # connection; this store connects per call, and the test server is on loopback.
        ssl_disabled=True,
    )
    yield mysql.MySQLStore(connect)


@contextlib.contextmanager
def open_mongodb(uri: str, database: str) -> Iterator[agent.RunStore]:
    import pymongo

    from agentsessions.stores import mongodb

    client: pymongo.MongoClient[dict[str, Any]]
    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000) as client:
        yield mongodb.MongoStore(client[database])


@contextlib.contextmanager
def open_redis(url: str, prefix: str) -> Iterator[agent.RunStore]:
    import redis

    from agentsessions.stores.redis import RedisStore

    # The pool the docs recommend: a call waits for a free connection instead of failing.
    pool = redis.BlockingConnectionPool.from_url(url, max_connections=50, timeout=30, socket_timeout=30)
    try:
        yield RedisStore(redis.Redis(connection_pool=pool), prefix=prefix)
    finally:
        pool.disconnect()


@contextlib.contextmanager
def scratch_sqlite(directory: Path) -> Iterator[Opener]:
    yield functools.partial(open_sqlite, str(directory / "sessions.db"))


@contextlib.contextmanager
def scratch_postgres(dsn: str, schema_sql: str | None = None) -> Iterator[Opener]:
    """A schema of its own, made with ``schema_sql`` (default: the store's ``SCHEMA``; ``""``: empty)."""
    import psycopg

    from agentsessions.stores import postgres

    schema = f"agentsessions_crash_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as conn:
                if schema_sql != "":
                    conn.execute(postgres.SCHEMA if schema_sql is None else schema_sql)
            yield functools.partial(open_postgres, dsn, schema)
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@contextlib.contextmanager
def scratch_mysql(
    host: str, port: int, user: str, password: str, statements: Sequence[str] | None = None
) -> Iterator[Opener]:
    """A database of its own, made with ``statements`` (default: the store's ``SCHEMA``)."""
    import pymysql

    from agentsessions.stores import mysql

    name = f"agentsessions_crash_{secrets.token_hex(4)}"
    admin = pymysql.connect(host=host, port=port, user=user, password=password, autocommit=True, connect_timeout=5)
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
            cur.execute(f"USE {name}")
            for statement in mysql.SCHEMA if statements is None else statements:
                cur.execute(statement)
        yield functools.partial(open_mysql, host, port, user, password, name)
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


@contextlib.contextmanager
def scratch_mongodb(uri: str, indexes: Mapping[str, Sequence[Any]] | None = None) -> Iterator[Opener]:
    """A database of its own with ``indexes`` (default: the store's ``INDEXES``), on SecantusDB unless ``uri``."""
    import pymongo

    from agentsessions.stores import mongodb

    with contextlib.ExitStack() as stack:
        if not uri:
            from secantus import SecantusDBServer

            uri = stack.enter_context(SecantusDBServer(storage_path=":memory:")).uri
        client: pymongo.MongoClient[dict[str, Any]] = stack.enter_context(
            pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)
        )
        name = f"agentsessions_crash_{secrets.token_hex(4)}"
        for collection, models in (mongodb.INDEXES if indexes is None else indexes).items():
            client[name][collection].create_indexes(models)
        try:
            yield functools.partial(open_mongodb, uri, name)
        finally:
            client.drop_database(name)


@contextlib.contextmanager
def scratch_redis(url: str) -> Iterator[Opener]:
    """A random prefix of its own in the Redis at ``url``; its keys are deleted at the end."""
    import redis

    prefix = f"agentsessions_crash_{secrets.token_hex(4)}:"
    with redis.Redis.from_url(url, socket_connect_timeout=5) as client:
        client.ping()  # a missing server fails here, before anything is yielded
        try:
            yield functools.partial(open_redis, url, prefix)
        finally:
            delete_prefix(client, prefix)


def delete_prefix(client: Any, prefix: str) -> None:
    """Delete every key under ``prefix`` (SCAN, never KEYS: the server keeps answering others)."""
    pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"
    batch: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) == 1000:
            client.unlink(*batch)
            batch.clear()
    if batch:
        client.unlink(*batch)


@contextlib.contextmanager
def scratch_opener(kind: str, tmp_path: Path) -> Iterator[Opener]:
    """A scratch place of store ``kind`` (one of :data:`PERSISTENT`) and its picklable opener.

    A server that is not reachable fails the test in CI and skips it elsewhere.
    """
    if kind == "sqlite":
        with scratch_sqlite(tmp_path) as opener:
            yield opener
        return
    servers: dict[str, tuple[str, Callable[[], AbstractContextManager[Opener]]]] = {
        "postgres": ("PostgreSQL", lambda: scratch_postgres(POSTGRES_DSN)),
        "mysql": ("MariaDB", lambda: scratch_mysql(MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD)),
        "mongodb": ("MongoDB", lambda: scratch_mongodb(MONGODB_URI)),
        "redis": ("Redis", lambda: scratch_redis(REDIS_URL)),
    }
    name, scratch = servers[kind]
    with contextlib.ExitStack() as stack:
        yield require_server(name, lambda: stack.enter_context(scratch()))
