"""Fixtures and hooks only: shared helpers live in ``tests.support``, fake providers in ``agentsessions.testing``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.backends import PERSISTENT, Opener, scratch_opener

# Markers (pyproject.toml lists them): `pytest -m fast` runs what needs no server, no
# subprocess kills and no browser, in well under a minute.
SERVER_MODULES = {
    "test_store_postgres.py",
    "test_store_mysql.py",
    "test_store_mongodb.py",
    "test_store_redis.py",
    "test_example_postgres.py",
    "test_example_web.py",
    "test_contrib_django.py",
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
    "test_docs_site.py",
    # The SDK adapters: processes racing, and the SDKs' own suites (tests/sdk) on every store.
    "test_integrations.py",
    "test_session.py",
    "test_session_limit.py",
    "test_session_store_conformance.py",
    "test_session_helpers_store.py",
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


@pytest.fixture(params=PERSISTENT)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """An opener over a scratch place of each persistent store in turn."""
    with scratch_opener(request.param, tmp_path) as made:
        yield made
