"""The conformance suite passes the memory store and fails stores that break the contract."""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import itertools
import json
import re
import subprocess
import sys
import threading
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import attrs
import pytest

from agentsessions.errors import ConflictError, SessionBusyError
from agentsessions.messages import ContentType, Message, check_transcript
from agentsessions.runs import (
    Claim,
    Progress,
    RunState,
    SessionInfo,
    Steer,
    check_updated_before,
    state_filter,
    utcnow,
)
from agentsessions.session import RunStore, Store, check_fork_at, check_session_id, check_steer
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing import storetest

pytestmark = pytest.mark.slow  # whole conformance suites

EXAMPLES = 10  # enough for every broken store below to be caught, and quick


class DictStore:
    """A plain, correct store over dicts with a hook for how ids become keys; the base of the broken ones."""

    def __init__(self, shared_with: DictStore | None = None) -> None:
        self.lock: threading.Lock = threading.Lock() if shared_with is None else shared_with.lock
        self.transcripts: dict[object, list[Message]] = {} if shared_with is None else shared_with.transcripts
        self.steers: dict[object, list[str]] = {} if shared_with is None else shared_with.steers

    def key(self, session_id: str) -> object:
        """The dict key for ``session_id``."""
        return check_session_id(session_id)

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Keep a copy of ``messages``."""
        key, transcript = self.key(session_id), list(check_transcript(messages))
        with self.lock:
            self.transcripts[key] = transcript

    def messages(self, session_id: str) -> list[Message]:
        """A copy of the transcript."""
        key = self.key(session_id)
        with self.lock:
            return list(self.transcripts.get(key, []))

    def add_steer(self, session_id: str, text: str) -> None:
        """Append a steer."""
        key, text = self.key(session_id), check_steer(text)
        with self.lock:
            self.steers.setdefault(key, []).append(text)

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the steers."""
        key = self.key(session_id)
        with self.lock:
            return self.steers.pop(key, [])


class TrustsWhatItLastSaved(DictStore):
    """Writes only what differs from what this object last saved, though another may have written since."""

    def __init__(self, shared_with: DictStore) -> None:
        super().__init__(shared_with)
        self.last_saved: dict[object, list[Message]] = {}

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Keep the stored prefix this object wrote; replace the rest."""
        key, new = self.key(session_id), list(check_transcript(messages))
        old = self.last_saved.get(key, [])
        keep = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        with self.lock:
            self.transcripts[key] = self.transcripts.get(key, [])[:keep] + new[keep:]
        self.last_saved[key] = new


class AppendsPastTheStoredLength(DictStore):
    """Remembers the last 256 sessions it saved; for any other it trusts the stored rows and appends past them.

    The mistake of a store that learns only the stored length of a session it forgot.
    """

    def __init__(self) -> None:
        super().__init__()
        self.seen: OrderedDict[object, None] = OrderedDict()

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the transcript when the session is remembered; else append what is past the stored length."""
        key, new = self.key(session_id), list(check_transcript(messages))
        with self.lock:
            stored = self.transcripts.get(key, [])
            self.transcripts[key] = new if key in self.seen else stored[: len(new)] + new[len(stored) :]
            self.seen[key] = None
            self.seen.move_to_end(key)
            if len(self.seen) > 256:
                self.seen.popitem(last=False)


class ForgetsWhatHandlesSaved(DictStore):
    """Keeps what session handles saved among the last 256 sessions saved, not beside the handles.

    A plain save replaces the transcript; a handle's save of a session it remembers does too,
    but of one it forgot appends what is past the stored length: the mistake of a store that
    keeps a handle's memory in its bounded cache.
    """

    def __init__(self) -> None:
        super().__init__()
        self.seen: OrderedDict[object, None] = OrderedDict()

    def save(self, session_id: str, messages: Sequence[Message], *, holder: object | None = None) -> None:
        """Replace the transcript, unless a handle saves a forgotten session: then append past the stored length."""
        key, new = self.key(session_id), list(check_transcript(messages))
        with self.lock:
            stored = self.transcripts.get(key, [])
            forgotten = holder is not None and key not in self.seen
            self.transcripts[key] = stored[: len(new)] + new[len(stored) :] if forgotten else new
            self.seen[key] = None
            self.seen.move_to_end(key)
            if len(self.seen) > 256:
                self.seen.popitem(last=False)


