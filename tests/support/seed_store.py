"""A store with only the seed's four methods, as a third party may write one; for the tests of that path."""

from __future__ import annotations

from collections.abc import Sequence

import agentsessions as agent


class SeedOnly:
    """A store with only the seed's four methods (as a third party may write), noting each call."""

    def __init__(self, store: agent.Store) -> None:
        self.store = store
        self.calls: list[tuple[str, int]] = []

    def save(self, session_id: str, messages: Sequence[agent.Message]) -> None:
        self.calls.append(("save", len(messages)))
        self.store.save(session_id, messages)

    def messages(self, session_id: str) -> list[agent.Message]:
        return self.store.messages(session_id)

    def add_steer(self, session_id: str, text: str) -> None:
        self.store.add_steer(session_id, text)

    def take_steers(self, session_id: str) -> list[str]:
        taken = self.store.take_steers(session_id)
        self.calls.append(("take_steers", len(taken)))
        return taken
