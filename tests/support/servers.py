"""Where the database servers are, and what to do when one (or a driver) is missing.

In CI (``CI`` set) a missing server or driver fails the test; elsewhere it skips, saying
which server and how to start it, or which extra to install. Connection settings come from
environment variables whose defaults are this project's machines.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import TypeVar

import pytest

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

# Whether the test being run is marked `server` (conftest says, before each test's fixtures);
# None outside a test run, as in the benchmarks, which use these settings too.
_marked_server: bool | None = None


def running(*, marked_server: bool) -> None:
    """Note whether the test about to run is marked ``server`` (conftest's hook calls this)."""
    global _marked_server
    _marked_server = marked_server


def skip_without(*modules: str, extra: str = "test") -> None:
    """At a test module's top: outside CI, skip the module when a module it needs is not installed.

    ``extra`` names the package's extra that brings them (``test`` has every one). In CI
    nothing is skipped: the import that follows fails, and so does the run.
    """
    __tracebackhide__ = True  # pytest reports the skip at the calling module's line
    missing = [name for name in modules if not _installed(name)]
    if missing and not os.environ.get("CI"):
        where = "" if extra == "test" else f" (or agentsessions[{extra}])"
        pytest.skip(f"needs {', '.join(missing)}: pip install -e '.[test]'{where}", allow_module_level=True)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


def require_server(name: str, connect: Callable[[], T]) -> T:
    """Return ``connect()``; if the server is not there, fail in CI and skip elsewhere.

    A test that is not marked ``server`` fails here: ``pytest -m fast`` promises no server.
    """
    if _marked_server is False:
        pytest.fail(f"this test reaches {name} but is not marked server: add @pytest.mark.server (or store_params)")
    try:
        return connect()
    except Exception as error:
        message = f"{name} is not reachable ({error}); start it with: {HOW_TO_START[name]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
