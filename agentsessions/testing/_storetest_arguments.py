"""The property that a run store refuses bad arguments to its run calls, writing nothing; private to storetest.

``claim``, ``save_run`` and ``renew`` must turn a wrong type into a ``TypeError`` and a
wrong value into a ``ValueError`` before they touch the store: not a driver's own error
from deep in a codec, and never silence (a ``taken`` of ``["x"]`` that matches no steer
and is accepted). Each refusal must leave the session as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from agentsessions.messages import Message
from agentsessions.runs import Claim, RunState
from agentsessions.session import RunStore
from agentsessions.testing._storetest_support import Context, check_equal, check_raises, short

ARGUMENTS = "run calls refuse bad arguments and write nothing"

_LEASE = 600.0
Call = tuple[type[Exception], str, Callable[[], object]]


def check_arguments(context: Context) -> None:
    """Refused claims leave no record; refused saves and renewals leave the held session as it was."""
    store, _ = context.runs
    session_id = context.new_id("arguments")
    for kind, what, call in _bad_claims(store, session_id):
        context.examples += 1
        check_raises(kind, call, what)
        check_equal(store.info(session_id).state, RunState.IDLE, f"the session's state after {what} was refused")
    kept = [Message.user("kept")]
    claim = store.claim(session_id, replica="storetest", lease=_LEASE)
    store.save_run(claim, kept)
    store.add_steer(session_id, "waiting")
    steers = store.peek_steers(session_id)
    for kind, what, call in [*_bad_saves(store, claim, steers[0].seq), *_bad_renewals(store, claim)]:
        context.examples += 1
        check_raises(kind, call, what)
        info = store.info(session_id)
        check_equal((info.state, info.holder), (RunState.RUNNING, "storetest"), f"state and holder after {what}")
        check_equal(store.messages(session_id), kept, f"messages() after {what} was refused")
        check_equal(store.peek_steers(session_id), steers, f"peek_steers() after {what} was refused")
    check_equal(store.renew([claim]).lost, frozenset(), "renew([claim]) after the refusals")
    store.delete(session_id)


def _bad_claims(store: RunStore, session_id: str) -> list[Call]:
    bad_replicas: list[tuple[type[Exception], Any]] = [(TypeError, 5), (TypeError, None), (TypeError, b"r")]
    calls: list[Call] = [
        (kind, f"claim(id, replica={short(replica)})", _claim(store, session_id, replica))
        for kind, replica in bad_replicas
    ]
    calls.append((ValueError, "claim(id, replica='')", _claim(store, session_id, "")))
    return calls


def _claim(store: RunStore, session_id: str, replica: Any) -> Callable[[], object]:
    return lambda: store.claim(session_id, replica=replica, lease=_LEASE)


def _bad_saves(store: RunStore, claim: Claim, seq: int) -> list[Call]:
    saved = [Message.user("refused")]
    not_a_claim: Any = "not a claim"
    a_str: Any = "1"
    forged: list[tuple[type[Exception], str, Any]] = [
        (TypeError, "save_run('not a claim', ...)", not_a_claim),
        (TypeError, "save_run(claim with token '1', ...)", attrs.evolve(claim, token=a_str)),
        (ValueError, "save_run(claim with token 2**70, ...)", attrs.evolve(claim, token=2**70)),
        (ValueError, "save_run(claim with session id '', ...)", attrs.evolve(claim, session_id="")),
    ]
    calls: list[Call] = [(kind, what, _save_run(store, bad, saved)) for kind, what, bad in forged]
    bad_taken: list[tuple[type[Exception], Any]] = [
        (TypeError, ["x"]),
        (TypeError, [None]),
        (TypeError, [seq, "x"]),
        (TypeError, [True]),
        (TypeError, [float(seq)]),
        (TypeError, str(seq)),
        (TypeError, seq),
        (ValueError, [2**70]),
        (ValueError, [-1]),
    ]
    for kind, taken in bad_taken:
        calls.append((kind, f"save_run(claim, taken={short(taken)})", _save_run(store, claim, saved, taken=taken)))
    calls += [
        (TypeError, "save_run(claim, unless_steered='yes')", _save_run(store, claim, saved, unless_steered="yes")),
        (ValueError, "save_run(claim, end='running')", _save_run(store, claim, saved, end="running")),
        (ValueError, "save_run(claim, end=5)", _save_run(store, claim, saved, end=5)),
    ]
    return calls


def _save_run(store: RunStore, claim: Any, messages: list[Message], **options: Any) -> Callable[[], object]:
    return lambda: store.save_run(claim, messages, **options)


def _bad_renewals(store: RunStore, claim: Claim) -> list[Call]:
    bad: list[Any] = [["x"], [claim, "x"], [None], "x", None, claim, {claim: 1}]
    return [(TypeError, f"renew({short(claims)})", _renew(store, claims)) for claims in bad]


def _renew(store: RunStore, claims: Any) -> Callable[[], object]:
    return lambda: store.renew(claims)
