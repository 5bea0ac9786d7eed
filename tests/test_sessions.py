"""Runs with a session: steers from the store, saves before every request, resuming.

Most of these run over stores that keep runs; ``SeedOnly`` hides all but the seed's four
methods, to show that a third-party store implementing only those still runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import agentsessions as agent
from agentsessions import events as ev
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runs import Claim, Progress, Steer
from agentsessions.stores import sqlite
from agentsessions.stores.memory import MemoryStore
from tests.support.scripts import FailsAfterFirstSave, call, double, echo_last_result
from tests.support.seed_store import SeedOnly
from tests.support.waiting import wait_for

USER = agent.Message.user("double 21")


class RecordingStore(MemoryStore):
    """A memory store that notes each run-store call, so the tests can see what the loop asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def peek_steers(self, session_id: str) -> list[Steer]:
        steers = super().peek_steers(session_id)
        self.calls.append(("peek_steers", len(steers)))
        return steers

    def save_run(self, claim: Claim, messages: Sequence[agent.Message], **options: Any) -> Progress:
        self.calls.append(("save_run", len(messages)))
        return super().save_run(claim, messages, **options)


def test_a_seed_store_is_saved_before_every_request_and_once_at_the_end() -> None:
    store = SeedOnly(MemoryStore())
    assert not isinstance(store, agent.RunStore)
    spec = agent.Spec(tools=[double], session=agent.open("s", store))
    result = agent.Runner().run(spec, [USER], ScriptedEndpoint([call("double", n=21), echo_last_result]))
    # The last take is the finish's: a text Runner.send stored during the last answer keeps the run going.
    assert store.calls == [
        ("take_steers", 0),
        ("save", 1),
        ("take_steers", 0),
        ("save", 3),
        ("take_steers", 0),
        ("save", 4),
    ]
    assert store.messages("s") == result.messages


def test_a_text_sent_during_a_seed_store_runs_last_answer_keeps_the_run_going() -> None:
    store = SeedOnly(MemoryStore())
    spec = agent.Spec(session=agent.open("s", store))
    entered, release = threading.Event(), threading.Event()

    def slow(request: agent.ModelRequest) -> agent.Message:
        entered.set()
        assert release.wait(5)
        return agent.Message.assistant(f"you said: {request.messages[-1].text}")

    runner = agent.Runner()
    run = runner.send(spec, "first", ScriptedEndpoint([slow, slow]))
    assert run is not None and entered.wait(5)
    assert runner.send(spec, "second", ScriptedEndpoint([])) is run  # no run records: its own run takes it
    assert store.store.messages("s")[-1] == agent.Message.user("first")  # "second" waits in the store
    release.set()
    result = run.wait(5)
    # The run's finish took it from the store and asked the model once more.
    assert [m.text for m in result.messages] == ["first", "you said: first", "second", "you said: second"]
    assert store.messages("s") == result.messages and store.take_steers("s") == []


def test_a_run_store_is_saved_before_every_request_and_once_at_the_end() -> None:
    store = RecordingStore()
    spec = agent.Spec(tools=[double], session=agent.open("s", store))
    result = agent.Runner().run(spec, [USER], ScriptedEndpoint([call("double", n=21), echo_last_result]))
    assert store.calls == [("peek_steers", 0), ("save_run", 1), ("peek_steers", 0), ("save_run", 3), ("save_run", 4)]
    assert store.messages("s") == result.messages
    assert store.info("s").state is agent.RunState.FINISHED


def test_without_a_session_nothing_is_saved() -> None:
    seen: list[object] = []
    agent.Runner().run(
        agent.Spec(tools=[double]), [USER], ScriptedEndpoint([call("double", n=1), echo_last_result]), seen.append
    )
    assert not [e for e in seen if isinstance(e, (ev.TranscriptSaved, ev.SteerApplied))]


def test_a_steer_left_before_the_run_becomes_its_first_message() -> None:
    store = MemoryStore()
    agent.open("s", store).steer("check the lease expiry")
    endpoint = ScriptedEndpoint([agent.Message.assistant("looking")])
    result = agent.Runner().run(agent.Spec(session=agent.open("s", store)), [], endpoint)
    assert endpoint.requests[0].messages == (agent.Message.user("check the lease expiry"),)
    assert result.messages[0] == agent.Message.user("check the lease expiry")
    assert store.take_steers("s") == []


def test_the_run_box_comes_before_the_session_and_both_ride_on_tool_results() -> None:
    store = MemoryStore()
    session = agent.open("s", store)
    holder: list[agent.Run] = []

    @agent.tool
    def look() -> str:
        """Look."""
        holder[0].steer("from the run")
        session.steer("from the store")
        return "seen"

    go = threading.Event()
    endpoint = ScriptedEndpoint([call("look"), agent.Message.assistant("ok")])
    run = agent.Runner().start(agent.Spec(tools=[look], session=session), [USER], endpoint, lambda e: go.wait(5))
    holder.append(run)
    go.set()
    run.wait(5)
    assert endpoint.requests[1].messages[-1].content == (
        agent.Content.tool_result("call-1", "seen"),
        agent.Content.of_text("from the run"),
        agent.Content.of_text("from the store"),
    )


