"""What makes a save cost only what is new, at any number of sessions.

Every SQL and document store keeps one row per message, keyed by session and position,
and a session record whose ``revision`` is a random token replaced on every save. A store
object remembers, per session, the revision it last saw and the messages it held then.
When a save finds that revision still stored, the stored rows are exactly those messages,
so the rows of the common prefix stay and only the rest is deleted and inserted.

What a run saved is remembered for as long as the run holds its claim, however many
sessions the store object serves: it is kept beside a weak reference to the
:class:`~agentsessions.runs.Claim`, and goes when the run lets go of that object. A save
through a session handle (:class:`~agentsessions.session.StoreSession`) is kept the same
way beside the handle, so an application that keeps its handles saves only what is new
at any number of sessions. Other plain saves and reads are remembered in a bounded map,
least recently used dropped first. A
save of a session remembered in neither (another process wrote since, or this store never
saw it) reads the stored rows once and compares them with the new messages' bodies: the
rows that match stay, so no row that did not change is ever rewritten. A random token,
not a counter, so a session deleted and recreated elsewhere can never look unchanged.
"""

from __future__ import annotations

import secrets
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeAlias, TypeVar

import attrs

from agentsessions.codec import dump_message, load_messages
from agentsessions.errors import FormatError
from agentsessions.messages import Message, check_transcript, transcript_list
from agentsessions.session import check_session_id

V = TypeVar("V")

Holder: TypeAlias = object
"""What a remembered value lives beside: a run's :class:`~agentsessions.runs.Claim`, or a session handle."""

RECENT = 256
"""How many sessions a store object remembers from plain saves and reads (runs' sessions come on top)."""


@attrs.frozen
class Known:
    """A session as this store object last saw it: its revision and its messages."""

    revision: int
    messages: list[Message]


def new_revision() -> int:
    """A fresh revision token; fits a signed 64-bit column."""
    return secrets.randbits(63)


class SessionMemory(Generic[V]):
    """What a store object last saw of each session: one value per session id.

    A value remembered with a ``claim`` lives as long as that claim object does (the run
    holding it, or the session handle that saved: any object a weak reference can point
    to is a holder), whatever the number of sessions; one remembered without lives in a map
    of the ``size`` most recently used. The lock guards only the dicts, never I/O, so
    sessions do not wait for each other.
    """

    def __init__(self, size: int = RECENT) -> None:
        self._size = size
        self._recent: OrderedDict[str, V] = OrderedDict()
        self._held: dict[str, tuple[weakref.ref[Holder], V]] = {}
        # Reentrant: a claim's weakref callback takes it, and the garbage collector may run
        # that callback on a thread that holds it already (inside any allocation below).
        self._lock = threading.RLock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._recent) + len(self._held)

    def get(self, session_id: str, claim: Holder | None = None) -> V | None:
        """What was last seen of ``session_id`` (by the run holding ``claim``, when given), if remembered."""
        with self._lock:
            held = self._held.get(session_id)
            if held is not None and claim is not None and held[0]() == claim:
                return held[1]
            value = self._recent.get(session_id)
            if value is not None:
                self._recent.move_to_end(session_id)
            return value

    def remember(self, session_id: str, value: V, claim: Holder | None = None) -> None:
        """Record ``value`` for ``session_id``; with ``claim``, for as long as that claim object lives."""
        with self._lock:
            self._held.pop(session_id, None)
            self._recent.pop(session_id, None)
            if claim is not None:
                self._held[session_id] = (weakref.ref(claim, self._lapsed(session_id)), value)
                return
            self._recent[session_id] = value
            if len(self._recent) > self._size:
                self._recent.popitem(last=False)

    def release(self, session_id: str, claim: Holder) -> None:
        """The run holding ``claim`` released the session: what it saved joins the recently used."""
        with self._lock:
            held = self._held.get(session_id)
            if held is None or held[0]() != claim:
                return
        self.remember(session_id, held[1])

    def forget(self, session_id: str) -> None:
        """Drop what was seen of ``session_id`` (after a failed write, when the stored state is unknown)."""
        with self._lock:
            self._held.pop(session_id, None)
            self._recent.pop(session_id, None)

    def _lapsed(self, session_id: str) -> Callable[[weakref.ref[Holder]], None]:
        # Weak to the memory too: a claim outliving its store must not keep the store alive.
        memory = weakref.ref(self)

        def lapsed(ref: weakref.ref[Holder]) -> None:
            self_ = memory()
            if self_ is None:
                return
            with self_._lock:
                held = self_._held.get(session_id)
                if held is not None and held[0] is ref:
                    del self_._held[session_id]

        return lapsed


