"""``encrypted(store, keyring)``: the same store, keeping ciphertext where it kept text.

The wrapper has exactly the methods of the store it wraps, so whatever looks for a
capability (``isinstance(store, RunStore)``, storetest, the runner) finds the same ones.
Messages and steers are sealed on the way in and opened on the way out (see
:mod:`agentsessions.crypto._sealing`); records, listings, claims and leases pass through
untouched, since nothing in them is the conversation.

A save costs what is new, as the stores promise: the stores compare the new transcript
with the one they last saw, so a message already saved must be handed to them as the very
same ciphertext, not encrypted afresh under a new nonce. The wrapper remembers, for the
sessions it used lately, each message it sealed or opened beside the ciphertext it
stands for, and seals only the messages after what the new transcript shares with that.
A read reuses them the same way: a stored row equal to a ciphertext remembered for that
session and position holds the message remembered with it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, Protocol, overload

import attrs

from agentsessions.approvals import Approval, Decision, check_decisions, check_input_json, edits_inputs
from agentsessions.crypto import _approvals as approval_crypto
from agentsessions.crypto._keyring import Keyring
from agentsessions.crypto._sealing import Sealer
from agentsessions.errors import ConflictError, FormatError, SessionBusyError
from agentsessions.messages import Message, check_transcript, transcript_list
from agentsessions.runs import Claim, Progress, Renewal, RunState, SessionInfo, Steer
from agentsessions.session import (
    ForkStore,
    RunStore,
    Store,
    check_fork_at,
    check_if_busy,
    check_session_id,
    check_steer,
    keeps_busy_policies,
    keeps_steer_keys,
    keeps_usage,
    saves_beside_handles,
)
from agentsessions.stores.kit import arguments
from agentsessions.stores.kit.approvals import Rewrite, check_wait
from agentsessions.stores.kit.incremental import SessionMemory, shared_prefix
from agentsessions.usage import Usage

SEED_METHODS = ("save", "messages", "add_steer", "take_steers")
"""What every store has (:class:`~agentsessions.session.Store`)."""

OPTIONAL_METHODS = (
    *("info", "sessions", "delete", "cancel", "claim", "peek_steers", "save_run", "renew"),
    *("fork", "set_metadata", "prune", "close"),
    *("wait", "approvals", "decide"),
    *("schema_version", "migrator"),
)
"""The methods the wrapper has when, and only when, the store it wraps has them."""


@attrs.frozen
class _Known:
    """A session's messages as this wrapper last sealed or opened them, beside their ciphertexts.

    Lists never changed once remembered: a save builds new ones.
    """

    plain: list[Message]
    sealed: list[Message]


class EncryptedStore:
    """A store whose messages and steers are kept encrypted; what :func:`encrypted` returns.

    ``inner`` is the store it wraps and ``keyring`` its keys. It has the four methods of
    :class:`~agentsessions.Store`, and each further method of a
    :class:`~agentsessions.RunStore` or :class:`~agentsessions.ForkStore` exactly when
    ``inner`` has it. Safe to share between threads when ``inner`` is.
    """

    __slots__ = ("_inner_beside", "_inner_usage", "_known", "_sealer", "_twins", "_twins_lock", "inner")

    @property
    def edits_inputs(self) -> bool:
        """Whether the wrapped store records an approval with an edited input (so this one does)."""
        return edits_inputs(self.inner)

    previews_text = False
    """The wrapped store is given ciphertext only, so the previews it keeps are empty."""

    @property
    def keeps_usage(self) -> bool:
        """Whether the wrapped store keeps each session's usage (so this one does)."""
        return self._inner_usage

    def __init__(self, inner: Store, sealer: Sealer) -> None:
        self.inner = inner
        self._sealer = sealer
        self._known: SessionMemory[_Known] = SessionMemory()
        self._inner_beside = saves_beside_handles(inner)  # read once: a signature is slow to inspect
        self._inner_usage = keeps_usage(inner)
        # Per session: steers that are copies of a steer peeked under another seq (see _open_steers).
        self._twins: dict[str, dict[int, list[int]]] = {}
        self._twins_lock = threading.Lock()

    @property
    def keyring(self) -> Keyring:
        """The keys this store encrypts and decrypts with."""
        return self._sealer.keyring

    @property
    def allow_plaintext(self) -> bool:
        """Whether plaintext rows (written before encryption) are read instead of refused."""
        return self._sealer.allow_plaintext

    def __repr__(self) -> str:
        return f"encrypted({self.inner!r}, {self.keyring!r})"

    # --- The seed's four --------------------------------------------------------------------

    def save(self, session_id: str, messages: Sequence[Message], *, holder: object | None = None) -> None:
        """Make ``messages`` the session's transcript, each message stored encrypted.

        What is sealed is remembered beside ``holder`` (a session handle) for as long as it
        lives, and passed on to the wrapped store when it remembers saves the same way.
        """
        sealed = self._seal_transcript(session_id, messages, holder)
        if holder is not None and self._inner_beside:
            self.inner.save(session_id, sealed, holder=holder)  # type: ignore[call-arg]
        else:
            self.inner.save(session_id, sealed)

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, decrypted; raises :class:`~agentsessions.DecryptionError`, never skips."""
        return self._open_transcript(session_id, self.inner.messages(check_session_id(session_id)))

    def add_steer(self, session_id: str, text: str) -> Any:
        """Leave a steer, stored encrypted; returns what the wrapped store returns (its ``RunState``)."""
        check_session_id(session_id)
        return self.inner.add_steer(session_id, self._sealer.seal_steer(session_id, check_steer(text)))

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, decrypted, oldest first."""
        stored = self.inner.take_steers(check_session_id(session_id))
        opened, _ = self._open_steers(session_id, [Steer(seq, text) for seq, text in enumerate(stored)])
        return [steer.text for steer in opened]

    # --- Sealing and opening, remembered ------------------------------------------------------

    def _seal_transcript(
        self, session_id: str, messages: Sequence[Message], claim: object | None = None
    ) -> list[Message]:
        check_session_id(session_id)
        new = transcript_list(messages)
        known = self._known.get(session_id, claim)
        if known is None:
            # Sealed afresh (a new nonce), every message would differ from its stored row and
            # be written again: the stored ones are read and opened once, and reused. Rows that
            # do not open (an old key, plaintext) are simply written anew, as before.
            with contextlib.suppress(FormatError):
                self._open_transcript(session_id, self.inner.messages(session_id))
            known = self._known.get(session_id)
        shared = shared_prefix(known.plain, new) if known is not None else 0
        check_transcript(new, start=shared)  # the shared prefix was checked when first sealed
        sealed = known.sealed[:shared] if known is not None else []
        sealed += [self._sealer.seal_message(session_id, i, new[i]) for i in range(shared, len(new))]
        self._known.remember(session_id, _Known(list(new), sealed), claim)  # a copy: the caller's list grows on
        return sealed

    def _open_transcript(self, session_id: str, stored: list[Message]) -> list[Message]:
        known = self._known.get(session_id)
        seen = known.sealed if known is not None else []
        plain = [
            known.plain[i] if known is not None and i < len(seen) and seen[i] == row else self._open(session_id, i, row)
            for i, row in enumerate(stored)
        ]
        self._known.remember(session_id, _Known(plain, stored))
        return list(plain)  # the caller's to change

    def _open(self, session_id: str, position: int, row: Message) -> Message:
        return self._sealer.open_message(session_id, position, row)

    def _open_steers(self, session_id: str, stored: Sequence[Steer]) -> tuple[list[Steer], dict[int, list[int]]]:
        """The steers decrypted, and the twins left out: ``{seq shown: [seqs of its copies]}``.

        ``rekey`` re-encrypts a steer by adding a copy under the same steer id and then
        deleting the original; killed in between, it leaves both. Only the first is
        shown; its copies are deleted by the save that takes it.
        """
        first_seq: dict[bytes, int] = {}
        opened: list[Steer] = []
        twins: dict[int, list[int]] = {}
        for steer in stored:
            steer_id, text = self._sealer.open_steer(session_id, steer.text)
            first = first_seq.get(steer_id) if steer_id else None
            if first is None:
                first_seq[steer_id] = steer.seq
                opened.append(Steer(steer.seq, text, steer.after_token))
            else:
                twins.setdefault(first, []).append(steer.seq)
        return opened, twins

    def _keep_twins(self, session_id: str, twins: dict[int, list[int]]) -> None:
        with self._twins_lock:
            if twins:
                self._twins[session_id] = twins
            else:
                self._twins.pop(session_id, None)

    def _with_twins(self, session_id: str, taken: Sequence[int]) -> list[int]:
        with self._twins_lock:
            twins = self._twins.pop(session_id, {})
        return [*taken, *(twin for seq in taken for twin in twins.get(seq, ()))]


