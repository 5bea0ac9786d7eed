"""What the vendored SDK suites under ``tests/sdk`` share: the store of the running test, and deselection.

``tests/sdk/conftest.py`` sets the store each test runs over (:func:`serving`); the shims
(``adapter.py`` in each folder) build the SDKs' session classes over :func:`current_store`.
Each folder's conftest leaves out the SDK tests that are not about the protocol with
:func:`deselect`. Helpers live here, not in a conftest, so nothing imports a conftest.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import agentsessions as agent

_current: list[agent.RunStore] = []


@contextmanager
def serving(store: agent.RunStore) -> Iterator[agent.RunStore]:
    """Make ``store`` the one :func:`current_store` returns while the block runs."""
    _current[:] = [store]
    try:
        yield store
    finally:
        _current.clear()


def current_store() -> agent.RunStore:
    """The store the running test was given (the shims build the SDKs' sessions over it)."""
    assert _current, "no agentsessions store: the store fixture of tests/sdk/conftest.py did not run"
    return _current[0]


def deselect(items: list[pytest.Item], config: pytest.Config, folder: Path, reasons: dict[str, str]) -> None:
    """Leave out the named tests of ``folder`` (each test's name without its parameters), reported as deselected."""
    left: list[pytest.Item] = []
    out: list[pytest.Item] = []
    for item in items:
        name = item.originalname if isinstance(item, pytest.Function) else item.name
        (out if item.path.parent == folder and name in reasons else left).append(item)
    if out:
        config.hook.pytest_deselected(items=out)
        items[:] = left
