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