class TrustsWhatAHandleSaved(DictStore):
    """Remembers beside each session handle what it saved, and writes only what differs from that.

    It never asks whether another handle, or another store object, wrote since: the mistake
    of a store that keeps no stored revision beside a handle's memory.
    """

    def __init__(self, shared_with: DictStore) -> None:
        super().__init__(shared_with)
        self.by_handle: weakref.WeakKeyDictionary[object, list[Message]] = weakref.WeakKeyDictionary()

    def save(self, session_id: str, messages: Sequence[Message], *, holder: object | None = None) -> None:
        """Keep the stored prefix the handle saved last; replace the rest."""
        key, new = self.key(session_id), list(check_transcript(messages))
        old = self.by_handle.get(holder, []) if holder is not None else []
        keep = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        with self.lock:
            self.transcripts[key] = self.transcripts.get(key, [])[:keep] + new[keep:]
        if holder is not None:
            self.by_handle[holder] = new


class DropsEveryThirdSteer(DictStore):
    """Loses a steer now and then."""

    def __init__(self) -> None:
        super().__init__()
        self.added = itertools.count(1)

    def add_steer(self, session_id: str, text: str) -> None:
        """Add two steers of every three."""
        self.key(session_id), check_steer(text)
        if next(self.added) % 3:
            super().add_steer(session_id, text)


class TakesWithoutRemoving(DictStore):
    """Hands the same steers to every taker."""

    def take_steers(self, session_id: str) -> list[str]:
        """Return the steers and leave them there."""
        with self.lock:
            return list(self.steers.get(self.key(session_id), []))


class SortsJsonKeys(DictStore):
    """Rewrites tool arguments the way jsonb and MySQL JSON columns do."""

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Save with every JSON tool input re-serialised with sorted keys."""
        super().save(session_id, [self.rewrite(m) for m in check_transcript(messages)])

    @staticmethod
    def rewrite(message: Message) -> Message:
        """``message`` with its JSON inputs normalised."""
        content = []
        for block in message.content:
            with contextlib.suppress(ValueError):
                block = attrs.evolve(block, input=json.dumps(json.loads(block.input), sort_keys=True))
            content.append(block)
        return Message(message.role, content)


class CoversEveryCompactionWithOne(DictStore):
    """Keeps a compaction block's summary but not how many messages it covers (a store written for str fields only)."""

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Save with every compaction block's ``covers`` reset to 1."""
        super().save(session_id, [self.rewrite(m) for m in check_transcript(messages)])

    @staticmethod
    def rewrite(message: Message) -> Message:
        """``message`` with its compaction blocks covering one message each."""
        content = [attrs.evolve(b, covers=1) if b.type is ContentType.COMPACTION else b for b in message.content]
        return Message(message.role, content)


class LeaksBetweenIds(DictStore):
    """Files sessions under a key that several ids share."""

    def __init__(self, fold: Callable[[str], str]) -> None:
        super().__init__()
        self.fold = fold

    def key(self, session_id: str) -> object:
        """The folded id."""
        return self.fold(check_session_id(session_id))


class AcceptsAnyId(DictStore):
    """Takes whatever id it is given."""

    def key(self, session_id: str) -> object:
        """``session_id`` unchecked."""
        return repr(session_id)


class NotAtomicForReaders(DictStore):
    """Rewrites the stored list in place, one message at a time, where readers can see it."""

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Empty the stored list, then append the messages one by one."""
        key, transcript = self.key(session_id), check_transcript(messages)
        stored = self.transcripts.setdefault(key, [])
        stored.clear()
        for message in transcript:
            time.sleep(0)  # lets a reader run between two appends, as a second connection would
            stored.append(message)

    def messages(self, session_id: str) -> list[Message]:
        """A copy of whatever the list holds right now."""
        return list(self.transcripts.get(self.key(session_id), []))


class SavesUntilABadMessage(DictStore):
    """Writes messages one by one and stops at the first that is not a Message."""

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Save message by message; a bad one leaves the earlier ones stored."""
        key = self.key(session_id)
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise TypeError("not a sequence")
        self.transcripts[key] = []
        for message in messages:
            check_transcript([message])
            self.transcripts[key].append(message)


