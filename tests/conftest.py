"""Shared test plumbing: where the database servers are, and what to do when one is missing.

In CI (``CI`` set) a missing server fails the test; elsewhere it skips, saying which
server and how to start it. Connection settings come from environment variables whose
defaults are this project's machines.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import agentsessions as agent

POSTGRES_DSN = os.environ.get("AGENTSESSIONS_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")
MYSQL_HOST = os.environ.get("AGENTSESSIONS_TEST_MYSQL_HOST", "127.0.0.1")
MYSQL_PORT = int(os.environ.get("AGENTSESSIONS_TEST_MYSQL_PORT", "3306"))
MYSQL_USER = os.environ.get("AGENTSESSIONS_TEST_MYSQL_USER", "root")
MYSQL_PASSWORD = os.environ.get("AGENTSESSIONS_TEST_MYSQL_PASSWORD", "")
# Unset: the tests start a SecantusDB server (a MongoDB wire-protocol server) in-process.
MONGODB_URI = os.environ.get("AGENTSESSIONS_TEST_MONGODB", "")
REDIS_URL = os.environ.get("AGENTSESSIONS_TEST_REDIS", "redis://127.0.0.1:6379/0")

HOW_TO_START = {
    "PostgreSQL": "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
    "MariaDB": "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
    "Redis": "redis-server --daemonize yes",
    "MongoDB": 'pip install "SecantusDB==0.7.0b3" (the tests start it), or set AGENTSESSIONS_TEST_MONGODB',
}

T = TypeVar("T")


def skip_without(*modules: str, extra: str) -> None:
    """At a test module's top: outside CI, skip the module when a driver it needs is not installed.

    In CI nothing is skipped: the import that follows fails, and so does the run.
    """
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing and not os.environ.get("CI"):
        pytest.skip(
            f"needs {', '.join(missing)}: pip install -e '.[test]' (or agentsessions[{extra}])", allow_module_level=True
        )


def require_server(name: str, connect: Callable[[], T]) -> T:
    """Return ``connect()``; if the server is not there, fail in CI and skip elsewhere."""
    try:
        return connect()
    except Exception as error:
        message = f"{name} is not reachable ({error}); start it with: {HOW_TO_START[name]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def numbered_transcript(n: int, tag: str = "m") -> list[agent.Message]:
    """``n`` short messages, user and assistant in turn, each text unique within ``tag``."""
    return [agent.Message.user(f"{tag}{i}") if i % 2 == 0 else agent.Message.assistant(f"{tag}{i}") for i in range(n)]


def wait_for(what: str, probe: Callable[[], Any], seconds: float = 20.0, every: float = 0.02) -> Any:
    """Poll ``probe`` until it returns something true, and return that; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def check_replicas_notice_each_other(
    store: agent.Store, open_replica: Callable[[], agent.Store], session_id: str, messages: list[agent.Message]
) -> None:
    """Saves through two store objects over one database stay right whatever the other wrote since.

    ``store`` has saved ``messages`` already; ``open_replica`` makes a new object over the same data.
    """
    other = open_replica()  # never saw the session: it replaces every row, and is right
    other.save(session_id, messages[:3])
    assert store.messages(session_id) == messages[:3]
    store.save(session_id, messages[:4])  # the stored revision is one it read just now
    assert other.messages(session_id) == messages[:4]
    other.save(session_id, messages[:2])  # now `store` holds a stale revision: it must notice
    store.save(session_id, messages[:5])
    assert open_replica().messages(session_id) == messages[:5]


# Markers (pyproject.toml lists them): `pytest -m fast` runs what needs no server, no
# subprocess kills and no browser, in well under a minute.
SERVER_MODULES = {
    "test_store_postgres.py",
    "test_store_mysql.py",
    "test_store_mongodb.py",
    "test_store_redis.py",
    "test_example_postgres.py",
    "test_example_flask.py",
}
SERVER_IDS = ("postgres", "mysql", "mongodb", "redis", "PostgreSQL", "MariaDB", "MongoDB", "Redis")
CRASH_MODULES = {"test_crashes.py"}
BROWSER_MODULES = {"test_console_browser.py"}
# Builds, benchmarks, whole conformance suites and every-byte splits: none of the four.
SLOW_MODULES = {
    "test_benchmarks.py",
    "test_packaging.py",
    "test_storetest.py",
    "test_store_memory.py",
    "test_store_sqlite.py",
    "test_crypto_stores.py",
    "test_openai_sdk_fixtures.py",
    "test_anthropic_sdk_fixtures.py",
    "test_docs.py",
}


def _kind(item: pytest.Item) -> str:
    module = item.path.name
    if module in CRASH_MODULES or item.get_closest_marker("crash"):
        return "crash"
    if module in BROWSER_MODULES:
        return "browser"
    name = item.name.lower()
    if module in SERVER_MODULES or any(key.lower() in name for key in SERVER_IDS):
        return "server"
    return "" if module in SLOW_MODULES else "fast"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        kind = _kind(item)
        if kind:
            item.add_marker(kind)


PERSISTENT = ("sqlite", "postgres", "mysql", "mongodb", "redis")
"""Every persistent store, as the ``opener`` fixture's parameters name them."""


@contextlib.contextmanager
def scratch_opener(kind: str, tmp_path: Path) -> Iterator[Any]:
    """A scratch place of store ``kind`` (one of :data:`PERSISTENT`) and its picklable opener (see backends.py)."""
    import backends

    if kind == "sqlite":
        with backends.scratch_sqlite(tmp_path) as opener:
            yield opener
        return
    servers: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager[Any]]]] = {
        "postgres": ("PostgreSQL", lambda: backends.scratch_postgres(POSTGRES_DSN)),
        "mysql": ("MariaDB", lambda: backends.scratch_mysql(MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD)),
        "mongodb": ("MongoDB", lambda: backends.scratch_mongodb(MONGODB_URI)),
        "redis": ("Redis", lambda: backends.scratch_redis(REDIS_URL)),
    }
    name, scratch = servers[kind]
    with contextlib.ExitStack() as stack:
        yield require_server(name, lambda: stack.enter_context(scratch()))


@pytest.fixture(params=PERSISTENT)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """An opener over a scratch place of each persistent store in turn."""
    with scratch_opener(request.param, tmp_path) as made:
        yield made
