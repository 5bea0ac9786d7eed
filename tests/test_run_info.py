"""What a run tells about itself when it starts: ``Spec.name`` and whether its claim took the session over."""

from __future__ import annotations

import pytest

import agentsessions as agent
from agentsessions import events as ev
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores.memory import MemoryStore
from tests.support.waiting import wait_for


def _started(spec: agent.Spec) -> ev.RunStarted:
    seen: list[object] = []
    agent.Runner("replica-b").run(
        spec, [agent.Message.user("hi")], ScriptedEndpoint([agent.Message.assistant("ok")]), seen.append
    )
    (started,) = [event for event in seen if isinstance(event, ev.RunStarted)]
    return started


def test_run_started_carries_the_name_and_whether_the_claim_took_over() -> None:
    store = MemoryStore()
    session = agent.open("s", store)
    first = _started(agent.Spec(session=session, name="Support"))
    assert (first.name, first.took_over) == ("Support", False)  # a first claim
    assert _started(agent.Spec(session=session)).took_over is False  # a claim after a release
    store.claim("s", replica="replica-a", lease=0.05)  # a run of replica A that then dies
    wait_for("replica A's lease to lapse", lambda: store.info("s").state is agent.RunState.STALLED)
    taken = _started(agent.Spec(session=session, name="Support"))
    assert (taken.name, taken.took_over, taken.replica) == ("Support", True, "replica-b")
    assert _started(agent.Spec()).took_over is False  # no session, no claim


def test_spec_name_is_a_str_defaulting_to_empty() -> None:
    assert agent.Spec().name == ""
    with pytest.raises(TypeError, match="name"):
        agent.Spec(name=None)  # type: ignore[arg-type]