class KeepsTheCallersList(DictStore):
    """Stores the list it was given, not a copy."""

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Keep a reference to ``messages``."""
        check_transcript(messages)
        self.transcripts[self.key(session_id)] = messages  # type: ignore[assignment]


class ReturnsItsOwnList(DictStore):
    """Hands out the stored list itself."""

    def messages(self, session_id: str) -> list[Message]:
        """The stored list, not a copy."""
        return self.transcripts.setdefault(self.key(session_id), [])


class FailsOnUnknownSessions(DictStore):
    """Raises for a session it has never seen."""

    def messages(self, session_id: str) -> list[Message]:
        """The transcript, or KeyError."""
        return list(self.transcripts[self.key(session_id)])


# --- Run stores that break the RunStore contract (each a MemoryStore with one mistake) ---------------


class NeverBusy(MemoryStore):
    """Lets a second run claim a session whose lease is live."""

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Claim, ending the live lease first if there is one."""
        with contextlib.suppress(SessionBusyError):
            return super().claim(session_id, replica=replica, lease=lease)
        self._sessions[session_id].lease_expires_at = utcnow()
        return super().claim(session_id, replica=replica, lease=lease)


class NoFencing(MemoryStore):
    """Lets any claim save while some run holds the session, whatever its token."""

    def save_run(self, claim: Claim, messages: Sequence[Message], **kwargs: object) -> Progress:
        """Save as whoever holds the session now."""
        valid = isinstance(claim, Claim) and type(claim.token) is int and 0 < claim.token < 2**63  # else: refused
        entry = self._sessions.get(claim.session_id) if valid else None
        if entry is not None and entry.run_state is RunState.RUNNING:
            claim = attrs.evolve(claim, token=entry.token)
        return super().save_run(claim, messages, **kwargs)  # type: ignore[arg-type]


class TokensRestartAfterDelete(MemoryStore):
    """Numbers claims per session, so a session deleted and made again reuses its tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.claims: Counter[str] = Counter()

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Claim with the session's own count of claims as the token."""
        claim = super().claim(session_id, replica=replica, lease=lease)
        self.claims[session_id] += 1
        self._sessions[session_id].token = self.claims[session_id]
        return attrs.evolve(claim, token=self.claims[session_id])

    def delete(self, session_id: str) -> bool:
        """Delete, forgetting the count."""
        self.claims.pop(session_id, None)
        return super().delete(session_id)


class PagesOnUpdatedAtOnly(MemoryStore):
    """Lists in pages of 7 after the last ``updated_at`` seen, dropping the rest of a run of ties."""

    def sessions(
        self,
        *,
        state: RunState | Collection[RunState] | None = None,
        updated_before: object = None,
        metadata: object = None,
    ) -> Iterator[SessionInfo]:
        """Check the arguments, then page lazily (by state only: the listing property is the one it breaks)."""
        state_filter(state), check_updated_before(updated_before)
        return self.pages(state, updated_before)

    def pages(self, state: RunState | Collection[RunState] | None, before: object) -> Iterator[SessionInfo]:
        """Each page: the first 7 listed with an older ``updated_at`` than the last one yielded."""
        never = datetime.datetime.min.replace(tzinfo=datetime.UTC)
        last: SessionInfo | None = None
        while True:
            listed = super().sessions(state=state, updated_before=before)  # type: ignore[arg-type]
            page = [i for i in listed if last is None or (i.updated_at or never) < (last.updated_at or never)][:7]
            yield from page
            if len(page) < 7:
                return
            last = page[-1]


class ReleasesThoughSteered(MemoryStore):
    """Releases the session even when steers arrived since the run last collected them."""

    def save_run(self, claim: Claim, messages: Sequence[Message], **kwargs: object) -> Progress:
        """Save, ignoring ``unless_steered``."""
        kwargs.pop("unless_steered", None)
        return super().save_run(claim, messages, **kwargs)  # type: ignore[arg-type]


class IgnoresWhatIsNotASeq(MemoryStore):
    """Deletes the ``taken`` steers it recognises and silently skips anything else in ``taken``."""

    def save_run(self, claim: Claim, messages: Sequence[Message], **kwargs: Any) -> Progress:
        """Save with ``taken`` filtered down to ints."""
        taken = kwargs.pop("taken", ())
        seqs = [seq for seq in taken if type(seq) is int and 0 <= seq < 2**63] if isinstance(taken, list) else []
        return super().save_run(claim, messages, taken=seqs, **kwargs)