def test_each_stored_steer_reaches_exactly_one_of_many_runs_over_a_seed_store(tmp_path: Path) -> None:
    # A seed store has no claims, so four runs of one session run at once (a run store refuses that).
    store = SeedOnly(sqlite.open(tmp_path / "s.db"))
    steers = [f"steer {i}" for i in range(40)]

    def add_all() -> None:
        for steer in steers:
            store.add_steer("shared", steer)

    adding = threading.Thread(target=add_all)

    def slow_answers(request: agent.ModelRequest) -> agent.Message:
        return call("double", n=1) if len(request.messages) < 12 else agent.Message.assistant("done")

    runs = [
        agent.Runner().start(
            agent.Spec(tools=[double], max_steps=30, session=agent.open("shared", store)),
            [USER],
            ScriptedEndpoint([slow_answers] * 30),
        )
        for _ in range(4)
    ]
    adding.start()
    adding.join()
    results = [run.wait(30) for run in runs]
    leftover = store.take_steers("shared")
    delivered = [c.text for r in results for m in r.messages for c in m.content if c.text.startswith("steer ")]
    assert sorted(delivered + leftover) == sorted(steers)


def test_a_conversation_resumes_from_the_store_on_another_runner(tmp_path: Path) -> None:
    store = sqlite.open(tmp_path / "s.db")
    first = agent.Runner().run(
        agent.Spec(tools=[double], session=agent.open("c", store)),
        [USER],
        ScriptedEndpoint([call("double", n=2), echo_last_result]),
    )
    elsewhere = sqlite.open(tmp_path / "s.db")
    messages = [*elsewhere.messages("c"), agent.Message.user("and again?")]
    endpoint = ScriptedEndpoint([agent.Message.assistant("still 4")])
    second = agent.Runner().run(agent.Spec(session=agent.open("c", elsewhere)), messages, endpoint)
    assert endpoint.requests[0].messages[: len(first.messages)] == tuple(first.messages)
    assert store.messages("c") == second.messages


CRASHING_RUN = """
import json, os, sys
import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runs import Claim, Progress, Steer
from agentsessions.stores import sqlite

@agent.tool
def send(text: str) -> str:
    '''Send a message (a side effect).'''
    with open(sys.argv[2], "a") as log:
        log.write(text + "\\n")
    os._exit(3)  # the process dies in the middle of step 1

reply = agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c1", "send", json.dumps({"text": "hi"}))])
store = sqlite.open(sys.argv[1])
spec = agent.Spec(tools=[send], session=agent.open("crash", store), lease=0.5)
agent.Runner().run(spec, [agent.Message.user("say hi")], ScriptedEndpoint([reply]))
"""


def test_a_run_that_dies_mid_step_resumes_from_the_step_before_and_redoes_it(tmp_path: Path) -> None:
    db, log = tmp_path / "s.db", tmp_path / "sent.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    died = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CRASHING_RUN), str(db), str(log)], env=env, check=False
    )
    assert died.returncode == 3
    store = sqlite.open(db)
    assert store.messages("crash") == [agent.Message.user("say hi")]  # saved before step 1's request
    wait_for("the dead run's lease to run out", lambda: store.info("crash").state is agent.RunState.STALLED)

    @agent.tool
    def send(text: str) -> str:
        """Send a message (a side effect)."""
        with log.open("a") as out:
            out.write(text + "\n")
        return "sent"

    endpoint = ScriptedEndpoint([call("send", "c1", text="hi"), agent.Message.assistant("said hi")])
    result = agent.Runner().run(
        agent.Spec(tools=[send], session=agent.open("crash", store)), store.messages("crash"), endpoint
    )
    assert result.text == "said hi"
    assert log.read_text() == "hi\nhi\n"  # the documented cost: the tool ran twice


def test_a_failing_store_fails_the_run_with_the_partial_result() -> None:
    store = FailsAfterFirstSave()
    endpoint = ScriptedEndpoint([call("double", n=2), echo_last_result])
    with pytest.raises(agent.RunError, match="step 2") as failure:
        agent.Runner().run(agent.Spec(tools=[double], session=agent.open("s", store)), [USER], endpoint)
    assert isinstance(failure.value.__cause__, agent.StoreError)
    assert failure.value.result.stop_reason == agent.StopReason.ERROR
    assert len(failure.value.result.messages) == 3  # the tool had run; its result was never saved
    assert len(endpoint.requests) == 1  # no request went out without its save
    assert store.messages("s") == [USER]
    # It could not even release the session: the lease will run out and the session stall.
    assert store.info("s").state is agent.RunState.RUNNING
