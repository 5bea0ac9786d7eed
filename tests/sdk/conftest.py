"""Every test under tests/sdk runs once per agentsessions store, and the SDKs' async tests run on asyncio.

The vendored files construct the SDK's own session class through a shim (``adapter.py`` in
each folder) that builds ours over the store this module's fixture made for the test
(``tests.support.sdk_suites.current_store``). The server stores get one scratch place per
module and store, emptied before each test.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.stores.memory import MemoryStore
from tests.support.backends import PERSISTENT, scratch_opener, store_params
from tests.support.sdk_suites import serving

STORES = ("memory", *PERSISTENT)


@pytest.fixture(scope="module", params=store_params(*STORES))
def agentsessions_place(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A scratch place of one store kind for the module's tests (``None`` for the memory store)."""
    if request.param == "memory":
        yield None
        return
    with scratch_opener(request.param, tmp_path_factory.mktemp(request.param)) as opener:
        yield opener


@pytest.fixture(autouse=True)
def agentsessions_store(agentsessions_place: Any) -> Iterator[agent.RunStore]:
    """This test's store: a new memory store, or the module's scratch place emptied of earlier tests' sessions."""
    with contextlib.ExitStack() as stack:
        if agentsessions_place is None:
            store: agent.RunStore = MemoryStore()
        else:
            store = stack.enter_context(agentsessions_place())
            for info in list(store.sessions()):
                store.delete(info.id)
        with serving(store):
            yield store


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here is ``slow`` (the SDKs' whole suites, on every store): the vendored files carry no marks."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.slow)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "asyncio: an async test of the OpenAI Agents SDK's suite (run on asyncio)")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an ``asyncio``-marked coroutine test in a new event loop, as the SDK's pytest-asyncio setup does.

    The Claude SDK's tests are marked ``anyio`` and run by anyio's own pytest plugin.
    """
    if not inspect.iscoroutinefunction(pyfuncitem.obj) or pyfuncitem.get_closest_marker("asyncio") is None:
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**arguments))
    return True
