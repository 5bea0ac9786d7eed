"""Encryption at rest on every store: the whole conformance suite wrapped, and the raw databases scanned.

For each store (memory, SQLite, PostgreSQL, MariaDB, MongoDB on SecantusDB, Redis):
``storetest`` passes over ``encrypted(store, keyring)``; after a real run, the database
itself (the SQLite files' bytes, every PostgreSQL and MariaDB row, every MongoDB document,
every Redis value under the store's prefix) holds no message text, steer text, tool input
or tool result, while the same scan finds them all in a session saved unencrypted beside
it; a ciphertext copied into another session or position, a wrong key and a missing key
each raise ``DecryptionError``.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("cryptography", extra="crypto")  # before the imports that need it

import contextlib
import functools
import itertools
import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.crypto import DecryptionError, Keyring, encrypted
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing import storetest
from tests.support.backends import (
    PERSISTENT,
    Opener,
    open_mongodb,
    open_mysql,
    open_postgres,
    open_redis,
    open_sqlite,
    scratch_opener,
    store_params,
)

pytestmark = pytest.mark.slow  # the whole conformance suite, wrapped, on every store

KEYRING = Keyring({"k1": Keyring.new_key()}, "k1")
KINDS = ("memory", *PERSISTENT)
# SecantusDB scans whole collections per update, so MongoDB runs fewer examples (as test_store_mongodb).
EXAMPLES = {"mongodb": 25}


@pytest.fixture(scope="module", params=store_params(*KINDS))
def place(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Opener]:
    """A scratch place of each store in turn, shared by this module's tests: its opener."""
    if request.param == "memory":
        yield functools.partial(contextlib.nullcontext, MemoryStore())
        return
    with scratch_opener(request.param, tmp_path_factory.mktemp(request.param)) as opener:
        yield opener


@pytest.fixture
def stores(place: Opener) -> Iterator[tuple[Any, Any]]:
    """Two store objects over the place, as two replicas open it."""
    with place() as one, place() as two:
        yield one, two


@pytest.mark.parametrize("name", storetest.properties())
def test_every_store_wrapped_keeps_the_contract(name: str, place: Opener, stores: tuple[Any, Any]) -> None:
    objects = itertools.cycle(stores)  # a new wrapper per call, over the two replicas in turn
    kind = _kind(place)
    report = storetest.check(name, lambda: encrypted(next(objects), KEYRING), max_examples=EXAMPLES.get(kind, 50))
    if kind == "memory" and name == storetest.SCHEMA:  # no database, so no schema version
        assert report.skipped == (name,) and not report.examples, report
        return
    if name == storetest.PRUNE and not hasattr(encrypted(stores[0], KEYRING), "prune"):  # until it prunes (issue 28)
        assert report.skipped == (name,) and not report.examples, report
        return
    assert report.skipped == () and report.examples[name] > 0, report
    assert report.replicas


# --- The raw database ----------------------------------------------------------------------------


def _kind(place: Opener) -> str:
    assert isinstance(place, functools.partial)
    kinds = {open_sqlite: "sqlite", open_postgres: "postgres", open_mysql: "mysql", open_mongodb: "mongodb"}
    return {**kinds, open_redis: "redis"}.get(place.func, "memory")


def _as_bytes(value: object) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return b"" if value is None else str(value).encode()


def raw_bytes(place: Opener) -> bytes:
    """Everything the place's database holds, as the database gives it to a client of its own."""
    assert isinstance(place, functools.partial)
    kind, args = _kind(place), place.args
    if kind == "memory":  # the memory store's own objects are its database
        (store,) = args
        return b"".join(
            _as_bytes(agent.dumps(store.messages(info.id)))
            + b"".join(_as_bytes(s.text) for s in store.peek_steers(info.id))
            for info in store.sessions()
        )
    if kind == "sqlite":  # the file, its write-ahead log and anything else SQLite keeps beside it
        path = Path(args[0])
        return b"".join(part.read_bytes() for part in sorted(path.parent.glob(path.name + "*")))
    rows: dict[str, Callable[..., Iterator[object]]] = {
        "postgres": _postgres,
        "mysql": _mysql,
        "mongodb": _mongodb,
        "redis": _redis,
    }
    return b"".join(_as_bytes(value) for value in rows[kind](*args))


def _postgres(dsn: str, schema: str) -> Iterator[object]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [schema])
        for (table,) in tables.fetchall():
            for row in conn.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall():
                yield from row


def _mysql(host: str, port: int, user: str, password: str, database: str) -> Iterator[object]:
    import pymysql

    conn = pymysql.connect(host=host, port=port, user=user, password=password, database=database)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW TABLES")
            for (table,) in cur.fetchall():
                cur.execute(f"SELECT * FROM `{table}`")
                for row in cur.fetchall():
                    yield from row
    finally:
        conn.close()


