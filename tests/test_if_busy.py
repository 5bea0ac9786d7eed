"""``runner.send(..., if_busy=...)``: what a second message does while a run is live, on every store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores.memory import MemoryStore
from tests.support.backends import PERSISTENT, scratch_opener, store_params
from tests.support.sending import user_texts
from tests.support.waiting import wait_for


class Gate:
    """A model whose first request waits until released: the run is live, mid-step, meanwhile."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.requests: list[agent.ModelRequest] = []
        self.lock = threading.Lock()

    def complete(self, request: agent.ModelRequest) -> agent.ModelResponse:
        with self.lock:
            self.requests.append(request)
            first = len(self.requests) == 1
        if first:
            self.entered.set()
            assert self.release.wait(10)
        return agent.ModelResponse(agent.Message.assistant(f"you said: {request.messages[-1].text}"))


@pytest.fixture(params=store_params("memory", "encrypted", *PERSISTENT))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[agent.RunStore]:
    """A store of each kind in turn: memory, memory wrapped by crypto.encrypted, each persistent store."""
    if request.param == "memory":
        yield MemoryStore()
        return
    if request.param == "encrypted":
        crypto = pytest.importorskip("agentsessions.crypto", reason="crypto.encrypted needs the cryptography package")
        yield crypto.encrypted(MemoryStore(), crypto.Keyring({"k1": bytes(range(32))}, current="k1"))
        return
    with scratch_opener(request.param, tmp_path) as opener, opener() as opened:
        yield opened


def live_run(store: agent.RunStore, session_id: str, model: Gate) -> tuple[agent.Spec, agent.Run]:
    """A run of ``session_id`` held by replica "a", inside its first model request."""
    spec = agent.Spec(session=agent.open(session_id, store), max_steps=6, lease=10.0)
    run = agent.Runner(replica="a").send(spec, "first", model)
    assert run is not None and model.entered.wait(10)
    return spec, run


def finished(store: agent.RunStore, session_id: str) -> agent.SessionInfo:
    """The session's record once no run holds it and no steer waits."""

    def settled() -> agent.SessionInfo | None:
        info = store.info(session_id)
        ok = info.state in (agent.RunState.FINISHED, agent.RunState.CANCELLED) and not info.pending_steers
        return info if ok else None

    info: agent.SessionInfo = wait_for(f"session {session_id} to end with no steer waiting", settled, 10)
    return info


def test_reject_refuses_while_a_run_is_live_and_stores_nothing(store: agent.RunStore) -> None:
    model = Gate()
    spec, run = live_run(store, "s", model)
    elsewhere = agent.Runner(replica="b")
    with pytest.raises(agent.SessionBusyError, match="held by 'a'"):
        elsewhere.send(spec, "second", model, if_busy="reject")
    assert store.info("s").pending_steers == 0
    model.release.set()
    assert user_texts(run.wait(10).messages) == ["first"]
    # No run live: reject starts one, as every policy does.
    again = elsewhere.send(spec, "third", model, if_busy="reject")
    assert again is not None and again.wait(10).text == "you said: third"


def test_queue_is_left_by_the_live_run_and_answered_by_the_next(store: agent.RunStore) -> None:
    model = Gate()
    spec, run = live_run(store, "s", model)
    assert agent.Runner(replica="b").send(spec, "second", model, if_busy="queue") is None
    assert [s.after_token for s in store.peek_steers("s")] != [0]
    model.release.set()
    first = run.wait(10)
    assert user_texts(first.messages) == ["first"], "the live run did not take the queued text"
    assert first.text == "you said: first"
    finished(store, "s")
    messages = store.messages("s")
    assert user_texts(messages) == ["first", "second"]
    assert messages[-1].text == "you said: second"