class _Everything(EncryptedStore):
    """Every optional method; :func:`encrypted` builds a class with those the wrapped store has."""

    __slots__ = ()

    inner: Any  # has whichever of these methods the class was built with

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Leave a steer, stored encrypted; with ``key``, safe to retry (the wrapped store keeps the key).

        A keyed steer is sealed deterministically (see :mod:`agentsessions.crypto._sealing`),
        so a retry hands the wrapped store the ciphertext it kept. A retry after the current
        key changed is sealed again under each older key of the keyring before its
        :class:`~agentsessions.ConflictError` is believed. ``if_busy`` goes to the wrapped
        store, which decides it (a ``TypeError`` if that store takes none).
        """
        session_id, text, key = arguments.add_steer(session_id, text, key)
        policy: dict[str, str] = {}
        if check_if_busy(if_busy) != "steer":
            if not keeps_busy_policies(self.inner):
                raise TypeError(
                    f"{type(self.inner).__name__} cannot apply if_busy={if_busy!r}: its add_steer takes none"
                )
            policy["if_busy"] = if_busy
        if key is None:
            state: RunState = self.inner.add_steer(session_id, self._sealer.seal_steer(session_id, text), **policy)
            return state
        current = self.keyring.current
        try:
            sealed = self._sealer.seal_keyed_steer(session_id, key, text)
            state = self.inner.add_steer(session_id, sealed, key=key, **policy)
            return state
        except SessionBusyError:
            raise  # if_busy="reject" refused it: no older key's ciphertext changes that
        except ConflictError as conflict:
            for key_id in (k for k in self.keyring.ids if k != current):
                with contextlib.suppress(ConflictError):
                    sealed = self._sealer.seal_keyed_steer(session_id, key, text, key_id)
                    state = self.inner.add_steer(session_id, sealed, key=key, **policy)
                    return state
            raise conflict

    def info(self, session_id: str) -> SessionInfo:
        """The session's record, as the wrapped store keeps it (nothing in it is encrypted)."""
        result: SessionInfo = self.inner.info(session_id)
        return result

    def sessions(
        self,
        *,
        state: RunState | Collection[RunState] | None = None,
        updated_before: Any = None,
        **filters: Any,
    ) -> Iterator[SessionInfo]:
        """The wrapped store's listing (ids, states and times are kept in clear, for this)."""
        result: Iterator[SessionInfo] = self.inner.sessions(state=state, updated_before=updated_before, **filters)
        return result

    def schema_version(self) -> int:
        """The schema version of the wrapped store's database (encryption changes no schema)."""
        version: int = self.inner.schema_version()
        return version

    def migrator(self) -> Any:
        """The wrapped store's migrator: ``agentsessions migrate`` brings its schema forward."""
        return self.inner.migrator()

    def set_metadata(self, session_id: str, metadata: Mapping[str, str]) -> None:
        """Set the session's metadata in the wrapped store, in clear: listing by it needs it readable."""
        self.inner.set_metadata(session_id, metadata)

    def delete(self, session_id: str) -> bool:
        """Remove the session whole; ``True`` if it existed."""
        deleted: bool = self.inner.delete(session_id)
        self._known.forget(session_id)
        return deleted

    def prune(
        self,
        *,
        updated_before: Any,
        state: RunState | Collection[RunState] | None = None,
        metadata: Mapping[str, str] | None = None,
        batch: int = 500,
    ) -> int:
        """Delete old sessions in the wrapped store (it reads records only, which are in clear); how many went.

        What this wrapper remembers of a pruned session is only ciphertext it sealed, still
        valid for a session made anew under the same id, as it is after another replica's delete.
        """
        result: int = self.inner.prune(updated_before=updated_before, state=state, metadata=metadata, batch=batch)
        return result

    def cancel(self, session_id: str) -> bool:
        """Ask the run holding the session to stop; ``False`` when no live run holds it."""
        result: bool = self.inner.cancel(session_id)
        return result

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Hold the session for a run (the wrapped store's claim)."""
        result: Claim = self.inner.claim(session_id, replica=replica, lease=lease)
        return result

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        """Extend the leases of ``claims`` (the wrapped store's renewal)."""
        result: Renewal = self.inner.renew(claims)
        return result

    def peek_steers(self, session_id: str) -> list[Steer]:
        """The steers waiting, decrypted, oldest first, left in place."""
        stored = self.inner.peek_steers(check_session_id(session_id))
        opened, twins = self._open_steers(session_id, stored)
        self._keep_twins(session_id, twins)
        return opened

    def save_run(
        self,
        claim: Claim,
        messages: Sequence[Message],
        *,
        taken: Sequence[int] = (),
        end: RunState | None = None,
        unless_steered: bool = False,
        usage: Usage | None = None,
    ) -> Progress:
        """Save encrypted as the run holding ``claim`` (the wrapped store's ``save_run``); steers decrypted.

        ``usage`` goes to the wrapped store as it is (token counts are not content), when it keeps usage.
        """
        call = arguments.save_run(claim, taken, end, unless_steered, usage)  # before sealing reads the claim
        sealed = self._seal_transcript(claim.session_id, messages, claim)
        taken = self._with_twins(claim.session_id, call.taken)
        extra = {"usage": call.usage} if self._inner_usage and call.usage is not None else {}
        progress: Progress = self.inner.save_run(
            claim, sealed, taken=taken, end=call.end, unless_steered=call.unless_steered, **extra
        )
        if call.end is not None and not progress.pending:
            self._known.release(claim.session_id, claim)  # released: the run no longer keeps it
        if not progress.pending:
            return progress
        pending, twins = self._open_steers(claim.session_id, progress.pending)
        self._keep_twins(claim.session_id, twins)
        return attrs.evolve(progress, pending=tuple(pending))

    def fork(self, session_id: str, new_id: str, *, at: int | None = None) -> None:
        """A new idle session holding the first ``at`` messages, re-encrypted for its own id.

        The ciphertexts are bound to their session, so they cannot be copied as they are:
        the wrapped store forks nothing (``at=0``, which refuses an existing ``new_id``),
        then the prefix is saved under the new id. A reader sees the new session empty
        for that instant, never part of the prefix.
        """
        check_session_id(new_id)
        source = self.messages(session_id)
        cut = check_fork_at(at, len(source))
        self.inner.fork(session_id, new_id, at=0)
        if cut:
            self.inner.save(new_id, self._seal_transcript(new_id, source[:cut]))

    def close(self) -> None:
        """Close the wrapped store."""
        self.inner.close()

    def wait(self, claim: Claim, approvals: Sequence[Approval]) -> None:
        """Release the session waiting for ``approvals``, their inputs stored encrypted."""
        calls = check_wait(claim, approvals)
        self.inner.wait(claim, approval_crypto.sealed(self._sealer, claim.session_id, calls))

    def approvals(self, session_id: str) -> list[Approval]:
        """The calls of the session's latest wait, their inputs and reasons decrypted."""
        stored = self.inner.approvals(check_session_id(session_id))
        return approval_crypto.opened(self._sealer, session_id, stored)

    def decide(self, session_id: str, decisions: Mapping[str, Decision], *, rewrite: Rewrite | None = None) -> RunState:
        """Record ``decisions`` (the wrapped store's ``decide``), each reason and edited input stored encrypted.

        An edited input has the wrapped store rewrite the wait's sealed message through this
        wrapper: opened, the input put in, sealed again, in the wrapped store's atomic step.
        ``rewrite`` is the wrapped store's to take: this wrapper passes its own.
        """
        if rewrite is not None:
            raise TypeError("crypto.encrypted rewrites the wait's message itself: pass no rewrite")
        checked = check_decisions(decisions)
        check_session_id(session_id)
        inputs = {call_id: d.input for call_id, d in checked.items() if d.input is not None}
        for text in inputs.values():
            check_input_json(text)  # as session.decide does; the wrapped store sees it encrypted
        if not inputs:
            sealed = approval_crypto.sealed_decisions(self._sealer, session_id, checked)
            state: RunState = self.inner.decide(session_id, sealed)
            return state
        if not edits_inputs(self.inner):
            raise TypeError(f"{type(self.inner).__name__} cannot approve a call with an edited input")
        stored = self.inner.approvals(session_id)
        sealed = approval_crypto.sealed_decisions(self._sealer, session_id, checked, stored)
        rewrite = approval_crypto.rewrite(self._sealer, session_id, inputs)
        state = self.inner.decide(session_id, sealed, rewrite=rewrite)
        return state


@functools.cache
def _wrapper_class(methods: frozenset[str]) -> type[EncryptedStore]:
    # A class per set of methods: protocols and storetest look for methods on the class,
    # so a method the wrapped store lacks must be absent, not present and failing.
    chosen = {name: vars(_Everything)[name] for name in (*OPTIONAL_METHODS, "add_steer") if name in methods}
    return type("EncryptedStore", (EncryptedStore,), {"__slots__": (), "__doc__": EncryptedStore.__doc__, **chosen})


class _RunForkStore(RunStore, ForkStore, Protocol):
    """A store that keeps runs and forks: what the library's persistent stores are."""


@overload
def encrypted(store: _RunForkStore, keyring: Keyring, allow_plaintext: bool = False) -> _RunForkStore: ...
@overload
def encrypted(store: RunStore, keyring: Keyring, allow_plaintext: bool = False) -> RunStore: ...
@overload
def encrypted(store: Store, keyring: Keyring, allow_plaintext: bool = False) -> Store: ...
def encrypted(store: Store, keyring: Keyring, allow_plaintext: bool = False) -> Store:
    """``store``, keeping message contents, steer texts and tool inputs encrypted with ``keyring``.

    The result has the same methods as ``store`` (any of the library's stores, one with
    only the four methods of :class:`~agentsessions.Store`, a third party's): use it
    wherever ``store`` was used. Session ids, states, times, holders and metadata stay in
    clear, for listing. A row that does not decrypt raises
    :class:`~agentsessions.DecryptionError`; a plaintext row too, unless
    ``allow_plaintext`` (for a store being moved over: ``agentsessions rekey`` then
    encrypts what is left).
    """
    if isinstance(store, EncryptedStore):
        raise TypeError("the store is encrypted already: wrap the store itself, once")
    missing = [name for name in SEED_METHODS if not callable(getattr(store, name, None))]
    if missing:
        raise TypeError(f"{type(store).__name__} is not a store: it has no {', '.join(missing)}")
    methods = frozenset(name for name in OPTIONAL_METHODS if callable(getattr(store, name, None)))
    if keeps_steer_keys(store):  # the keyed add_steer, only over a store that keeps keys
        methods |= {"add_steer"}
    wrapper: Store = _wrapper_class(methods)(store, Sealer(keyring, allow_plaintext=allow_plaintext))
    return wrapper
