"""``agentsessions migrate`` on every persistent store: plan, SQL, apply, exit codes, four at once, killed half-way.

Each test runs the real command (``python -m agentsessions``) in a subprocess against a real
server, on a database built at version 1 from ``tests/fixtures/schema_v1``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

import agentsessions as agent
from agentsessions.stores import sqlite
from tests.support.backends import Opener, store_params
from tests.support.schema_v1 import record_version, scratch_at, url_of, versions

VERSIONED = ("sqlite", "postgres", "mysql", "mongodb", "redis")
WANTED = sqlite.SCHEMA_VERSION  # every persistent store is at the same version (tests/stores/test_schema_versions.py)
MIGRATED = list(range(2, WANTED + 1))  # the versions a version-1 database is taken through
ROOT = Path(__file__).resolve().parent.parent
# The full count: AGENTSESSIONS_CRASH_TRIALS=100 python -m pytest tests/test_migrate.py -k killed -s
TRIALS = int(os.environ.get("AGENTSESSIONS_CRASH_TRIALS", "4"))
PATIENCE = 300.0  # a bound for a stuck process, not a pace
# What the step from version 1 shows: SQL stores create the steer keys' table; MongoDB and
# Redis keep steer keys in what they already write, so their step only records the version.
STEP = {
    "sqlite": "CREATE TABLE IF NOT EXISTS agentsessions_steer_keys",
    "postgres": "CREATE TABLE IF NOT EXISTS agentsessions_steer_keys",
    "mysql": "CREATE TABLE IF NOT EXISTS agentsessions_steer_keys",
    "mongodb": 'db.runCommand({"update": "agentsessions_schema", "updates": [{"q": {"_id": 2}',
    "redis": "HSETNX ",
}
COMMENT = {"mongodb": "//", "redis": "#"}  # the others' statements are SQL, whose comments start with --


pytestmark = pytest.mark.slow  # every test starts interpreters


@pytest.fixture(params=store_params(*VERSIONED))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def migrate(url: str, *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agentsessions", "migrate", "--store", url, *options]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE, check=False)


def start(url: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "agentsessions", "migrate", "--store", url, "--wait", str(PATIENCE)]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_until(stream: IO[str], wanted: str) -> list[str]:
    """The lines up to and including the first that contains ``wanted`` (the process prints as it goes)."""
    lines = []
    for line in stream:
        lines.append(line)
        if wanted in line:
            return lines
    raise AssertionError(f"the output ended before {wanted!r}: {''.join(lines)}")


def found_version(opener: Opener) -> int | None:
    from agentsessions.stores.urls import open_migrator, parse_url

    with open_migrator(parse_url(url_of(opener))) as migrator:
        return migrator.found()


def statements_from_1(opener: Opener) -> int:
    """How many statements the first step from version 1 (to version 2) has."""
    from agentsessions.stores.urls import open_migrator, parse_url

    with open_migrator(parse_url(url_of(opener))) as migrator:
        return len(migrator.plan(1)[0].statements)


# --- What it prints, what it applies, how it exits ----------------------------------------------


def test_plan_prints_the_steps_and_applies_nothing(kind: str, tmp_path: Path) -> None:
    with scratch_at(kind, tmp_path, version=1) as opener:
        done = migrate(url_of(opener), "--plan")
        assert done.returncode == 0, done.stderr
        assert f"schema version 1; this release uses version {WANTED}" in done.stdout
        assert "to version 2: steer keys" in done.stdout and "to version 3: approvals" in done.stdout
        assert "to version 4: session metadata" in done.stdout
        assert "to version 5: steers queued for the next run" in done.stdout
        assert "to version 6: each session's preview and usage" in done.stdout
        assert STEP[kind] in done.stdout
        if kind not in COMMENT:  # the SQL stores create a table a version
            assert "CREATE TABLE IF NOT EXISTS agentsessions_approvals" in done.stdout
        assert found_version(opener) == 1


def test_sql_prints_a_script_that_migrates(kind: str, tmp_path: Path) -> None:
    with scratch_at(kind, tmp_path, version=1) as opener:
        done = migrate(url_of(opener), "--sql")
        assert done.returncode == 0, done.stderr
        assert found_version(opener) == 1
        comment = COMMENT.get(kind, "--")
        starts = (comment, " ", ")", "db.runCommand(")  # or a statement's keyword: CREATE, INSERT, HSETNX
        assert all(line.startswith(starts) or line[:1].isupper() for line in done.stdout.splitlines())
        assert ("has no SQL" in done.stdout) == (kind in COMMENT)
        _run_script(opener, done.stdout)  # what a team's own migration tool would do with it
        assert found_version(opener) == WANTED
        again = migrate(url_of(opener), "--sql")
        heads = 2 if kind in COMMENT else 1  # the version found, and that there is no SQL
        assert (again.returncode, again.stdout.splitlines()[heads:]) == (0, [])  # up to date: nothing to run


def _run_script(opener: Opener, script: str) -> None:
    if sqlite_path(opener):  # not through a store: opening one migrates the file
        import sqlite3

        with contextlib.closing(sqlite3.connect(sqlite_path(opener), isolation_level=None)) as db:
            db.executescript(script)
        return
    with opener() as store:
        if kind_of(store) == "PostgresStore":
            with store.pool.connection() as conn:
                conn.execute(script)
        elif kind_of(store) == "MySQLStore":  # one statement at a time, as a MySQL client sends them
            conn = store.connect()
            try:
                with conn.cursor() as cur:
                    body = "".join(line for line in script.splitlines(keepends=True) if not line.startswith("--"))
                    for statement in filter(None, (s.strip() for s in body.split(";\n"))):
                        cur.execute(statement.rstrip(";"))
                conn.commit()
            finally:
                conn.close()
        elif kind_of(store) == "MongoStore":  # each line a db.runCommand(JSON), as mongosh would run it
            for line in script.splitlines():
                if line.startswith("db.runCommand("):
                    store.database.command(json.loads(line.removeprefix("db.runCommand(").removesuffix(")")))
        elif kind_of(store) == "RedisStore":  # each line a command, as redis-cli would send it
            for line in script.splitlines():
                if not line.startswith("#"):
                    store.client.execute_command(*shlex.split(line))
        else:
            raise AssertionError(kind_of(store))


def sqlite_path(opener: Opener) -> str:
    """The file of a SQLite scratch place, ``""`` for the others."""
    return str(opener.args[0]) if opener.func.__name__ == "open_sqlite" else ""  # type: ignore[attr-defined]


def kind_of(store: Any) -> str:
    return type(store).__name__


def test_it_migrates_then_finds_the_database_up_to_date(kind: str, tmp_path: Path) -> None:
    with scratch_at(kind, tmp_path, version=1) as opener:
        done = migrate(url_of(opener))
        assert done.returncode == 0, done.stderr
        assert f"migrated to version {WANTED}" in done.stdout
        count = statements_from_1(opener)
        assert f"ran {count}/{count}" in done.stdout
        again = migrate(url_of(opener))
        assert (again.returncode, again.stdout.splitlines()[-1]) == (0, "up to date")
        with opener() as store:
            store.add_steer("s", "works")
            assert versions(store) == MIGRATED


def test_on_an_empty_database_it_creates_the_current_version(kind: str, tmp_path: Path) -> None:
    if kind == "sqlite":
        pytest.skip("a SQLite file that does not exist is refused (a typo must not make one)")
    with scratch_at(kind, tmp_path, version=None) as opener:
        done = migrate(url_of(opener))
        assert done.returncode == 0, done.stderr
        assert "schema version none (no tables)" in done.stdout and f"migrated to version {WANTED}" in done.stdout
        with opener() as store:
            store.save("s", [agent.Message.user("hi")])
            assert versions(store) == [WANTED]


@pytest.mark.parametrize("ahead", [1, 2])
def test_a_newer_schema_exits_3(kind: str, tmp_path: Path, ahead: int) -> None:
    with scratch_at(kind, tmp_path, version=1) as opener:
        assert migrate(url_of(opener)).returncode == 0
        with opener() as store:
            record_version(store, WANTED + ahead)
        done = migrate(url_of(opener))
        assert done.returncode == 3, done.stderr
        works = "still works with it" if ahead == 1 else "cannot use it"
        assert f"the schema is version {WANTED + ahead}" in done.stderr and works in done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_bad_usage_exits_2_and_a_failure_1(tmp_path: Path) -> None:
    assert migrate("nosuch://x").returncode == 2
    assert migrate(f"sqlite://{tmp_path}/x.db", "--wait", "soon").returncode == 2
    missing = migrate(f"sqlite://{tmp_path}/missing.db")
    assert missing.returncode == 1 and "no SQLite file" in missing.stderr
    unreachable = migrate("postgresql://nobody:secret@127.0.0.1:1/db")
    assert unreachable.returncode == 1 and "secret" not in unreachable.stderr
    assert unreachable.stderr.count("\n") == 1


# --- Four at once, and killed half-way ------------------------------------------------------


@contextlib.contextmanager
def holding_the_lock(opener: Opener) -> Iterator[None]:
    """Hold the lock every migration takes, as a migration of another replica would."""
    if sqlite_path(opener):  # the file's write lock, taken without opening a store (that would migrate it)
        import sqlite3

        with contextlib.closing(sqlite3.connect(sqlite_path(opener), isolation_level=None)) as db:
            db.execute("BEGIN IMMEDIATE")
            yield
            db.execute("COMMIT")
        return
    with opener() as store:
        if kind_of(store) == "PostgresStore":
            from agentsessions.stores.postgres._schema import LOCK

            with store.pool.connection() as conn:
                conn.execute("SELECT pg_advisory_lock(%s)", (LOCK,))
                yield
                conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK,))
        elif kind_of(store) == "MySQLStore":
            from agentsessions.stores.mysql._schema import lock, unlock

            conn = store.connect()
            try:
                with conn.cursor() as cur:
                    assert lock(cur, 30)
                    yield
                    unlock(cur)
            finally:
                conn.close()
        elif kind_of(store) == "MongoStore":  # a live lock document, as a migration renewing it leaves
            locks = store.database["agentsessions_schema"]
            locks.insert_one({"_id": "migrate lock", "holder": "a test", "expires": 2**62})
            yield
            locks.delete_one({"_id": "migrate lock", "holder": "a test"})
        elif kind_of(store) == "RedisStore":
            store.client.set(store.prefix + "migrate", "a test", nx=True, px=round(PATIENCE * 1000))
            yield
            store.client.delete(store.prefix + "migrate")
        else:
            raise AssertionError(kind_of(store))


def test_four_at_once_one_applies_and_all_exit_0(kind: str, tmp_path: Path) -> None:
    with scratch_at(kind, tmp_path, version=1) as opener:
        url = url_of(opener)
        with holding_the_lock(opener):
            processes = [start(url) for _ in range(4)]
            for process in processes:  # each read version 1 and now waits for the lock
                assert process.stdout is not None
                read_until(process.stdout, "applying, under the migration lock")
        outputs = [process.communicate(timeout=PATIENCE) for process in processes]
        assert [process.returncode for process in processes] == [0] * 4, [err for _, err in outputs]
        applied = [out for out, _ in outputs if f"migrated to version {WANTED}" in out]
        waited = [out for out, _ in outputs if "another migration applied it meanwhile" in out]
        assert (len(applied), len(waited)) == (1, 3), outputs
        with opener() as store:
            assert versions(store) == MIGRATED  # recorded once: nothing applied twice


@pytest.mark.crash
def test_a_migration_killed_half_way_finishes_when_run_again(kind: str, tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    for trial in range(TRIALS):
        (tmp_path / str(trial)).mkdir()
        with scratch_at(kind, tmp_path / str(trial), version=1) as opener:
            url = url_of(opener)
            statements = statements_from_1(opener)
            after = rng.randrange(statements)  # killed after this statement ran, before the next
            process = start(url)
            assert process.stdout is not None
            read_until(process.stdout, f"ran {after + 1}/{statements}")
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=PATIENCE)
            again = migrate(url)
            where = f"seed {seed}, trial {trial}, killed after statement {after + 1}"
            assert again.returncode == 0, f"{where}: {again.stderr}"
            # Killed after its commit, it finished; else this run finishes it.
            last = again.stdout.splitlines()[-1]
            assert last in ("up to date", f"migrated to version {WANTED}"), f"{where}: {again.stdout}"
            with opener() as store:
                assert versions(store) == MIGRATED, where
                store.add_steer("s", "the migrated store works")
                assert store.take_steers("s") == ["the migrated store works"], where


LAPSING = ("mongodb", "redis")  # the stores whose lock outlives a killed holder until its lease ends


@pytest.mark.parametrize("kind", store_params(*LAPSING))
def test_the_lock_a_killed_migration_left_lapses_and_the_next_applies(kind: str, tmp_path: Path) -> None:
    with scratch_at(kind, tmp_path, version=1) as opener:
        with opener() as store:
            _leave_a_lock(store)  # what a migration killed while holding the lock leaves: one lease to run
        held = migrate(url_of(opener), "--wait", "0.5")
        assert held.returncode == 1 and "another migration held the lock" in held.stderr, held.stderr
        again = migrate(url_of(opener), "--wait", "60")
        assert again.returncode == 0, again.stderr
        assert f"migrated to version {WANTED}" in again.stdout
        with opener() as store:
            assert versions(store) == MIGRATED and not _lock_left(store)


def _leave_a_lock(store: Any) -> None:
    if kind_of(store) == "MongoStore":
        from agentsessions.stores.mongodb._schema import LOCK_LEASE

        expires = int(time.time() * 1e6 + LOCK_LEASE * 1e6)
        store.database["agentsessions_schema"].insert_one(
            {"_id": "migrate lock", "holder": "killed", "expires": expires}
        )
    else:
        from agentsessions.stores.redis._schema import LOCK_LEASE

        store.client.set(store.prefix + "migrate", "killed", px=round(LOCK_LEASE * 1000))


def _lock_left(store: Any) -> bool:
    if kind_of(store) == "MongoStore":
        return store.database["agentsessions_schema"].find_one({"_id": "migrate lock"}) is not None
    return bool(store.client.exists(store.prefix + "migrate"))