def _mongodb(uri: str, database: str) -> Iterator[object]:
    import bson
    import pymongo
    from pymongo.database import Database

    client: pymongo.MongoClient[dict[str, Any]]
    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000) as client:
        db: Database[dict[str, Any]] = client[database]
        for name in db.list_collection_names():
            for document in db[name].find():
                yield bson.encode(document)


def _redis(url: str, prefix: str) -> Iterator[object]:
    import redis

    with redis.Redis.from_url(url) as client:
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"
        for key in client.scan_iter(match=pattern, count=1000):
            kind = client.type(key).decode()
            yield key
            if kind == "string":
                yield client.get(key)
            elif kind == "hash":
                yield from itertools.chain.from_iterable(client.hgetall(key).items())
            elif kind == "zset":
                yield from (member for member, _ in client.zrange(key, 0, -1, withscores=True))
            elif kind == "list":
                yield from client.lrange(key, 0, -1)
            elif kind == "set":
                yield from client.smembers(key)
            else:
                raise AssertionError(f"a Redis {kind} at {key!r}: the scan does not read that type yet")


def converse(store: Any, session_id: str, tag: str) -> list[str]:
    """A real run over ``store``, every field carrying a word of its own; returns the words."""
    words = {k: f"{k}-{tag}-{secrets.token_hex(6)}" for k in ("question", "thought", "argument", "result", "answer")}
    words |= {"steer": f"steer-{tag}-{secrets.token_hex(6)}", "pending": f"pending-{tag}-{secrets.token_hex(6)}"}

    @agent.tool
    def lookup(query: str) -> str:
        """Look the query up."""
        return words["result"]

    session = agent.open(session_id, store)
    call = agent.Message(
        agent.Role.ASSISTANT,
        [
            agent.Content.thinking(words["thought"], "signature"),
            agent.Content.tool_use("call-1", "lookup", json.dumps({"query": words["argument"]})),
        ],
    )

    def first(_: agent.ModelRequest) -> agent.Message:
        session.steer(words["steer"])  # through the store, taken before the next request
        return call

    endpoint = ScriptedEndpoint([first, agent.Message.assistant(words["answer"])])
    result = agent.Runner().run(
        agent.Spec(session=session, tools=[lookup]), [agent.Message.user(words["question"])], endpoint
    )
    told = agent.dumps(result.messages)
    assert all(word in told for key, word in words.items() if key != "pending"), told
    session.steer(words["pending"])  # left waiting in the store
    return list(words.values())


def test_the_raw_database_holds_none_of_an_encrypted_sessions_text(place: Opener, stores: tuple[Any, Any]) -> None:
    store, replica = stores
    token = secrets.token_hex(4)
    hidden = converse(encrypted(store, KEYRING), f"encrypted-{token}", "hidden")
    shown = converse(store, f"plain-{token}", "shown")  # the scan must find these, or it proves nothing
    raw = raw_bytes(place)
    assert [word for word in shown if word.encode() not in raw] == []
    assert [word for word in hidden if word.encode() in raw] == []
    assert hidden[0] in encrypted(replica, KEYRING).messages(f"encrypted-{token}")[0].text


# --- Failing closed --------------------------------------------------------------------------------


def test_copied_ciphertexts_and_wrong_keys_raise_on_every_store(stores: tuple[Any, Any]) -> None:
    store, replica = stores
    a, b = (f"copy-{secrets.token_hex(4)}-{n}" for n in "ab")
    encrypted(store, KEYRING).save(a, [agent.Message.user("one"), agent.Message.assistant("two")])
    encrypted(store, KEYRING).add_steer(a, "a steer")
    rows = store.messages(a)
    reader = encrypted(replica, KEYRING)

    def refused(call: Any, session_id: str, key_id: str, says: str) -> None:
        with pytest.raises(DecryptionError, match=says) as caught:
            call()
        assert (caught.value.session_id, caught.value.key_id) == (session_id, key_id)

    store.save(b, rows)  # into another session
    refused(lambda: reader.messages(b), b, "k1", "message 0 does not decrypt")
    store.save(a, [rows[0], rows[0]])  # into another position of its own session
    refused(lambda: reader.messages(a), a, "k1", "message 1 does not decrypt")
    store.save(a, rows)
    store.add_steer(b, store.peek_steers(a)[0].text)  # a steer into another session
    refused(lambda: reader.peek_steers(b), b, "k1", "a steer does not decrypt")
    for other, says in (
        (Keyring({"k1": Keyring.new_key()}, "k1"), "does not decrypt"),
        (Keyring({"k9": Keyring.new_key()}, "k9"), "does not hold"),
    ):
        wrong = encrypted(replica, other)
        refused(functools.partial(wrong.messages, a), a, "k1", says)
        refused(functools.partial(wrong.peek_steers, a), a, "k1", says)
    assert [m.text for m in reader.messages(a)] == ["one", "two"] and reader.take_steers(a) == ["a steer"]
