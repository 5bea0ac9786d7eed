"""Where a conversation lives outside the process: the Store and Session protocols."""

from __future__ import annotations

import contextlib
import datetime
import inspect
import os
import socket
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from agentsessions.approvals import Approval, ApprovalStore, Decision, check_decisions, check_edits, edits_inputs
from agentsessions.errors import ConflictError, InvalidSessionIdError
from agentsessions.messages import Content, Message, Role, put_results
from agentsessions.metadata import check_metadata
from agentsessions.runs import Claim, Progress, Renewal, RunState, SessionInfo, Steer

MAX_SESSION_ID = 255


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a non-empty str of at most 255 characters, else raise."""
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(f"a session id must be a str, got {type(session_id).__name__}: {session_id!r:.80}")
    if not 0 < len(session_id) <= MAX_SESSION_ID:
        raise InvalidSessionIdError(f"a session id must have 1 to {MAX_SESSION_ID} characters, got {len(session_id)}")
    return session_id


def check_fork_at(at: object, length: int) -> int:
    """``at`` for a fork of a session of ``length`` messages: ``None`` means all; else ``0..length``."""
    if at is None:
        return length
    if isinstance(at, bool) or not isinstance(at, int):
        raise TypeError(f"at must be an int or None, got {type(at).__name__}: {at!r:.80}")
    if not 0 <= at <= length:
        raise ValueError(f"at must be between 0 and the session's length {length}, got {at}")
    return at


MAX_STEER_KEY = 255
"""The most characters a steer key may have: as for session ids, so every store's key column holds one."""


def check_steer_key(key: object) -> str | None:
    """Return ``key`` if it is ``None`` or a non-empty str of at most 255 characters, else raise.

    A steer key is any such string: a request id, a client's message id.
    """
    if key is None:
        return None
    if not isinstance(key, str):
        raise TypeError(f"key must be a str (a request's id) or None, got {type(key).__name__}: {key!r:.80}")
    if not 0 < len(key) <= MAX_STEER_KEY:
        raise ValueError(f"key must have 1 to {MAX_STEER_KEY} characters, got {len(key)}")
    return key


IF_BUSY = ("steer", "queue", "interrupt", "reject")
"""What a text sent to a session does when a live run holds it (``runner.send(..., if_busy=...)``).

``"steer"``: the live run takes it at its next step. ``"queue"``: the live run leaves it and
the next run answers it. ``"interrupt"``: as ``"queue"``, and the live run is asked to stop at
its next step boundary. ``"reject"``: :class:`~agentsessions.errors.SessionBusyError`,
nothing stored. With no live run every policy stores the text for the next run.
"""


