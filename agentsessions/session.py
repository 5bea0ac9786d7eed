"""Where a conversation lives outside the process: the Store and Session protocols."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from agentsessions.errors import InvalidSessionIdError
from agentsessions.messages import Message

MAX_SESSION_ID = 255


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a non-empty str of at most 255 characters, else raise."""
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(f"a session id must be a str, got {type(session_id).__name__}: {session_id!r:.80}")
    if not 0 < len(session_id) <= MAX_SESSION_ID:
        raise InvalidSessionIdError(f"a session id must have 1 to {MAX_SESSION_ID} characters, got {len(session_id)}")
    return session_id


def check_steer(text: object) -> str:
    """Return ``text`` if it is a str, else raise ``TypeError``."""
    if not isinstance(text, str):
        raise TypeError(f"a steer is a str, got {type(text).__name__}: {text!r:.80}")
    return text


@runtime_checkable
class Store(Protocol):
    """A backend holding many sessions' transcripts and pending steers.

    ``save`` replaces the stored transcript atomically (a reader sees the old one or the
    new one), accepts any list, and costs what is new since the last save. ``take_steers``
    removes and returns the waiting steers in the order they were added, each handed to
    exactly one caller. Unknown sessions have an empty transcript and no steers.
    """

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Make ``messages`` the session's transcript."""
        ...

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none."""
        ...

    def add_steer(self, session_id: str, text: str) -> None:
        """Leave a steer for whichever run of this session asks next."""
        ...

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first."""
        ...


@runtime_checkable
class Session(Protocol):
    """One conversation in a store, already addressed."""

    def save(self, messages: Sequence[Message]) -> None:
        """Make ``messages`` this session's transcript."""
        ...

    def messages(self) -> list[Message]:
        """This session's transcript."""
        ...

    def steer(self, text: str) -> None:
        """Leave a steer for the run of this session, wherever it runs."""
        ...

    def take_steers(self) -> list[str]:
        """Remove and return the waiting steers, oldest first."""
        ...


@attrs.frozen
class StoreSession:
    """A :class:`Session` over a :class:`Store` and one id; what :func:`open` returns."""

    id: str
    store: Store = attrs.field(repr=False)

    def save(self, messages: Sequence[Message]) -> None:
        """Make ``messages`` this session's transcript."""
        self.store.save(self.id, messages)

    def messages(self) -> list[Message]:
        """This session's transcript."""
        return self.store.messages(self.id)

    def steer(self, text: str) -> None:
        """Leave a steer for the run of this session, wherever it runs."""
        self.store.add_steer(self.id, text)

    def take_steers(self) -> list[str]:
        """Remove and return the waiting steers, oldest first."""
        return self.store.take_steers(self.id)


def open(session_id: str, store: Store) -> StoreSession:
    """Address one conversation in ``store``. Does no I/O."""
    return StoreSession(check_session_id(session_id), store)
