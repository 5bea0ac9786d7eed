"""Fixtures and hooks only: shared helpers live in ``tests.support``, fake providers in ``agentsessions.testing``.

Markers (pyproject.toml lists them) are explicit: a module that needs a database server,
kills processes, drives a browser or is slow says so with ``pytestmark``, a single test
with a decorator, a store parameter with ``store_params``. Whatever carries none of
them is ``fast``: ``pytest -m fast`` runs what needs no server, no killed process and no
browser. A test that reaches a server without the ``server`` mark fails, saying so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import servers
from tests.support.backends import PERSISTENT, Opener, scratch_opener, store_params

NOT_FAST = ("server", "crash", "browser", "slow")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.get_closest_marker(name) for name in NOT_FAST):
            item.add_marker("fast")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures: tell ``require_server`` whether this test is marked ``server``."""
    servers.running(marked_server=item.get_closest_marker("server") is not None)


@pytest.fixture(params=store_params(*PERSISTENT))
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """An opener over a scratch place of each persistent store in turn."""
    with scratch_opener(request.param, tmp_path) as made:
        yield made
