"""The arguments of a store's run calls, checked in one place before any I/O.

``add_steer``, ``claim``, ``save_run`` and ``renew`` take values that go straight into SQL parameters, Lua
arguments or documents, where a wrong type ends as a driver's own error deep in a codec
(an ``AttributeError`` from ``claim.session_id``), an ``OverflowError`` from a 64-bit
column, or, worse, as nothing at all: a ``taken`` of ``["x"]`` matches no steer and is
accepted. Every store calls these first, so a caller's mistake is the same
``TypeError`` (a wrong type) or ``ValueError`` (a wrong value) on every store, naming the
argument, what it should be and what arrived, and nothing is written::

    session_id, text, key = arguments.add_steer(session_id, text, key)
    session_id, replica, lease = arguments.claim(session_id, replica, lease)
    call = arguments.save_run(claim, taken, end, unless_steered, usage)
    claims = arguments.renew(claims)

Session ids, steers, transcripts, leases and ends have their checks where they are
defined (:mod:`agentsessions.session`, :mod:`agentsessions.messages`,
:mod:`agentsessions.runs`); these build on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from agentsessions.runs import Claim, RunState, check_end, check_lease
from agentsessions.session import check_session_id, check_steer, check_steer_key
from agentsessions.usage import Usage

__all__ = ["MAX_SEQ", "MAX_TOKENS", "SaveRun", "add_steer", "claim", "renew", "save_run"]

MAX_SEQ = 2**63 - 1
"""The largest steer seq or fencing token: every store keeps them in a signed 64-bit integer."""

MAX_TOKENS = 2**53 - 1
"""The largest token count a run's usage may carry: every store's JSON (and Redis's Lua) keeps it exactly."""


@attrs.frozen
class SaveRun:
    """``save_run``'s arguments once checked: ``taken`` as a list of seqs, ``end`` as a state or ``None``.

    ``usage``: the tokens the run has used so far, or ``None`` to leave the stored usage as it is.
    """

    claim: Claim
    taken: list[int]
    end: RunState | None
    unless_steered: bool
    usage: Usage | None = None


def add_steer(session_id: object, text: object, key: object) -> tuple[str, str, str | None]:
    """``add_steer``'s arguments, checked: the session id, the steer's text, and its key or ``None``."""
    return check_session_id(session_id), check_steer(text), check_steer_key(key)


def claim(session_id: object, replica: object, lease: object) -> tuple[str, str, float]:
    """``claim``'s arguments, checked: the session id, a non-empty replica name, and the lease."""
    return check_session_id(session_id), _replica(replica), check_lease(lease)


def save_run(claim: object, taken: object, end: object, unless_steered: object, usage: object = None) -> SaveRun:
    """``save_run``'s arguments but the transcript (which a store checks as it plans the save), checked."""
    if not isinstance(unless_steered, bool):
        raise TypeError(f"unless_steered must be a bool, got {_shown(unless_steered)}")
    return SaveRun(_claim(claim, "claim"), _seqs(taken), check_end(end), unless_steered, _usage(usage))


def renew(claims: object) -> list[Claim]:
    """``renew(claims)``'s argument, checked: a collection of :class:`~agentsessions.runs.Claim`, as a list."""
    if isinstance(claims, (str, bytes, Mapping)) or not isinstance(claims, Iterable):
        raise TypeError(f"claims must be a sequence of Claims (from claim()), got {_shown(claims)}")
    return [_claim(item, f"claims[{index}]") for index, item in enumerate(claims)]


def _claim(value: object, name: str) -> Claim:
    if not isinstance(value, Claim):
        raise TypeError(f"{name} must be a Claim (from claim()), got {_shown(value)}")
    check_session_id(value.session_id)
    if isinstance(value.token, bool) or not isinstance(value.token, int):
        raise TypeError(f"{name}.token must be an int, got {_shown(value.token)}")
    if not 0 < value.token <= MAX_SEQ:
        raise ValueError(f"{name}.token must be between 1 and 2**63 - 1, got {value.token}")
    return value


def _usage(usage: object) -> Usage | None:
    if usage is None:
        return None
    if not isinstance(usage, Usage):
        raise TypeError(f"usage must be an agentsessions.Usage or None, got {_shown(usage)}")
    for field in attrs.fields(Usage):
        count = getattr(usage, field.name)
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"usage.{field.name} must be an int, got {_shown(count)}")
        if not 0 <= count <= MAX_TOKENS:
            raise ValueError(f"usage.{field.name} must be between 0 and 2**53 - 1, got {count}")
    return usage


def _seqs(taken: object) -> list[int]:
    if isinstance(taken, (str, bytes, Mapping)) or not isinstance(taken, Iterable):
        raise TypeError(f"taken must be a sequence of steer seqs (ints, from peek_steers()), got {_shown(taken)}")
    seqs = list(taken)
    for index, seq in enumerate(seqs):
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise TypeError(f"taken[{index}] must be a steer's seq, an int, got {_shown(seq)}")
        if not 0 <= seq <= MAX_SEQ:
            raise ValueError(f"taken[{index}] must be a steer's seq, between 0 and 2**63 - 1, got {seq}")
    return seqs


def _replica(replica: object) -> str:
    if not isinstance(replica, str):
        raise TypeError(f"replica must be a str naming this process, got {_shown(replica)}")
    if not replica:
        raise ValueError("replica must be a non-empty str naming this process, got ''")
    return replica


def _shown(value: object) -> str:
    return f"{type(value).__name__}: {value!r:.80}"
