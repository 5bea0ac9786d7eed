"""Checks that every store's tests make the same way: transcripts to save, and two replicas over one database."""

from __future__ import annotations

from collections.abc import Callable

import agentsessions as agent


def numbered_transcript(n: int, tag: str = "m") -> list[agent.Message]:
    """``n`` short messages, user and assistant in turn, each text unique within ``tag``."""
    return [agent.Message.user(f"{tag}{i}") if i % 2 == 0 else agent.Message.assistant(f"{tag}{i}") for i in range(n)]


def check_replicas_notice_each_other(
    store: agent.Store, open_replica: Callable[[], agent.Store], session_id: str, messages: list[agent.Message]
) -> None:
    """Saves through two store objects over one database stay right whatever the other wrote since.

    ``store`` has saved ``messages`` already; ``open_replica`` makes a new object over the same data.
    """
    other = open_replica()  # never saw the session: it replaces every row, and is right
    other.save(session_id, messages[:3])
    assert store.messages(session_id) == messages[:3]
    store.save(session_id, messages[:4])  # the stored revision is one it read just now
    assert other.messages(session_id) == messages[:4]
    other.save(session_id, messages[:2])  # now `store` holds a stale revision: it must notice
    store.save(session_id, messages[:5])
    assert open_replica().messages(session_id) == messages[:5]