class CancelsAnything(MemoryStore):
    """Says a cancel reached a run even when no run holds the session."""

    def cancel(self, session_id: str) -> bool:
        """Cancel, and report success either way."""
        super().cancel(session_id)
        return True


class ForksEverything(MemoryStore):
    """Forks the whole transcript whatever ``at`` says."""

    def fork(self, session_id: str, new_id: str, *, at: int | None = None) -> None:
        """Fork, ignoring ``at`` once it is in range."""
        length = len(self.messages(session_id))
        check_fork_at(at, length)
        super().fork(session_id, new_id)


class ForksOverSessions(MemoryStore):
    """Forks into an existing session by replacing it, instead of refusing."""

    def fork(self, session_id: str, new_id: str, *, at: int | None = None) -> None:
        """Fork, deleting whatever had the new id."""
        self.delete(new_id)
        super().fork(session_id, new_id, at=at)


class NeverSaysItTookOver(MemoryStore):
    """Takes over a stalled session but reports every claim as a first one."""

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Claim, dropping ``took_over``."""
        return attrs.evolve(super().claim(session_id, replica=replica, lease=lease), took_over=False)


class TookOverWhatWasHeldBefore(MemoryStore):
    """Reports a take-over whenever some run held the session before, released or not."""

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Claim, saying it took over when the session had a holder."""
        entry = self._sessions.get(session_id)
        held = entry is not None and entry.holder is not None
        return attrs.evolve(super().claim(session_id, replica=replica, lease=lease), took_over=held)


class IgnoresSteerKeys(MemoryStore):
    """Takes a key and stores every keyed steer all the same: a retry is a second steer."""

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Add the steer, whatever the key."""
        return super().add_steer(session_id, text, if_busy=if_busy)


class ForgetsKeysWhenTaken(MemoryStore):
    """Keeps a key only while its steer waits: a retry after the run took it is a second steer."""

    def take_steers(self, session_id: str) -> list[str]:
        """Take the steers and drop the session's keys."""
        taken = super().take_steers(session_id)
        entry = self._sessions.get(session_id)
        if entry is not None:
            entry.keys.clear()
        return taken


class ChecksKeysApart(MemoryStore):
    """Checks the key, then adds the steer in a second step: retries racing each other both store."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[tuple[str, str], str] = {}

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Look the key up, give other threads the moment between, then add."""
        if key is None:
            return super().add_steer(session_id, text, if_busy=if_busy)
        kept = self.kept.get((session_id, key))
        if kept is not None:
            if kept != text:
                raise ConflictError("another text")
            return self.info(session_id).state
        time.sleep(0.01)  # the gap between two steps, widened so that every racing thread falls into it
        self.kept[(session_id, key)] = text
        return super().add_steer(session_id, text, if_busy=if_busy)


class KeepsKeysAfterDelete(MemoryStore):
    """Remembers keys across delete: a new conversation under the same id cannot use an old key."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[tuple[str, str], bytes] = {}

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Keep keys outside the session's entry."""
        if key is None:
            return super().add_steer(session_id, text, if_busy=if_busy)
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        if (session_id, key) in self.kept:
            if self.kept[(session_id, key)] != digest:
                raise ConflictError("another text")
            return self.info(session_id).state
        self.kept[(session_id, key)] = digest
        return super().add_steer(session_id, text, key=key, if_busy=if_busy)


class MergesMetadata(MemoryStore):
    """Adds the given pairs to what the session held, where set_metadata replaces the whole."""

    def set_metadata(self, session_id: str, metadata: Mapping[str, str]) -> None:
        """Merge, the mistake."""
        super().set_metadata(session_id, {**self.info(session_id).metadata, **metadata})


