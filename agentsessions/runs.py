"""What a store keeps about runs: their states, the record a session carries, claims and steers.

A session's record says who holds it and until when. A run *claims* its session before
its first save and gets a fencing token, greater than any token that session id ever had;
every later write of the run names that token and is refused once another claim replaced
it. The lease (``lease_expires_at``) is renewed while the run lives; a record whose lease
ran out while marked running is ``STALLED``, and the next claim takes it over.

    IDLE ──claim──▶ RUNNING ──release──▶ FINISHED | CANCELLED | FAILED ──claim──▶ RUNNING
                       │ lease runs out                                              ▲
                       ▼                                                              │
                    STALLED ──────────────────────────claim──────────────────────────┘

Stores that keep these records implement :class:`RunStore`; this module holds the data
they exchange with the runner, and the one rule that derives a state from a record.
"""

from __future__ import annotations

import datetime
import enum
import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

import attrs

from agentsessions.errors import ConflictError, FormatError, SessionBusyError
from agentsessions.messages import Message
from agentsessions.usage import NO_USAGE, Usage

log = logging.getLogger("agentsessions")
Row = TypeVar("Row")

UTC = datetime.UTC


class RunState(enum.StrEnum):
    """Where a session's runs stand.

    ``IDLE``: no run has held it. ``RUNNING``: a run holds it and its lease is live.
    ``STALLED``: a run held it and its lease ran out (its process died or hangs).
    ``FINISHED``, ``CANCELLED``, ``FAILED``: how its last run ended. ``WAITING``: its last
    run stopped for a person's decision on a tool call (:mod:`agentsessions.approvals`).
    """

    IDLE = "idle"
    RUNNING = "running"
    STALLED = "stalled"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"
    WAITING = "waiting"


ENDINGS = frozenset({RunState.FINISHED, RunState.CANCELLED, RunState.FAILED})
"""The states a run may leave its session in when it releases it."""


def _aware(_: object, attribute: attrs.Attribute[datetime.datetime | None], value: object) -> None:
    if value is not None and (not isinstance(value, datetime.datetime) or value.tzinfo is None):
        raise TypeError(f"SessionInfo.{attribute.name} must be an aware datetime or None, got {value!r:.80}")


def _copied(metadata: Mapping[str, str]) -> dict[str, str]:
    return dict(metadata)  # the record's own dict: changing the caller's mapping later changes nothing here


PREVIEW_CHARS = 200
"""How many characters of the last text :attr:`SessionInfo.preview` keeps."""


def preview(messages: Sequence[Message]) -> str:
    """The first :data:`PREVIEW_CHARS` characters of the text of the last message that has any; ``""`` if none.

    Tool calls and results, thinking, images and summaries are not text: while a run is
    between a tool call and its answer, the preview is still the last words someone wrote.
    """
    for message in reversed(messages):
        text = message.text
        if text:
            return text[:PREVIEW_CHARS]
    return ""


@attrs.frozen
class SessionInfo:
    """One session's record, as :meth:`Session.info` and :meth:`RunStore.sessions` report it.

    ``length`` is the number of stored messages; ``updated_at`` the last save (aware UTC,
    to the microsecond; ``None`` if never saved). ``holder`` is the replica name of the
    run holding the session, or of the last one that held it. An unknown id is ``IDLE``
    with length 0. ``pending_approvals`` counts the calls of a ``WAITING`` session nobody has
    decided yet (0 in any other state), and ``approval_deadline`` the earliest ``expires_at``
    among them (``None``: none expires, or nothing waits).
    ``metadata`` is the mapping the application set
    (:meth:`~agentsessions.session.StoreSession.set_metadata`); empty until it sets one.
    ``usage`` sums the tokens of every run of the session, as each run's saves recorded
    them; ``preview`` is the first 200 characters of the text of the last message that has
    any. The store keeps both in the write that saves the transcript, so a listing carries
    them (a sidebar is one query). A store wrapped by :func:`agentsessions.crypto.encrypted`
    never sees message text, so its preview is empty.
    """

    id: str
    length: int = 0
    updated_at: datetime.datetime | None = attrs.field(default=None, validator=_aware)
    state: RunState = attrs.field(default=RunState.IDLE, converter=RunState)
    holder: str | None = None
    lease_expires_at: datetime.datetime | None = attrs.field(default=None, validator=_aware)
    pending_steers: int = 0
    cancel_requested: bool = False
    pending_approvals: int = 0
    # A dict, as an application reads it; left out of the hash, which a dict cannot have.
    metadata: dict[str, str] = attrs.field(factory=dict, converter=_copied, hash=False)
    approval_deadline: datetime.datetime | None = attrs.field(default=None, validator=_aware)
    usage: Usage = NO_USAGE
    preview: str = ""


@attrs.frozen
class Claim:
    """A run's hold on a session: its fencing ``token``, its ``replica`` and its ``lease`` in seconds.

    ``took_over``: the claim ended another holder's lapsed lease (the session was
    ``STALLED``), not a first claim nor one after a release. The store decides it in the
    same atomic step that makes the claim.
    """

    session_id: str
    token: int
    replica: str
    lease: float
    took_over: bool = False


@attrs.frozen
class Steer:
    """A steer waiting in the store: ``seq`` orders a session's steers and names it when taken.

    ``after_token``: the steer is for a run whose claim's token is greater (0: for any run).
    A text sent with ``if_busy="queue"`` or ``"interrupt"`` while a run held the session
    carries that run's token, so the live run leaves it and the next claim takes it.
    """

    seq: int
    text: str
    after_token: int = 0

    def for_claim(self, claim: Claim) -> bool:
        """Whether the run holding ``claim`` may take this steer."""
        return self.after_token < claim.token


