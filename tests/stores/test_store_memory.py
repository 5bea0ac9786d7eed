"""The memory store keeps the contract."""

from __future__ import annotations

import pytest

from agentsessions.session import RunStore
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing import storetest

pytestmark = pytest.mark.slow  # the whole conformance suite


@pytest.mark.parametrize("name", storetest.properties())
def test_the_memory_store_keeps_the_contract(name: str) -> None:
    store = MemoryStore()
    assert isinstance(store, RunStore)
    report = storetest.check(name, lambda: store)
    if name == storetest.SCHEMA:  # no database, so no schema version
        assert report.skipped == (name,) and not report.examples, report
        return
    assert report.skipped == () and report.examples[name] > 0, report