class MatchesMetadataByPrefix(MemoryStore):
    """Lists a session when its value starts with the one asked for, as a LIKE 'v%' would."""

    def sessions(
        self,
        *,
        state: RunState | Collection[RunState] | None = None,
        updated_before: datetime.datetime | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Iterator[SessionInfo]:
        """Every session whose values start with the asked ones."""
        everything = super().sessions(state=state, updated_before=updated_before)
        asked = dict(metadata or {})
        return (
            info for info in everything if all(info.metadata.get(k, "\x00").startswith(v) for k, v in asked.items())
        )


class QueuesForTheLiveRun(MemoryStore):
    """Stores a queued or interrupting text as a plain steer: the live run takes what was meant for the next."""

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Only "reject" keeps its meaning."""
        return super().add_steer(session_id, text, key=key, if_busy="reject" if if_busy == "reject" else "steer")


class RejectsAfterStoring(MemoryStore):
    """Refuses a text while a run is live, but only after storing it."""

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Store, then refuse."""
        state = super().add_steer(session_id, text, key=key, if_busy="steer" if if_busy == "reject" else if_busy)
        if if_busy == "reject" and state is RunState.RUNNING:
            raise SessionBusyError("busy")
        return state


class InterruptsNothing(MemoryStore):
    """Queues an interrupting text, and never asks the live run to stop."""

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """ "interrupt" as "queue"."""
        return super().add_steer(session_id, text, key=key, if_busy="queue" if if_busy == "interrupt" else if_busy)


class DecidesBusyApart(MemoryStore):
    """Reads the session's state, then adds the steer in a second step: a release can fall in between."""

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Decide on what was read, after a gap widened so that racing releases fall into it."""
        if if_busy == "steer" or key is not None:
            return super().add_steer(session_id, text, key=key, if_busy=if_busy)
        state, token = self.info(check_session_id(session_id)).state, self._entry(session_id).token
        if if_busy == "reject" and state is RunState.RUNNING:
            raise SessionBusyError("busy")
        time.sleep(0.05)  # wide enough that the racing release falls into it on a loaded machine too
        entry = self._locked(session_id)
        try:
            after = token if state is RunState.RUNNING and if_busy in ("queue", "interrupt") else 0
            entry.steers.append(Steer(next(self._seqs), check_steer(text), after))
            entry.cancel_requested = entry.cancel_requested or (after > 0 and if_busy == "interrupt")
            return state
        finally:
            entry.lock.release()


class PrunesLiveLeases(MemoryStore):
    """Goes by the last save alone: an old session that a live run holds is deleted too."""

    def prune(
        self,
        *,
        updated_before: datetime.datetime,
        state: RunState | Collection[RunState] | None = None,
        metadata: Mapping[str, str] | None = None,
        batch: int = 500,
    ) -> int:
        """Prune, then delete the live ones as well."""
        count = super().prune(updated_before=updated_before, state=state, metadata=metadata, batch=batch)
        held = list(self.sessions(state=RunState.RUNNING, updated_before=updated_before, metadata=metadata))
        return count + sum(self.delete(info.id) for info in held)


class PrunesIgnoringMetadata(MemoryStore):
    """Drops ``metadata``: every old ended session goes, whoever's it is."""

    def prune(
        self,
        *,
        updated_before: datetime.datetime,
        state: RunState | Collection[RunState] | None = None,
        metadata: Mapping[str, str] | None = None,
        batch: int = 500,
    ) -> int:
        """Prune without the metadata."""
        return super().prune(updated_before=updated_before, state=state, batch=batch)


class PrunesWaitingByDefault(MemoryStore):
    """Takes ``state=None`` for every state a prune may name: a session waiting for approval goes."""

    def prune(
        self,
        *,
        updated_before: datetime.datetime,
        state: RunState | Collection[RunState] | None = None,
        metadata: Mapping[str, str] | None = None,
        batch: int = 500,
    ) -> int:
        """Prune, waiting sessions included."""
        every = [s for s in RunState if s is not RunState.RUNNING] if state is None else state
        return super().prune(updated_before=updated_before, state=every, metadata=metadata, batch=batch)


class DecidesBeforeDeleting(MemoryStore):
    """Lists what to delete, then, a slow batch later, deletes it by id: a run that claimed meanwhile loses it."""

    def prune(
        self,
        *,
        updated_before: datetime.datetime,
        state: RunState | Collection[RunState] | None = None,
        metadata: Mapping[str, str] | None = None,
        batch: int = 500,
    ) -> int:
        """Decide, wait, delete."""
        ended = [RunState.IDLE, RunState.FINISHED, RunState.FAILED, RunState.CANCELLED]
        listed = self.sessions(state=state or ended, updated_before=updated_before, metadata=metadata)
        ids = [info.id for info in listed]
        time.sleep(0.1)  # the runs racing it claim in this time, even on a loaded machine
        return sum(self.delete(session_id) for session_id in ids)


class CannotPrune(MemoryStore):
    """A run store without ``prune`` (hidden the only way a class can hide a method)."""

    prune = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    "broken", [PrunesLiveLeases, PrunesIgnoringMetadata, PrunesWaitingByDefault, DecidesBeforeDeleting]
)
def test_a_store_that_prunes_the_wrong_sessions_fails_the_prune_property(broken: type[MemoryStore]) -> None:
    # storetest.check alone: no other property calls prune, so the others pass these stores.
    with pytest.raises(AssertionError, match=f"^storetest property {re.escape(repr(storetest.PRUNE))}: ") as caught:
        storetest.check(storetest.PRUNE, broken, max_examples=EXAMPLES)
    assert caught.value.__cause__ is not None


