"""Scratch places at schema version 1, made from the copies in ``tests/fixtures/schema_v1``, and their version rows.

:func:`scratch_at` makes a place of one persistent backend at version 1 (as the previous
release created it), or empty (none of the tables), and yields the same kind of opener
:mod:`tests.support.backends` does. :func:`versions` reads the version rows a store's
database holds, and :func:`record_version` adds one, as a newer release's migration would.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from tests.support import backends
from tests.support.backends import Opener
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

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "schema_v1"


def v1_sql(name: str) -> str:
    """A version-1 schema kept in the fixtures: ``postgres``, ``mysql`` or ``sqlite``."""
    return (FIXTURES / f"{name}.sql").read_text(encoding="utf-8")


def v1_mysql_statements() -> list[str]:
    """The version-1 MySQL schema as the statements it was (each ends with ``;`` and a newline in the file)."""
    return [statement.strip() for statement in v1_sql("mysql").split(";\n") if statement.strip()]


def v1_mongodb_indexes() -> dict[str, list[Any]]:
    """The version-1 MongoDB indexes as ``IndexModel`` lists, by collection."""
    import pymongo

    kept = json.loads((FIXTURES / "mongodb_indexes.json").read_text(encoding="utf-8"))
    return {
        name: [pymongo.IndexModel([tuple(key) for key in doc.pop("key")], **doc) for doc in docs]
        for name, docs in kept.items()
    }


@contextlib.contextmanager
def scratch_at(kind: str, tmp_path: Path, version: int | None) -> Iterator[Opener]:
    """A scratch place of ``kind`` at ``version`` 1 (the previous release's schema) or ``None`` (empty)."""
    assert version in (1, None), "only version 1 is kept; a later version adds its own copy"
    if kind == "sqlite":
        path = tmp_path / "sessions.db"
        if version == 1:
            with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
                db.execute("PRAGMA journal_mode = WAL")
                db.executescript(v1_sql("sqlite"))
        yield _opener(backends.open_sqlite, str(path))
        return
    places: dict[str, tuple[str, Callable[[], AbstractContextManager[Opener]]]] = {
        "postgres": (
            "PostgreSQL",
            lambda: backends.scratch_postgres(POSTGRES_DSN, v1_sql("postgres") if version else ""),
        ),
        "mysql": (
            "MariaDB",
            lambda: backends.scratch_mysql(
                MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD, v1_mysql_statements() if version else []
            ),
        ),
        "mongodb": ("MongoDB", lambda: backends.scratch_mongodb(MONGODB_URI, v1_mongodb_indexes() if version else {})),
        "redis": ("Redis", lambda: backends.scratch_redis(REDIS_URL)),  # version 1: a session, no version
    }
    name, scratch = places[kind]
    with contextlib.ExitStack() as stack:
        opener = require_server(name, lambda: stack.enter_context(scratch()))
        if version == 1 and kind in ("mongodb", "redis"):
            _hold_a_session(opener)
        yield opener


def _hold_a_session(opener: Opener) -> None:
    """Make the scratch place one at version 1 that holds a session, with no version recorded.

    MongoDB and Redis have no tables: a place without sessions is a new one, whose version the
    first store call records. A session without steer keys is stored alike by both versions, so
    this release writes it; then its version record, made by that first call, is removed.
    """
    import agentsessions as agent

    with opener() as store:
        if type(store).__name__ == "MongoStore":  # this release's store needs its indexes to write
            from agentsessions.stores import mongodb

            for name, models in mongodb.INDEXES.items():
                store.database[name].create_indexes(models)
        store.save("made at version 1", [agent.Message.user("before versions were recorded")])
        if type(store).__name__ == "MongoStore":  # back to version 1's indexes, and no version
            store.database["agentsessions_schema"].delete_many({})
            kept = {
                doc["name"]
                for docs in json.loads((FIXTURES / "mongodb_indexes.json").read_text()).values()
                for doc in docs
            }
            for name in mongodb.INDEXES:
                for index in list(store.database[name].list_indexes()):
                    if index["name"] not in kept | {"_id_"}:
                        store.database[name].drop_index(index["name"])
        else:
            store.client.delete(store.prefix + "schema")


def _opener(function: Callable[..., AbstractContextManager[Any]], *args: Any) -> Opener:
    import functools

    return functools.partial(function, *args)


def versions(store: Any) -> list[int]:
    """The version rows the store's database holds, in the order of their versions (one per version applied)."""
    kind = type(store).__name__
    if kind == "SQLiteStore":
        with contextlib.closing(sqlite3.connect(store.path)) as db:
            return sorted(v for (v,) in db.execute("SELECT version FROM agentsessions_schema"))
    if kind == "PostgresStore":
        with store.pool.connection() as conn:
            return sorted(v for (v,) in conn.execute("SELECT version FROM agentsessions_schema").fetchall())
    if kind == "MySQLStore":
        conn = store.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT version FROM agentsessions_schema")
                return sorted(v for (v,) in cur.fetchall())
        finally:
            conn.close()
    if kind == "MongoStore":
        return sorted(
            doc["version"] for doc in store.database["agentsessions_schema"].find({"version": {"$exists": 1}})
        )
    if kind == "RedisStore":
        return sorted(int(v) for v in store.client.hkeys(store.prefix + "schema"))
    raise AssertionError(f"no versions for {kind}")


def record_version(store: Any, version: int) -> None:
    """Add a version row, as a newer release's migration would."""
    kind = type(store).__name__
    insert = "INSERT INTO agentsessions_schema (version, applied_at, applied_by) VALUES"
    if kind == "SQLiteStore":
        with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as db:
            db.execute(f"{insert} (?, 'now', 'a test')", (version,))
    elif kind == "PostgresStore":
        with store.pool.connection() as conn:
            conn.execute(f"{insert} (%s, now(), 'a test')", (version,))
    elif kind == "MySQLStore":
        conn = store.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"{insert} (%s, UTC_TIMESTAMP(6), 'a test')", (version,))
            conn.commit()
        finally:
            conn.close()
    elif kind == "MongoStore":
        store.database["agentsessions_schema"].insert_one({"version": version, "applied_by": "a test"})
    elif kind == "RedisStore":
        store.client.hset(store.prefix + "schema", str(version), "a test")
    else:
        raise AssertionError(f"no versions for {kind}")


def url_of(opener: Opener) -> str:
    """The store URL of a scratch place (what ``agentsessions migrate --store`` is given)."""
    import functools
    from urllib.parse import quote

    assert isinstance(opener, functools.partial)
    name, args = opener.func.__name__, opener.args
    if name == "open_sqlite":
        return f"sqlite://{Path(args[0]).resolve()}"
    if name == "open_postgres":
        return backends.postgres_url(args[0], args[1])
    if name == "open_mysql":
        return backends.mysql_url(*args)
    if name == "open_mongodb":
        return backends.mongodb_url(*args)
    if name == "open_redis":
        url, prefix = args
        return f"{url}?prefix={quote(prefix)}"
    raise AssertionError(f"no URL for {name}")