def test_interrupt_stops_the_live_run_and_a_new_run_answers(store: agent.RunStore) -> None:
    done_calls: list[str] = []

    @agent.tool
    def look(what: str) -> str:
        """Look something up.

        Args:
            what: the thing.
        """
        done_calls.append(what)
        return f"found {what}"

    entered, release = threading.Event(), threading.Event()

    def calls_then_waits(request: agent.ModelRequest) -> agent.Message:
        entered.set()
        assert release.wait(10)
        return agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c1", "look", '{"what": "x"}')])

    model = ScriptedEndpoint([calls_then_waits, lambda r: agent.Message.assistant(f"now: {r.messages[-1].text}")])
    spec = agent.Spec(session=agent.open("s", store), tools=[look], max_steps=6, lease=10.0)
    run = agent.Runner(replica="a").send(spec, "first", model)
    assert run is not None and entered.wait(10)
    assert agent.Runner(replica="b").send(spec, "stop, do this", model, if_busy="interrupt") is None
    release.set()
    result = run.wait(10)
    # It finished the step it was in (the tool ran, its result kept) and stopped before asking again.
    assert (result.stop_reason, done_calls) == (agent.StopReason.CANCELLED, ["x"])
    assert [m.role for m in result.messages] == [agent.Role.USER, agent.Role.ASSISTANT, agent.Role.USER]
    assert result.messages[-1].content[0].text == "found x"
    finished(store, "s")
    messages = store.messages("s")
    assert user_texts(messages) == ["first", "stop, do this"]
    assert messages[2].content[0].text == "found x"
    assert messages[-1].text == "now: stop, do this"
    assert len(model.requests) == 2


def test_keys_work_with_every_policy(store: agent.RunStore) -> None:
    model = Gate()
    spec, run = live_run(store, "s", model)
    b = agent.Runner(replica="b")
    assert b.send(spec, "queued", model, if_busy="queue", key="k1") is None
    assert b.send(spec, "queued", model, if_busy="queue", key="k1") is None  # a retry stores nothing more
    with pytest.raises(agent.SessionBusyError):
        b.send(spec, "refused", model, if_busy="reject", key="k2")
    assert store.info("s").pending_steers == 1
    model.release.set()
    run.wait(10)
    finished(store, "s")
    assert user_texts(store.messages("s")) == ["first", "queued"]
    # The refused key stored nothing: sending it again once the session is free is a new text.
    again = b.send(spec, "refused", model, if_busy="reject", key="k2")
    assert again is not None
    again.wait(10)
    assert user_texts(store.messages("s")) == ["first", "queued", "refused"]


def test_a_bad_policy_and_a_store_without_policies_are_refused() -> None:
    store = MemoryStore()
    spec = agent.Spec(session=agent.open("s", store))
    with pytest.raises(ValueError, match="if_busy must be one of"):
        agent.Runner().send(spec, "hi", ScriptedEndpoint([]), if_busy="later")

    class OldStore(MemoryStore):
        """A store written before policies: its add_steer takes no if_busy."""

        def add_steer(self, session_id: str, text: str, *, key: str | None = None) -> agent.RunState:  # type: ignore[override]
            return super().add_steer(session_id, text, key=key)

    old = agent.Spec(session=agent.open("s", OldStore()))
    for policy in ("queue", "interrupt", "reject"):
        with pytest.raises(TypeError, match="cannot apply if_busy"):
            agent.Runner().send(old, "hi", ScriptedEndpoint([]), if_busy=policy)
    run = agent.Runner().send(old, "hi", ScriptedEndpoint([agent.Message.assistant("ok")]), if_busy="steer")
    assert run is not None and run.wait(10).text == "ok"


@pytest.mark.parametrize("policy", ["queue", "interrupt"])
def test_queued_texts_survive_the_holders_death_and_a_resumer_answers(store: agent.RunStore, policy: str) -> None:
    # The live run's process "dies": its hold stops renewing and it never ends. The lease lapses,
    # and the resumer's claim (a later token) takes the queued text.
    claim = store.claim("s", replica="dead", lease=0.5)
    store.save_run(claim, [agent.Message.user("first")])
    assert store.add_steer("s", "second", if_busy=policy) is agent.RunState.RUNNING  # type: ignore[call-arg]
    wait_for("the dead run's lease to lapse", lambda: store.info("s").state is agent.RunState.STALLED, 10)
    spec = agent.Spec(session=agent.open("s", store))
    model = ScriptedEndpoint([agent.Message.assistant("answered")])
    result = agent.Runner(replica="resumer").run(spec, agent.Resume(), model)
    assert user_texts(result.messages) == ["first", "second"]
    assert store.info("s").pending_steers == 0