@attrs.frozen
class Progress:
    """What :meth:`RunStore.save_run` learned while it wrote.

    ``cancel_requested``: someone asked the run to stop. ``pending``: steers that arrived
    after the run's last collection, when it asked to release only if there were none; the
    session is then still held, and the run goes on with them.
    """

    cancel_requested: bool = False
    pending: tuple[Steer, ...] = ()


@attrs.frozen
class Renewal:
    """What one batched :meth:`RunStore.renew` found: claims no longer held, and claims asked to cancel."""

    lost: frozenset[Claim] = frozenset()
    cancelling: frozenset[Claim] = frozenset()


def derive_state(
    stored: str | None, lease_expires_at: datetime.datetime | None, now: datetime.datetime, session_id: str = ""
) -> RunState:
    """The state of a record whose stored state is ``stored`` (``None``: no run ever held it).

    Stores keep ``"running"`` while a run holds the session; whether it is ``RUNNING`` or
    ``STALLED`` depends on the lease at ``now``, so no store has to rewrite records when
    leases run out. A state this version does not know (a newer version's, during a
    rolling deploy) is a :class:`FormatError` naming ``session_id``.
    """
    if stored is None:
        return RunState.IDLE
    state = _STATES.get(stored)
    if state is None:
        raise unknown_state(stored, session_id)
    if state is RunState.RUNNING and (lease_expires_at is None or lease_expires_at <= now):
        return RunState.STALLED
    return state


def exists(info: SessionInfo) -> bool:
    """Whether the store has anything for this session: a transcript, a run, steers or metadata.

    ``info()`` on an id no one used answers an ``IDLE`` record with nothing in it; any other
    record was made by someone.
    """
    return bool(
        info.length or info.updated_at or info.state is not RunState.IDLE or info.pending_steers or info.metadata
    )


_STATES = {member.value: member for member in RunState}


def listed(rows: Iterable[Row], info: Callable[[Row], SessionInfo], store: str) -> Iterator[SessionInfo]:
    """Each row of a listing as a :class:`SessionInfo`; a record this version cannot read is left out.

    One unreadable record (a newer version's) must not hide every other session from a
    resumer or a console: it is logged as a warning naming the store and the session, and
    ``info()`` on it raises the :class:`FormatError`.
    """
    for row in rows:
        try:
            yield info(row)
        except FormatError as error:
            log.warning("%s: a session left out of the listing: %s", store, error)


def state_filter(state: RunState | Collection[RunState] | None) -> frozenset[RunState] | None:
    """The states ``sessions(state=...)`` asks for, as a set (``None``: every state); checks the values."""
    if state is None:
        return None
    states = [state] if isinstance(state, (str, RunState)) else list(state)
    try:
        return frozenset(RunState(s) for s in states)
    except ValueError as error:
        raise ValueError(f"state must be a RunState or a collection of them, got {state!r:.80}") from error


def check_updated_before(value: object) -> datetime.datetime | None:
    """``updated_before`` as an aware datetime, or ``None``; a naive one is refused (its zone is unknown)."""
    if value is None:
        return None
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        raise TypeError(f"updated_before must be an aware datetime (tzinfo set) or None, got {value!r:.80}")
    return value


def check_end(end: object) -> RunState | None:
    """The state ``save_run(end=...)`` releases a session in: ``None``, or one of :data:`ENDINGS`."""
    if end is None:
        return None
    try:
        state = RunState(end) if isinstance(end, str) else None
    except ValueError:
        state = None
    if state is None or state not in ENDINGS:
        raise ValueError(f"a run ends FINISHED, CANCELLED or FAILED (end=None keeps it), got {end!r:.80}")
    return state


def check_lease(lease: object) -> float:
    """A lease in seconds: a finite number above zero."""
    if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not 0 < lease < 10**9:
        raise ValueError(f"a lease is a number of seconds above 0, got {lease!r:.80}")
    return float(lease)


def unknown_state(stored: str, session_id: str = "") -> FormatError:
    """The error for a record whose run state a newer version wrote (a rolling deploy): never misread."""
    which = f"session {session_id!r:.80}" if session_id else "the session"
    return FormatError(
        f"{which} has run state {stored!r:.40}, which this version of agentsessions does not know "
        "(a newer version wrote it): upgrade this replica"
    )


def busy(session_id: str, holder: str | None, expires: datetime.datetime | None) -> SessionBusyError:
    """The error for a claim refused because another run's lease is live."""
    until = f" until {expires.isoformat()}" if expires else ""
    return SessionBusyError(f"session {session_id!r:.80} is held by {holder!r} (lease live{until})")


def superseded(claim: Claim) -> ConflictError:
    """The error for a write by a run whose claim was taken over, or whose session was deleted."""
    return ConflictError(
        f"session {claim.session_id!r:.80} is no longer held by this run (token {claim.token}): "
        "another run took it over after the lease lapsed, or it was deleted"
    )


def utcnow() -> datetime.datetime:
    """Now, as an aware UTC datetime."""
    return datetime.datetime.now(UTC)


__all__ = [
    "ENDINGS",
    "PREVIEW_CHARS",
    "Claim",
    "Progress",
    "Renewal",
    "RunState",
    "SessionInfo",
    "Steer",
    "derive_state",
    "preview",
]
