"""The memory store keeps the contract."""

from __future__ import annotations

from agentsessions.stores import storetest
from agentsessions.stores.memory import MemoryStore


def test_the_memory_store_keeps_the_contract() -> None:
    store = MemoryStore()
    report = storetest.run(lambda: store)
    assert all(count > 0 for count in report.examples.values())
    print(report)
