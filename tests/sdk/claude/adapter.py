"""What the vendored tests construct in place of the SDK's ``InMemorySessionStore``: ours, over the test's store.

Each construction is a new, empty store for the test, as ``InMemorySessionStore()`` is:
our ``SessionStore`` over the store the fixture made, under a prefix of its own. The SDK
class's two test helpers that the tests use, ``get_entries`` and ``size``, read the store.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from claude_agent_sdk import SessionKey, SessionStoreEntry

from agentsessions.integrations._fenced import items
from agentsessions.integrations.claude import PROVIDER, SessionStore, _store_id
from tests.support.sdk_suites import current_store

_numbers = itertools.count(1)


class InMemorySessionStore(SessionStore):
    def __init__(self) -> None:
        super().__init__(current_store(), prefix=f"claude-{next(_numbers)}:")

    def store_entries(self, key: SessionKey) -> list[SessionStoreEntry]:
        store_id = _store_id(self.prefix, key, key.get("subpath"))
        return items(PROVIDER, store_id, self.store.messages(store_id))

    def stored_ids(self) -> Iterator[str]:
        """The ids this store wrote, without the prefix; summaries left out."""
        for info in self.store.sessions():
            if info.id.startswith(self.prefix) and not info.id.startswith(self.prefix + "!"):
                yield info.id[len(self.prefix) :]

    # InMemorySessionStore's test helpers, which the SDK's tests read what its helpers wrote with.

    def get_entries(self, key: SessionKey) -> list[SessionStoreEntry]:
        """Every entry of the transcript ``key`` names (empty if none), read through the store."""
        return self.store_entries(key)

    @property
    def size(self) -> int:
        """How many main transcripts this store holds, in every project."""
        return sum(1 for rest in self.stored_ids() if rest.count(":") == 1)