def test_a_run_store_without_prune_skips_the_prune_property() -> None:
    assert storetest.check(storetest.PRUNE, CannotPrune, max_examples=2).skipped == (storetest.PRUNE,)
    report = storetest.check(storetest.PRUNE, MemoryStore, max_examples=2)
    assert report.skipped == () and report.examples[storetest.PRUNE] >= 2


class KeylessRunStore(MemoryStore):
    """A run store written before steer keys: its add_steer takes no key."""

    def add_steer(self, session_id: str, text: str) -> RunState:  # type: ignore[override]
        """Add the steer."""
        return super().add_steer(session_id, text)


def test_a_run_store_whose_add_steer_takes_no_key_skips_the_key_property() -> None:
    report = storetest.check(storetest.KEYS, KeylessRunStore, max_examples=2)
    assert report.skipped == (storetest.KEYS,)
    assert storetest.check(storetest.KEYS, MemoryStore, max_examples=2).skipped == ()


class _Found:
    """A migrator that finds ``version`` recorded."""

    def __init__(self, version: int) -> None:
        self.version = version

    def found(self) -> int:
        return self.version


class SaysAVersionItsDatabaseDoesNotRecord(MemoryStore):
    """Reports version 4 while its migrator finds 3 recorded."""

    def schema_version(self) -> int:
        return 4

    def migrator(self) -> _Found:
        return _Found(3)


class ReportsNoVersion(MemoryStore):
    """Has ``schema_version`` but answers 0."""

    def schema_version(self) -> int:
        return 0


class KeepsItsVersion(MemoryStore):
    """A store over a database at version 2, as its migrator finds."""

    def schema_version(self) -> int:
        return 2

    def migrator(self) -> _Found:
        return _Found(2)


@pytest.mark.parametrize("broken", [SaysAVersionItsDatabaseDoesNotRecord, ReportsNoVersion])
def test_a_store_whose_schema_version_is_wrong_fails_the_schema_property(broken: type[MemoryStore]) -> None:
    with pytest.raises(AssertionError, match=re.escape(repr(storetest.SCHEMA))):
        storetest.check(storetest.SCHEMA, broken, max_examples=2)


def test_a_store_whose_migrator_finds_its_version_passes_the_schema_property() -> None:
    report = storetest.check(storetest.SCHEMA, KeepsItsVersion, max_examples=2)
    assert report.skipped == () and report.examples[storetest.SCHEMA] == 1


def test_memory_store_passes_and_reports_examples() -> None:
    report = storetest.run(MemoryStore, max_examples=EXAMPLES)
    ran = tuple(p for p in storetest.PROPERTIES if p != storetest.SCHEMA)  # no database, no schema version
    assert tuple(report.examples) == ran
    assert report.skipped == (storetest.SCHEMA,)
    assert all(count >= 1 for count in report.examples.values()), report.examples
    assert report.examples["the store agrees with a dict model"] >= EXAMPLES
    assert report.examples["run states follow their transitions"] >= EXAMPLES
    assert report.total == sum(report.examples.values())
    assert report.seconds > 0
    skipped = r" \(1 skipped for capabilities the store lacks\)"
    pattern = rf"storetest: \d+ examples over {len(ran)} properties in \d+\.\d s{skipped}"
    assert re.fullmatch(pattern, str(report))


