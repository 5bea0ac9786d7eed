"""What the vendored tests construct in place of the SDK's ``SQLiteSession``: our Session, over the test's store.

``SQLiteSession(session_id, db_path=":memory:", session_settings=None)`` keeps the SDK
class's signature; the path is not used (the sessions of one test share the store the
fixture made, as the SDK's sessions of one test share a file). ``close()`` is there
because the tests call it: our session holds no connection (the store is the caller's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentsessions.integrations.openai_agents import Session
from tests.support.sdk_suites import current_store


class _TestSession(Session):
    def close(self) -> None:
        """Nothing to close: the store belongs to the test's fixture."""


def SQLiteSession(session_id: str, db_path: str | Path = ":memory:", session_settings: Any = None) -> Session:
    return _TestSession(session_id, current_store(), session_settings=session_settings)