class KnownSessions:
    """The :class:`Known` state of each session: runs' for as long as they hold their claims, others' bounded.

    ``size`` bounds only what plain saves and reads leave (see :class:`SessionMemory`).
    """

    def __init__(self, size: int = RECENT) -> None:
        self._memory: SessionMemory[Known] = SessionMemory(size)

    def __len__(self) -> int:
        return len(self._memory)

    def get(self, session_id: str, claim: Holder | None = None) -> Known | None:
        """What was last seen of ``session_id`` (by the run holding ``claim``, when given), if it is remembered."""
        return self._memory.get(session_id, claim)

    def remember(
        self, session_id: str, revision: int, messages: Sequence[Message], claim: Holder | None = None
    ) -> None:
        """Record that ``session_id`` is stored at ``revision`` with ``messages`` (saved under ``claim``, if given)."""
        self._memory.remember(session_id, Known(revision, list(messages)), claim)

    def release(self, session_id: str, claim: Holder) -> None:
        """The run holding ``claim`` released the session: what it saved joins the recently used."""
        self._memory.release(session_id, claim)

    def forget(self, session_id: str) -> None:
        """Drop what was seen of ``session_id`` (after a failed write, when the stored state is unknown)."""
        self._memory.forget(session_id)

    def read(self, session_id: str, revision: int | None, bodies: Sequence[str | bytes]) -> list[Message]:
        """A transcript read back: ``bodies`` decoded, and remembered under ``revision``.

        ``revision`` and ``bodies`` must come from one read (one transaction), so the
        messages are the ones stored at that revision; ``None`` means the session has no
        record, and nothing is remembered. A row that cannot be read is a :class:`FormatError`
        naming the session and the message's position.
        """
        try:
            messages = load_messages(bodies)
        except FormatError as error:
            raise FormatError(f"session {session_id!r:.80} {error}") from error
        if revision is not None:
            self.remember(session_id, revision, messages)
        return messages


@attrs.frozen
class SavePlan:
    """A checked save: the new transcript, and how much of it this store object saw stored."""

    session_id: str
    messages: list[Message]
    known: Known | None
    shared: int

    def rows_to_keep(self, stored_revision: int | None, bodies: Sequence[str | bytes] | None = None) -> int:
        """How many stored rows (a prefix) are already right, given the revision now stored.

        ``stored_revision`` is ``None`` when the session has no record yet. When it is not
        the revision this store object saw, ``bodies`` (the stored rows, read under the same
        lock or in the same snapshot as the revision) say which are right; without them, none.
        """
        if self.known is not None and stored_revision == self.known.revision:
            return self.shared
        return self.matching(bodies or ())

    def needs_bodies(self, stored_revision: int | None, stored_length: int) -> bool:
        """Whether :meth:`rows_to_keep` needs the stored rows: some are stored, and this store did not see them."""
        return stored_length > 0 and (self.known is None or stored_revision != self.known.revision)

    def matching(self, bodies: Sequence[str | bytes]) -> int:
        """How many of ``bodies``, from the first, are exactly the rows this save would write."""
        for position in range(min(len(bodies), len(self.messages))):
            body, mine = bodies[position], dump_message(self.messages[position])
            if mine != body if isinstance(body, str) else mine.encode() != bytes(body):
                return position
        return min(len(bodies), len(self.messages))

    def rows(self, key: bytes, keep: int) -> Iterator[tuple[bytes, int, str]]:
        """``(key, position, body)`` for each message after the first ``keep``: the rows to insert."""
        for position in range(keep, len(self.messages)):
            yield key, position, dump_message(self.messages[position])


def plan_save(
    sessions: KnownSessions, session_id: str, messages: Sequence[Message], claim: Holder | None = None
) -> SavePlan:
    """Check a save's arguments and find what it shares with what this store last saw (the run of ``claim``'s save).

    Only messages after the shared prefix are type-checked: the prefix compares equal,
    element by element (a pointer check when they are the same objects, as in a run), to
    messages that were checked when they were first saved.
    """
    check_session_id(session_id)
    new = transcript_list(messages)
    known = sessions.get(session_id, claim)
    shared = shared_prefix(known.messages, new) if known is not None else 0
    check_transcript(new, start=shared)
    return SavePlan(session_id, new, known, shared)


def shared_prefix(old: list[Any], new: list[Any]) -> int:
    """How many items, from the first, ``old`` and ``new`` have in common.

    List equality checks identity first: the messages a run saves again are the same objects.
    """
    n = min(len(old), len(new))
    if (old if n == len(old) else old[:n]) == new[:n]:
        return n
    return next(i for i in range(n) if old[i] != new[i])