def check_if_busy(if_busy: object) -> str:
    """Return ``if_busy`` if it is one of :data:`IF_BUSY`, else raise ``ValueError``."""
    if if_busy not in IF_BUSY:
        raise ValueError(f"if_busy must be one of {', '.join(map(repr, IF_BUSY))}, got {if_busy!r:.80}")
    return str(if_busy)


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

    def add_steer(self, session_id: str, text: str) -> object:
        """Leave a steer for whichever run of this session asks next (what it returns is not used)."""
        ...

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first."""
        ...


@runtime_checkable
class RunStore(Store, Protocol):
    """A store that keeps runs, not only transcripts (the record of :mod:`agentsessions.runs`).

    With one of these behind a session, a run claims the session, keeps a lease on it,
    saves only while it holds it, and takes steers and saves the transcript carrying them
    in one atomic step. A store with only the four :class:`Store` methods still runs,
    without those guarantees. ``add_steer`` returns the session's state at the instant
    the steer was stored.
    """

    def add_steer(self, session_id: str, text: str, *, key: str | None = None) -> RunState:
        """Leave a steer; the state then: ``RUNNING`` means the live run will take it.

        With a ``key`` (a non-empty str of at most 255 characters) the steer is idempotent:
        a key the session already holds stores nothing, and returns the state when its text
        was this one, or raises :class:`ConflictError` when it was another. Checking the key
        and adding the steer are one atomic step. Keys stay while the session lives (taking
        the steer leaves its key); ``delete`` removes them and a fork does not copy them.

        A store may also take ``if_busy`` (:func:`keeps_busy_policies`; every store of this
        library does): one of :data:`IF_BUSY`, deciding in the same atomic step what a steer
        does when a live run holds the session: ``"steer"`` stores it for that run;
        ``"queue"`` stores it with ``Steer.after_token`` set to the live claim's token, so
        only a later claim takes it; ``"interrupt"`` does the same and sets the record's
        ``cancel_requested``; ``"reject"`` raises :class:`SessionBusyError` and stores
        nothing (a retried key finds its text stored and returns the state instead). With no
        live run every policy stores a steer for any run. Over a store without it, sessions
        refuse the policies other than ``"steer"``.
        """
        ...

    def info(self, session_id: str) -> SessionInfo:
        """The session's record; an unknown id is ``IDLE`` with length 0."""
        ...

    def sessions(
        self, *, state: RunState | Collection[RunState] | None = None, updated_before: datetime.datetime | None = None
    ) -> Iterator[SessionInfo]:
        """Every session, newest update first, fetched lazily in pages, each exactly once."""
        ...

    def delete(self, session_id: str) -> bool:
        """Remove transcript, steers and record in one step; ``True`` if the session existed."""
        ...

    def cancel(self, session_id: str) -> bool:
        """Ask the run holding the session to stop; ``False`` when no live run holds it."""
        ...

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Hold the session for a run; raises :class:`SessionBusyError` while another lease is live.

        A ``STALLED`` session is taken over; the :class:`Claim` says so (``took_over=True``),
        decided in the same atomic step as the claim itself.
        """
        ...

    def peek_steers(self, session_id: str) -> list[Steer]:
        """The steers waiting, oldest first, left in place until a :meth:`save_run` names them."""
        ...

    def save_run(
        self,
        claim: Claim,
        messages: Sequence[Message],
        *,
        taken: Sequence[int] = (),
        end: RunState | None = None,
        unless_steered: bool = False,
    ) -> Progress:
        """Save as the run holding ``claim``, renewing its lease; one atomic step.

        Deletes the steers ``taken`` (their seqs: the transcript carries them). With ``end``
        (``FINISHED``, ``CANCELLED`` or ``FAILED``) also releases the session in that state,
        except that with ``unless_steered`` and other steers waiting it keeps holding it and
        returns them in ``Progress.pending``. Raises :class:`ConflictError`, having written
        nothing, when ``claim`` no longer holds the session.

        A store that keeps :attr:`SessionInfo.usage` also takes ``usage: Usage | None``, the
        tokens the run has used so far (:func:`keeps_usage`), and records it in the same step.
        """
        ...

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        """Extend the leases of ``claims`` by their own length, in one write for them all."""
        ...


def keeps_steer_keys(store: object) -> bool:
    """Whether ``store`` keeps steer keys: a :class:`RunStore` whose ``add_steer`` takes ``key``.

    Every store of this library does; a third party's written before keys existed does not,
    and a keyed steer there is refused rather than stored without its key.
    """
    return _add_steer_takes(store, "key")


def keeps_busy_policies(store: object) -> bool:
    """Whether ``store`` decides ``if_busy`` policies: a :class:`RunStore` whose ``add_steer`` takes ``if_busy``.

    Every store of this library does; a third party's written before policies existed does
    not, and a text sent with a policy other than ``"steer"`` is refused there rather than
    stored as a plain steer (which the live run would take).
    """
    return _add_steer_takes(store, "if_busy")


def saves_beside_handles(store: object) -> bool:
    """Whether ``store.save`` takes ``holder``: it remembers a save beside the handle that made it.

    Every persistent store of this library does; a third party's store need not, and is
    then called with ``session_id`` and ``messages`` only.
    """
    return _takes(getattr(store, "save", None), "holder")


def keeps_usage(store: object) -> bool:
    """Whether ``store`` keeps :attr:`SessionInfo.usage`: a :class:`RunStore` whose ``save_run`` takes ``usage``.

    Every store of this library does; a third party's written before usage existed does
    not, and its runs are saved without it (its sessions report no usage). A wrapper says so
    of itself with a ``keeps_usage`` attribute (``crypto.encrypted`` answers for its store).
    """
    said = getattr(store, "keeps_usage", None)
    if isinstance(said, bool):
        return said and isinstance(store, RunStore)
    return isinstance(store, RunStore) and _takes(store.save_run, "usage")


def _add_steer_takes(store: object, name: str) -> bool:
    """Whether ``store`` is a :class:`RunStore` whose ``add_steer`` takes the keyword argument ``name``."""
    return isinstance(store, RunStore) and _takes(store.add_steer, name)


def _takes(method: object, name: str) -> bool:
    """Whether ``method`` is a callable that takes the keyword argument ``name``."""
    if not callable(method):
        return False
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # a callable whose signature cannot be read
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


@runtime_checkable
class MetadataStore(RunStore, Protocol):
    """A :class:`RunStore` that keeps each session's metadata and lists sessions by it.

    ``set_metadata`` replaces the session's whole mapping in one step (an empty one clears
    it), making the record if there is none; it is not a save, so ``updated_at`` stays.
    ``sessions(metadata=...)`` lists only the sessions holding every given pair, over an
    index: as cheap as listing by state, with any other filter.
    """

    def set_metadata(self, session_id: str, metadata: Mapping[str, str]) -> None:
        """Make ``metadata`` the session's whole metadata (see :mod:`agentsessions.metadata` for the limits)."""
        ...

    def sessions(
        self,
        *,
        state: RunState | Collection[RunState] | None = None,
        updated_before: datetime.datetime | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Iterator[SessionInfo]:
        """Every session holding each pair of ``metadata``, newest update first, in pages, each exactly once."""
        ...


@runtime_checkable
class PruneStore(Protocol):
    """A store that deletes old sessions in bulk: a capability of its own, beside :class:`RunStore`.

    ``prune`` deletes, in batches of at most ``batch`` sessions (each its own short step), the
    sessions last updated before ``updated_before`` (an aware datetime) in ``state`` (by
    default the ended ones: idle, finished, failed, cancelled; ``WAITING`` only when named;
    never ``RUNNING``, a session under a live lease) holding every pair of ``metadata``, and
    says how many went. Each session goes whole, as ``delete`` removes it, decided in the step
    that deletes it: a claim racing the prune either keeps its session or finds none.
    Bad arguments raise ``TypeError`` or ``ValueError`` before any I/O.
    """

    def prune(
        self,
        *,
        updated_before: datetime.datetime,
        state: RunState | Collection[RunState] | None = None,
        metadata: Mapping[str, str] | None = None,
        batch: int = 500,
    ) -> int:
        """Delete the old sessions the arguments name; the number deleted."""
        ...


@runtime_checkable
class ForkStore(Protocol):
    """A store that can fork a session: a capability of its own, beside :class:`RunStore`."""

    def fork(self, session_id: str, new_id: str, *, at: int | None = None) -> None:
        """Copy the first ``at`` messages (all when ``None``) into a new session, ``IDLE``, no steers; one step.

        Raises :class:`ConflictError` if ``new_id`` exists, and ``ValueError`` if ``at`` is
        outside ``0..length`` (no slice semantics: ``-1`` is an error, not "all but one").
        """
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

    def steer(self, text: str) -> RunState | None:
        """Leave a steer for the run of this session, wherever it runs (:class:`StoreSession` also takes a ``key``)."""
        ...

    def take_steers(self) -> list[str]:
        """Remove and return the waiting steers, oldest first."""
        ...


@attrs.frozen
class StoreSession:
    """A :class:`Session` over a :class:`Store` and one id; what :func:`open` returns.

    ``info``, ``delete`` and ``cancel`` need a :class:`RunStore`; over a store with only
    the four seed methods they raise ``TypeError``.
    """

    id: str
    store: Store = attrs.field(repr=False)
    # Whether the store's save takes ``holder``: then what this handle saved is remembered
    # beside it, and its next save writes only what is new at any number of sessions.
    _beside: bool = attrs.field(init=False, repr=False, eq=False)

    @_beside.default
    def _takes_holder(self) -> bool:
        return saves_beside_handles(self.store)

    def save(self, messages: Sequence[Message]) -> None:
        """Make ``messages`` this session's transcript.

        Over this library's stores, what the handle saved is remembered for as long as the
        handle lives: keep the handle, and each save writes only the messages that are new.
        """
        if self._beside:
            self.store.save(self.id, messages, holder=self)  # type: ignore[call-arg]
        else:
            self.store.save(self.id, messages)

    def messages(self) -> list[Message]:
        """This session's transcript."""
        return self.store.messages(self.id)

    def steer(self, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState | None:
        """Leave a steer for the run of this session, wherever it runs.

        Returns the session's state at the instant the steer was stored: ``RUNNING`` means
        the live run will take it; anything else means it waits for the next run (start
        one). ``None`` from a store that keeps no run records.

        ``key`` makes the steer safe to retry (a web view that lost the answer to its
        request sends it again with the same key): a key already stored for this session
        with the same text stores nothing and returns the state; with another text it raises
        :class:`ConflictError`. Keys need a :class:`RunStore`: over a store with only the
        seed's four methods a key is a ``TypeError``, never a steer that is not idempotent.

        ``if_busy`` says what the text does when a live run holds the session (see
        :data:`IF_BUSY`); the store decides it in the same atomic step that stores the text.
        ``"reject"`` raises :class:`~agentsessions.errors.SessionBusyError` and stores nothing.
        The policies other than ``"steer"`` need a store whose ``add_steer`` takes
        ``if_busy`` (every store of this library); over another they are a ``TypeError``.
        """
        if check_if_busy(if_busy) != "steer":
            store = self._runs(f'apply if_busy="{if_busy}"')
            if not keeps_busy_policies(store):
                raise TypeError(
                    f"{type(store).__name__} cannot apply if_busy={if_busy!r}: its add_steer takes no if_busy"
                )
            if key is not None and not keeps_steer_keys(store):
                raise TypeError(f"{type(store).__name__} cannot keep steer keys: its add_steer takes no key")
            state: RunState = getattr(store, "add_steer")(self.id, text, key=key, if_busy=if_busy)  # noqa: B009
            return state
        if key is None:
            stored = self.store.add_steer(self.id, text)
            return stored if isinstance(stored, RunState) else None
        store = self._runs("keep steer keys")
        if not keeps_steer_keys(store):
            raise TypeError(f"{type(store).__name__} cannot keep steer keys: its add_steer takes no key")
        return store.add_steer(self.id, text, key=key)

    def info(self) -> SessionInfo:
        """This session's record: length, last update, state, holder, lease, pending steers."""
        return self._runs().info(self.id)

    def delete(self) -> bool:
        """Remove this session's transcript, steers and record in one step; ``True`` if it existed."""
        return self._runs().delete(self.id)

    def set_metadata(self, metadata: Mapping[str, str]) -> None:
        """Make ``metadata`` (``str`` to ``str``, at most 16 keys) this session's whole metadata, in one step.

        ``store.sessions(metadata={"user": "42"})`` then lists it among that user's
        sessions; :attr:`SessionInfo.metadata` reads it back. An empty mapping clears it.
        Needs a store that keeps metadata (:class:`MetadataStore`); else ``TypeError``.
        """
        checked = check_metadata(metadata)
        if not isinstance(self.store, MetadataStore):
            raise TypeError(f"{type(self.store).__name__} keeps no session metadata (it has no set_metadata method)")
        self.store.set_metadata(self.id, checked)

    def cancel(self) -> bool:
        """Ask the run holding this session to stop, or end its wait for approval; ``False`` when neither.

        The request reaches the run, in whatever process, with its next save or its
        process's next lease renewal (within ``lease / 3``); it then stops before its next
        model request or tool call. A session that waits for approval (``WAITING``) has its
        wait ended instead: each undecided call is rejected (``by="cancel"``), every call of
        the wait gets an ``is_error`` result saying it was cancelled, and the session ends
        ``CANCELLED``, all under a claim of its own.
        """
        store = self._runs()
        if store.cancel(self.id):
            return True
        if isinstance(store, ApprovalStore) and store.info(self.id).state is RunState.WAITING:
            return _end_wait(store, self.id)
        return False

    def fork(self, new_id: str, *, at: int | None = None) -> StoreSession:
        """A new session holding this one's first ``at`` messages (all when ``None``), ``IDLE``, no steers.

        Raises :class:`ConflictError` if ``new_id`` exists and ``ValueError`` for an ``at``
        outside ``0..length``. Resuming at a message is a fork at it, then a run.
        """
        check_session_id(new_id)
        if not isinstance(self.store, ForkStore):
            raise TypeError(f"{type(self.store).__name__} cannot fork sessions (it has no fork method)")
        self.store.fork(self.id, new_id, at=at)
        return StoreSession(new_id, self.store)

    def approvals(self) -> list[Approval]:
        """The tool calls this session waits for, decided or not; ``[]`` when it does not wait."""
        store = self._approvals()
        if self._runs().info(self.id).state is not RunState.WAITING:
            return []
        return store.approvals(self.id)

    def approve(self, call_id: str, *, by: str = "", input: str | None = None) -> RunState:
        """Let the waiting call ``call_id`` run; the session's state after (see :meth:`decide`).

        With ``input`` (JSON text) the call runs with that input instead of the model's; see
        :meth:`decide` for how it is checked and stored.
        """
        return self.decide({call_id: Decision.approve(by=by, input=input)})

    def reject(self, call_id: str, *, reason: str = "", by: str = "") -> RunState:
        """Refuse the waiting call ``call_id``: the model reads an error result holding ``reason``."""
        return self.decide({call_id: Decision.reject(reason=reason, by=by)})

    def decide(self, decisions: Mapping[str, Decision]) -> RunState:
        """Record decisions on waiting calls (call id to :class:`Decision`) in one atomic step, all or none.

        Returns the session's state after it. The same decision again records nothing and
        returns the state (safe to retry); the other decision on a decided call, or an id
        that is not waiting, raises :class:`~agentsessions.ConflictError` and records none.
        Once every call is decided, a run started with ``Resume()`` goes on from the wait.

        An approval with an edited ``input`` is checked first: JSON (before any I/O), then
        against the tool's input schema stored with the wait (an
        :class:`~agentsessions.InvalidArgumentsError`, a ``ValueError``, naming the call and
        the field). The store then records it and rewrites the transcript's ``tool_use``
        block to that input in the same atomic step, so the model reads what ran;
        ``Approval.original_input`` keeps what the model asked for. The same input again
        is a retry; another input on an approved call is a ``ConflictError``.
        """
        checked = check_decisions(decisions)
        store = self._approvals()
        if any(decision.input is not None for decision in checked.values()):
            if not edits_inputs(store):
                raise TypeError(f"{type(store).__name__} cannot approve a call with an edited input")
            check_edits(store.approvals(self.id), checked)
        return store.decide(self.id, checked)

    def _approvals(self) -> ApprovalStore:
        store = self._runs()
        if not isinstance(store, ApprovalStore):
            raise TypeError(f"{type(store).__name__} keeps no approvals (it has no wait, approvals and decide methods)")
        return store

    def _runs(self, to: str = "keep run records") -> RunStore:
        if not isinstance(self.store, RunStore):
            kind = type(self.store).__name__
            raise TypeError(f"{kind} cannot {to}: it implements only agentsessions.Store, not RunStore")
        return self.store

    def take_steers(self) -> list[str]:
        """Remove and return the waiting steers, oldest first."""
        return self.store.take_steers(self.id)


CANCELLED_WAIT = "the wait for approval was cancelled, so this tool call did not run"
"""The result every call of a wait gets when ``session.cancel()`` ends the wait."""


def _end_wait(store: RunStore, session_id: str) -> bool:
    """Reject the wait's undecided calls, then under a claim answer every pending call as cancelled and end.

    A decision or a resumed run can race it: a decision just made stands (the call is
    answered as cancelled all the same); a run that claimed the session first is asked
    to cancel instead.
    """
    assert isinstance(store, ApprovalStore)
    reject = Decision.reject(reason=CANCELLED_WAIT, by="cancel")
    undecided = {a.call_id: reject for a in store.approvals(session_id) if a.decision is None}
    with contextlib.suppress(ConflictError):  # one was decided meanwhile, or the wait ended: go on
        if undecided:
            store.decide(session_id, undecided)
    try:
        claim = store.claim(session_id, replica=f"{socket.gethostname()}:{os.getpid()}", lease=30.0)
    except ConflictError:
        return store.cancel(session_id)  # a run took the session first: it is the one to stop
    transcript = store.messages(session_id)
    _answer_as_cancelled(transcript)
    store.save_run(claim, transcript, end=RunState.CANCELLED)
    return True


def _answer_as_cancelled(transcript: list[Message]) -> None:
    """Give the last assistant message's unanswered tool calls the cancelled result."""
    if transcript and transcript[-1].role is Role.ASSISTANT:
        calls, results = transcript[-1].tool_uses, []
    elif len(transcript) >= 2 and transcript[-2].role is Role.ASSISTANT:
        results = [c for c in transcript[-1].content if c.part_of_result]
        answered = {c.tool_use_id for c in results}
        calls = tuple(use for use in transcript[-2].tool_uses if use.id not in answered)
    else:
        return
    if calls:
        put_results(transcript, [*results, *(Content.tool_result(c.id, CANCELLED_WAIT, is_error=True) for c in calls)])


def open(session_id: str, store: Store) -> StoreSession:
    """Address one conversation in ``store``. Does no I/O."""
    return StoreSession(check_session_id(session_id), store)