def test_a_store_with_only_the_seed_methods_skips_the_run_properties() -> None:
    assert not isinstance(DictStore(), RunStore)
    report = storetest.run(DictStore, max_examples=2)
    skipped = (
        *storetest.RUN_PROPERTIES,
        storetest.KEYS,
        storetest.BUSY,
        storetest.FORK,
        *storetest.APPROVAL_PROPERTIES,
        storetest.METADATA,
        storetest.SUMMARY,
        storetest.PRUNE,
        storetest.SCHEMA,
    )
    assert report.skipped == skipped
    assert tuple(report.examples) == tuple(p for p in storetest.PROPERTIES if p not in skipped)
    assert str(report).endswith(f"({len(skipped)} skipped for capabilities the store lacks)")


def test_one_store_can_be_reused_across_runs() -> None:
    store = MemoryStore()
    for _ in range(2):
        storetest.run(lambda: store, max_examples=2)


def test_stores_over_the_same_data_are_used_as_replicas() -> None:
    shared = DictStore()
    assert storetest.run(lambda: DictStore(shared), max_examples=2).replicas
    assert not storetest.run(DictStore, max_examples=2).replicas
    assert not storetest.run(lambda: shared, max_examples=2).replicas


def test_max_examples_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_examples"):
        storetest.run(MemoryStore, max_examples=0)
    with pytest.raises(ValueError, match="listing_sessions"):
        storetest.run(MemoryStore, listing_sessions=1)


BROKEN = [
    pytest.param("steers are taken exactly once", DropsEveryThirdSteer, id="drops-a-steer"),
    pytest.param("steers are taken exactly once", TakesWithoutRemoving, id="takes-without-removing"),
    pytest.param("strings are kept verbatim", SortsJsonKeys, id="sorts-json-keys"),
    pytest.param("strings are kept verbatim", CoversEveryCompactionWithOne, id="loses-covers"),
    pytest.param("session ids never leak into each other", lambda: LeaksBetweenIds(str.lower), id="folds-case"),
    pytest.param("session ids never leak into each other", lambda: LeaksBetweenIds(lambda i: i[:1]), id="first-char"),
    pytest.param("session ids never leak into each other", lambda: LeaksBetweenIds(lambda i: i[:200]), id="cuts-ids"),
    pytest.param("session ids never leak into each other", lambda: LeaksBetweenIds(str.rstrip), id="pads-spaces"),
    pytest.param("bad input is rejected and stores nothing", AcceptsAnyId, id="accepts-any-id"),
    pytest.param("bad input is rejected and stores nothing", SavesUntilABadMessage, id="saves-part"),
    pytest.param("readers never see a mixed transcript", NotAtomicForReaders, id="not-atomic"),
    pytest.param("save replaces the transcript", KeepsTheCallersList, id="keeps-callers-list"),
    pytest.param("save replaces the transcript", functools.partial(TrustsWhatItLastSaved, DictStore()), id="stale"),
    pytest.param("messages() returns a new list", ReturnsItsOwnList, id="returns-own-list"),
    pytest.param(storetest.MANY, AppendsPastTheStoredLength, id="forgets-past-256-sessions"),
    pytest.param(storetest.MANY, ForgetsWhatHandlesSaved, id="forgets-what-handles-saved"),
    pytest.param(storetest.MANY, functools.partial(TrustsWhatAHandleSaved, DictStore()), id="stale-handle-memory"),
    pytest.param("unknown sessions are empty", FailsOnUnknownSessions, id="fails-on-unknown"),
]

