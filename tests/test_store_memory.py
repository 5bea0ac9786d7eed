"""The memory store keeps the contract."""

from __future__ import annotations

from agentsessions.session import RunStore
from agentsessions.stores import storetest
from agentsessions.stores.memory import MemoryStore


def test_the_memory_store_keeps_the_contract() -> None:
    store = MemoryStore()
    assert isinstance(store, RunStore)
    report = storetest.run(lambda: store)
    assert report.skipped == ()
    assert tuple(report.examples) == storetest.PROPERTIES
    assert all(count > 0 for count in report.examples.values()), report.examples
    assert all(name in report.examples for name in storetest.RUN_PROPERTIES)
    print(report)
