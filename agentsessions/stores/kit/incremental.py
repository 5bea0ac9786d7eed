"""What makes a save cost only what is new: each store remembers what it last wrote or read.

Every SQL and document store keeps one row per message, keyed by session and position,
and a session record whose ``revision`` is a random token replaced on every save. A store
object remembers, per session, the revision it last saw and the messages it held then.
When a save finds that revision still stored, the stored rows are exactly those messages,
so the rows of the common prefix stay and only the rest is deleted and inserted. Any
other save (another process wrote since, or this store never saw the session) replaces
every row. A random token, not a counter, so a session deleted and recreated elsewhere
can never look unchanged.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence

import attrs

from agentsessions.codec import dump_message, load_message
from agentsessions.messages import Message, check_transcript, transcript_list
from agentsessions.session import check_session_id


@attrs.frozen
class Known:
    """A session as this store object last saw it: its revision and its messages."""

    revision: int
    messages: list[Message]


def new_revision() -> int:
    """A fresh revision token; fits a signed 64-bit column."""
    return secrets.randbits(63)


class KnownSessions:
    """A bounded map from session id to :class:`Known`, least recently used dropped first.

    The lock guards only the dict, never I/O, so sessions do not wait for each other.
    """

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._known: OrderedDict[str, Known] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str) -> Known | None:
        """What was last seen of ``session_id``, if it is still remembered."""
        with self._lock:
            known = self._known.get(session_id)
            if known is not None:
                self._known.move_to_end(session_id)
            return known

    def remember(self, session_id: str, revision: int, messages: Sequence[Message]) -> None:
        """Record that ``session_id`` is stored at ``revision`` with ``messages``."""
        known = Known(revision, list(messages))
        with self._lock:
            self._known[session_id] = known
            self._known.move_to_end(session_id)
            if len(self._known) > self._size:
                self._known.popitem(last=False)

    def read(self, session_id: str, revision: int | None, bodies: Iterable[str | bytes]) -> list[Message]:
        """A transcript read back: ``bodies`` decoded, and remembered under ``revision``.

        ``revision`` and ``bodies`` must come from one read (one transaction), so the
        messages are the ones stored at that revision; ``None`` means the session has no
        record, and nothing is remembered.
        """
        messages = [load_message(body) for body in bodies]
        if revision is not None:
            self.remember(session_id, revision, messages)
        return messages

    def forget(self, session_id: str) -> None:
        """Drop what was seen of ``session_id`` (after a failed write, when the stored state is unknown)."""
        with self._lock:
            self._known.pop(session_id, None)


@attrs.frozen
class SavePlan:
    """A checked save: the new transcript, and how much of it this store object saw stored."""

    session_id: str
    messages: list[Message]
    known: Known | None
    shared: int

    def rows_to_keep(self, stored_revision: int | None) -> int:
        """How many stored rows (a prefix) are already right, given the revision now stored.

        ``stored_revision`` is ``None`` when the session has no record yet.
        """
        if self.known is not None and stored_revision == self.known.revision:
            return self.shared
        return 0

    def rows(self, key: bytes, keep: int) -> Iterator[tuple[bytes, int, str]]:
        """``(key, position, body)`` for each message after the first ``keep``: the rows to insert."""
        for position in range(keep, len(self.messages)):
            yield key, position, dump_message(self.messages[position])


def plan_save(sessions: KnownSessions, session_id: str, messages: Sequence[Message]) -> SavePlan:
    """Check a save's arguments and find what it shares with what this store last saw.

    Only messages after the shared prefix are type-checked: the prefix compares equal,
    element by element (a pointer check when they are the same objects, as in a run), to
    messages that were checked when they were first saved.
    """
    check_session_id(session_id)
    new = transcript_list(messages)
    known = sessions.get(session_id)
    shared = _shared_prefix(known.messages, new) if known is not None else 0
    check_transcript(new, start=shared)
    return SavePlan(session_id, new, known, shared)


def _shared_prefix(old: list[Message], new: list[Message]) -> int:
    n = min(len(old), len(new))
    if old[:n] == new[:n]:
        return n
    return next(i for i in range(n) if old[i] != new[i])