# Each of these is told first by the property about its mistake, though others may fail too.
BROKEN_RUNS = [
    pytest.param("leases run out and stalled sessions are taken over", NeverBusy, id="never-busy"),
    pytest.param("leases run out and stalled sessions are taken over", NoFencing, id="no-fencing"),
    pytest.param("fencing tokens grow, also across delete", TokensRestartAfterDelete, id="tokens-restart"),
    pytest.param("listing pages through every session once", PagesOnUpdatedAtOnly, id="drops-ties-across-pages"),
    pytest.param("no steer is orphaned at release", ReleasesThoughSteered, id="releases-though-steered"),
    pytest.param("cancel reaches the holder", CancelsAnything, id="cancels-when-idle"),
    pytest.param(storetest.ARGUMENTS, IgnoresWhatIsNotASeq, id="ignores-bad-taken"),
    pytest.param(storetest.FORK, ForksEverything, id="fork-ignores-at"),
    pytest.param(storetest.FORK, ForksOverSessions, id="fork-replaces-a-session"),
    pytest.param("a claim says whether it took over a lapsed lease", NeverSaysItTookOver, id="never-took-over"),
    pytest.param("a claim says whether it took over a lapsed lease", TookOverWhatWasHeldBefore, id="took-over-ended"),
    pytest.param(storetest.KEYS, IgnoresSteerKeys, id="ignores-steer-keys"),
    pytest.param(storetest.KEYS, ForgetsKeysWhenTaken, id="forgets-keys-when-taken"),
    pytest.param(storetest.KEYS, ChecksKeysApart, id="checks-keys-apart"),
    pytest.param(storetest.KEYS, KeepsKeysAfterDelete, id="keeps-keys-after-delete"),
    pytest.param(storetest.BUSY, QueuesForTheLiveRun, id="queues-for-the-live-run"),
    pytest.param(storetest.BUSY, RejectsAfterStoring, id="rejects-after-storing"),
    pytest.param(storetest.BUSY, InterruptsNothing, id="interrupts-nothing"),
    pytest.param(storetest.BUSY, DecidesBusyApart, id="decides-busy-apart"),
    pytest.param(storetest.METADATA, MergesMetadata, id="merges-metadata"),
    pytest.param(storetest.METADATA, MatchesMetadataByPrefix, id="matches-metadata-by-prefix"),
]


@pytest.mark.parametrize(("prop", "factory"), BROKEN)
def test_a_broken_store_fails_naming_the_property(prop: str, factory: Callable[[], Store]) -> None:
    with pytest.raises(AssertionError, match=re.escape(repr(prop))) as caught:
        storetest.run(factory, max_examples=EXAMPLES)
    assert str(caught.value).startswith("storetest property '")
    assert caught.value.__cause__ is not None


@pytest.mark.parametrize(("prop", "factory"), BROKEN_RUNS)
def test_a_broken_run_store_fails_naming_the_property_first(prop: str, factory: Callable[[], Store]) -> None:
    with pytest.raises(AssertionError) as caught:
        storetest.run(factory, max_examples=EXAMPLES, listing_sessions=40)
    assert str(caught.value).startswith(f"storetest property {prop!r}: "), str(caught.value)
    assert caught.value.__cause__ is not None


def test_the_dict_store_the_broken_ones_build_on_passes() -> None:
    storetest.run(DictStore, max_examples=EXAMPLES)


def test_importing_the_package_does_not_import_hypothesis() -> None:
    code = "import sys, agentsessions, agentsessions.stores.memory; assert 'hypothesis' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(("prop", "factory"), BROKEN_RUNS[:3])
def test_check_runs_the_one_property_and_names_it_when_it_fails(prop: str, factory: Callable[[], Store]) -> None:
    with pytest.raises(AssertionError, match=f"^storetest property {re.escape(repr(prop))}: "):
        storetest.check(prop, factory, max_examples=EXAMPLES, listing_sessions=40)
    others = [name for name in storetest.properties() if name != prop and name not in storetest.RUN_PROPERTIES]
    report = storetest.check(others[0], factory, max_examples=EXAMPLES)  # the other properties still hold
    assert tuple(report.examples) == (others[0],)


def test_check_skips_a_property_the_store_has_no_capability_for_and_refuses_unknown_names() -> None:
    report = storetest.check(storetest.RUN_PROPERTIES[0], DictStore, max_examples=2)
    assert report.skipped == (storetest.RUN_PROPERTIES[0],) and not report.examples
    with pytest.raises(ValueError, match="not a storetest property"):
        storetest.check("stores things", DictStore)
    assert storetest.properties() == storetest.PROPERTIES


def test_the_old_import_path_still_works_with_a_deprecation_warning() -> None:
    import importlib
    import sys

    sys.modules.pop("agentsessions.stores.storetest", None)
    with pytest.warns(DeprecationWarning, match="agentsessions.testing.storetest"):
        old = importlib.import_module("agentsessions.stores.storetest")
    assert old.run is storetest.run and old.check is storetest.check
