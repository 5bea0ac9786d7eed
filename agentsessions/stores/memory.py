"""A store in this process's memory: for tests, examples and single-process programs."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import attrs

from agentsessions.messages import Message, check_transcript, transcript_list
from agentsessions.session import check_session_id, check_steer


@attrs.define
class _Entry:
    # Each session has its own lock, so threads on different sessions never wait for each other.
    lock: threading.Lock = attrs.Factory(threading.Lock)
    messages: tuple[Message, ...] = ()
    steers: list[str] = attrs.Factory(list)


class MemoryStore:
    """Sessions in a dict; lives as long as the process. Safe to share between threads."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Entry] = {}

    def _entry(self, session_id: str) -> _Entry:
        check_session_id(session_id)
        entry = self._sessions.get(session_id)
        if entry is None:
            entry = self._sessions.setdefault(session_id, _Entry())  # atomic: one entry wins
        return entry

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Make ``messages`` the session's transcript (a snapshot: later changes to the list do not leak in)."""
        entry = self._entry(session_id)
        snapshot = tuple(transcript_list(messages))
        stored = entry.messages
        # Only what differs from the stored transcript needs checking: the shared prefix compares
        # equal, a pointer check per message when they are the same objects, as in a run.
        shared = len(stored) if snapshot[: len(stored)] == stored else 0
        check_transcript(snapshot, start=shared)
        with entry.lock:
            entry.messages = snapshot

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none."""
        entry = self._sessions.get(check_session_id(session_id))
        return list(entry.messages) if entry else []

    def add_steer(self, session_id: str, text: str) -> None:
        """Leave a steer for the session's next run."""
        entry = self._entry(session_id)
        check_steer(text)
        with entry.lock:
            entry.steers.append(text)

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first."""
        entry = self._sessions.get(check_session_id(session_id))
        if entry is None:
            return []
        with entry.lock:
            taken, entry.steers = entry.steers, []
        return taken
