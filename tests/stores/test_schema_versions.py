"""Schema versions on every persistent store: version 1 data read back after migrating, the previous
release working on a migrated database, the next version accepted, two newer refused, older refused by name.

Version-1 databases are built from the copies in ``tests/fixtures/schema_v1`` and filled by
the previous release itself (its package, kept as a zip there, run in a subprocess).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.stores import sqlite
from agentsessions.stores.kit import schema
from tests.support.backends import Opener, store_params
from tests.support.previous_release import run_previous, snapshot
from tests.support.schema_v1 import record_version, scratch_at, versions

VERSIONED = ("sqlite", "postgres", "mysql", "mongodb", "redis")
"""The persistent stores that record a schema version, as tests.support.backends names them."""

WANTED = sqlite.SCHEMA_VERSION  # every persistent store is at the same version (checked below)
MIGRATED = list(range(2, WANTED + 1))
"""The versions a version-1 database is taken through, one step each."""


@contextlib.contextmanager
def migrated(opener: Opener) -> Iterator[Any]:
    """A store over the place ``opener`` opens, its database migrated as ``agentsessions migrate`` would."""
    with opener() as store:
        migrator = getattr(store, "migrator", None)  # SQLite migrated itself on open
        if migrator is not None:
            applied = migrator().apply(wait=30)
            assert [step.version for step in applied.steps] == MIGRATED
    with opener() as store:  # a new store object: the one above may have cached the old version
        yield store


# --- The kit -------------------------------------------------------------------------------


def test_a_store_accepts_its_version_and_the_next() -> None:
    assert schema.check_version(2, 2, store="S", create="run X") == 2
    assert schema.check_version(3, 2, store="S", create="run X") == 3


def test_an_older_version_names_both_versions_and_the_command() -> None:
    with pytest.raises(agent.SchemaMissingError) as caught:
        schema.check_version(1, 2, store="PostgreSQL store", create="run X", url="postgresql://...")
    message = str(caught.value)
    assert "version 1" in message and "version 2" in message
    assert "agentsessions migrate --store postgresql://..." in message


def test_no_tables_names_the_schema_to_run() -> None:
    with pytest.raises(agent.SchemaMissingError, match="its tables are missing; run X"):
        schema.check_version(None, 2, store="S", create="run X")


def test_two_versions_newer_is_refused() -> None:
    with pytest.raises(agent.SchemaTooNewError, match="version 4, made by a newer agentsessions") as caught:
        schema.check_version(4, 2, store="S", create="run X")
    assert isinstance(caught.value, agent.StoreError)


def test_a_plan_steps_through_each_version() -> None:
    create = schema.Step(3, "create", ("CREATE;",))
    migrations = {1: ["A", "B;"], 2: ["C"]}
    summaries = {1: "one to two", 2: "two to three"}
    steps = schema.plan(1, 3, create=create, migrations=migrations, summaries=summaries)
    assert steps == [schema.Step(2, "one to two", ("A;", "B;")), schema.Step(3, "two to three", ("C;",))]
    assert schema.plan(None, 3, create=create, migrations=migrations, summaries=summaries) == [create]
    assert schema.plan(3, 3, create=create, migrations=migrations, summaries=summaries) == []
    assert schema.plan(4, 3, create=create, migrations=migrations, summaries=summaries) == []


def test_sql_statements_split_where_each_statement_ends() -> None:
    import sqlite3

    script = "-- a comment\nCREATE TABLE a (x TEXT DEFAULT ';');\n\nINSERT INTO a VALUES ('b;\nc');\n"
    assert schema.sql_statements(script, sqlite3.complete_statement) == [
        "CREATE TABLE a (x TEXT DEFAULT ';');",
        "INSERT INTO a VALUES ('b;\nc');",
    ]


# --- Every persistent store ----------------------------------------------------------------


@pytest.fixture(params=store_params(*VERSIONED))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.slow  # the previous release runs in subprocesses
def test_version_1_data_reads_back_unchanged_and_the_previous_release_keeps_working(kind: str, tmp_path: Path) -> None:
    prefix = f"v1-{secrets.token_hex(3)}-"
    with scratch_at(kind, tmp_path, version=1) as opener:
        written = run_previous("fill", opener, prefix)
        with migrated(opener) as store:
            assert snapshot(store, list(written)) == written
            assert versions(store) == MIGRATED
            assert store.schema_version() == WANTED
        used = run_previous("use", opener, prefix)
        with opener() as store:
            session_id = prefix + "used"
            read = json.loads(agent.dumps(store.messages(session_id)[:4]))["messages"]  # before the steer it carried
            assert json.loads(used["read"])["messages"] == read  # the dumps forms' versions differ
            assert (used["state"], used["peeked"], used["taken"]) == (
                "idle",
                ["from the previous release"],
                ["taken by hand"],
            )
            assert used["listed"].count(session_id) == 1 and used["deleted"] and used["gone"]
            assert snapshot(store, [session_id]) == used["snapshot"]
            info = store.info(session_id)
            assert (info.state, info.length) == (agent.RunState.FINISHED, 5)
            assert store.take_steers(session_id) == []
            assert versions(store) == MIGRATED


@pytest.mark.slow
def test_the_previous_release_takes_a_steer_this_release_left(kind: str, tmp_path: Path) -> None:
    prefix = f"v1-{secrets.token_hex(3)}-"
    with scratch_at(kind, tmp_path, version=1) as opener, migrated(opener) as store:
        store.add_steer(prefix + "used", "from this release")
        used = run_previous("use", opener, prefix)
        assert used["peeked"] == ["from this release", "from the previous release"]


def test_an_older_schema_is_refused_by_name(kind: str, tmp_path: Path) -> None:
    if kind == "sqlite":
        pytest.skip("SQLite migrates its own file on open")
    with scratch_at(kind, tmp_path, version=1) as opener, opener() as store:
        with pytest.raises(agent.SchemaMissingError) as caught:
            store.messages("any")
        message = str(caught.value)
        assert "version 1" in message and f"version {WANTED}" in message and "agentsessions migrate --store" in message


def test_a_new_database_records_its_version(kind: str, tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        opener = stack.enter_context(scratch_at(kind, tmp_path, version=None))
        if kind != "sqlite":
            with opener() as store:
                store.migrator().apply(wait=30)  # on an empty database: the whole schema
        store = stack.enter_context(opener())
        store.save("s", [agent.Message.user("hi")])
        assert store.schema_version() == WANTED
        assert versions(store) == [WANTED]
        assert isinstance(store, schema.VersionedStore)
        assert kind == "sqlite" or isinstance(store, schema.MigratingStore)  # SQLite migrates itself on open


@pytest.mark.parametrize("name", ["sqlite", "postgres", "mysql", "mongodb", "redis"])
def test_every_persistent_store_module_exports_its_version_and_migrations(name: str) -> None:
    import importlib

    module = importlib.import_module(f"agentsessions.stores.{name}")
    assert module.SCHEMA_VERSION == WANTED
    assert sorted(module.MIGRATIONS) == list(range(1, WANTED)) and callable(module.migrator)
    assert {"SCHEMA_VERSION", "MIGRATIONS", "migrator"} <= set(module.__all__)


def test_the_next_version_is_accepted_and_two_newer_refused(kind: str, tmp_path: Path) -> None:
    with scratch_at(kind, tmp_path, version=1) as opener, migrated(opener) as store:
        assert store.schema_version() == WANTED
        record_version(store, WANTED + 1)
        with opener() as newer:
            newer.save("s", [agent.Message.user("hi")])  # a replica not yet upgraded keeps working
            assert newer.schema_version() == WANTED + 1
        record_version(store, WANTED + 2)
        with pytest.raises(agent.SchemaTooNewError, match=f"version {WANTED + 2}"), opener() as newest:
            newest.messages("s")
        store.save("s", [agent.Message.user("the object that checked before still works")])


def test_the_version_is_read_once_per_store_object(kind: str, tmp_path: Path) -> None:
    with scratch_at(kind, tmp_path, version=1) as opener, migrated(opener) as store:
        store.save("s", [agent.Message.user("hi")])
        _drop_versions(store)
        store.save("s", [agent.Message.user("still")])  # no query for the version after the first
        assert store.messages("s") == [agent.Message.user("still")]
        if kind == "sqlite":  # a new object reads it: no rows, so version 1, which SQLite migrates on open
            with opener() as fresh:
                assert (fresh.schema_version(), versions(fresh)) == (WANTED, MIGRATED)
            return
        with pytest.raises(agent.SchemaMissingError, match="version 1"), opener() as fresh:
            fresh.messages("s")  # a new object reads it: no rows, so version 1


def _drop_versions(store: Any) -> None:
    kind = type(store).__name__
    if kind == "SQLiteStore":
        import sqlite3

        with contextlib.closing(sqlite3.connect(store.path, isolation_level=None)) as db:
            db.execute("DELETE FROM agentsessions_schema")
    elif kind == "PostgresStore":
        with store.pool.connection() as conn:
            conn.execute("DELETE FROM agentsessions_schema")
    elif kind == "MySQLStore":
        conn = store.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("DELETE FROM agentsessions_schema")
            conn.commit()
        finally:
            conn.close()
    elif kind == "MongoStore":
        store.database["agentsessions_schema"].delete_many({})
    elif kind == "RedisStore":
        store.client.delete(store.prefix + "schema")
    else:
        raise AssertionError(kind)


# --- SQLite migrates its own file on open, while other processes have it open ------------------


def _open_at_once(path: str, barrier: Any, results: Any) -> None:
    from agentsessions.stores import sqlite

    barrier.wait(timeout=300)  # every process opens the version-1 file at the same instant
    with contextlib.closing(sqlite.open(path)) as store:
        session_id = f"process-{os.getpid()}"
        store.save(session_id, [agent.Message.user(session_id)])
        results.put((store.schema_version(), store.messages(session_id) == [agent.Message.user(session_id)]))


@pytest.mark.slow  # four spawned interpreters
def test_sqlite_migrates_once_while_processes_open_it_at_once_and_one_reads(tmp_path: Path) -> None:
    import multiprocessing
    import sqlite3

    with scratch_at("sqlite", tmp_path, version=1) as opener:
        path = str(opener.args[0])  # type: ignore[attr-defined]
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as reader:
            reader.execute("INSERT INTO agentsessions_sessions (id, revision, length) VALUES (x'61', 1, 0)")
            reader.execute("BEGIN")  # a read transaction held open across the migration
            assert reader.execute("SELECT count(*) FROM agentsessions_sessions").fetchone() == (1,)
            context = multiprocessing.get_context("spawn")
            barrier, results = context.Barrier(4), context.Queue()
            processes = [context.Process(target=_open_at_once, args=(path, barrier, results)) for _ in range(4)]
            for process in processes:
                process.start()
            outcomes = [results.get(timeout=300) for _ in processes]
            for process in processes:
                process.join(timeout=60)
                assert process.exitcode == 0
            assert outcomes == [(WANTED, True)] * 4
            # The reader still reads its snapshot, from before the migration and the saves.
            assert reader.execute("SELECT count(*) FROM agentsessions_sessions").fetchone() == (1,)
            reader.execute("COMMIT")
            assert reader.execute("SELECT count(*) FROM agentsessions_sessions").fetchone() == (5,)
            assert reader.execute("SELECT count(*) FROM agentsessions_steer_keys").fetchone() == (0,)
        with opener() as store:
            assert versions(store) == MIGRATED  # migrated once
