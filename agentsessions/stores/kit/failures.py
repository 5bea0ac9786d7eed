"""The one wording of a store's failures, so every store's errors read alike.

``could_not("PostgreSQL store", "save the transcript", "s1")`` is
``"PostgreSQL store could not save the transcript for session 's1'"``; each store adds a
colon and what its driver said, and what to do about it.
"""

from __future__ import annotations


def could_not(store: str, action: str, session_id: str | None = None) -> str:
    """What failed: the store, the action, and the session when there is one."""
    where = f" for session {session_id!r:.80}" if session_id else ""
    return f"{store} could not {action}{where}"
