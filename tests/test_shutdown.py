"""Graceful shutdown: Runner.shutdown, the context manager, and what happens when the process exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runner import RunnerClosedError
from agentsessions.stores import sqlite
from agentsessions.stores.memory import MemoryStore
from tests.support.scripts import call
from tests.support.waiting import wait_for

USER = agent.Message.user("count")


def test_shutdown_cancels_live_runs_waits_for_their_saves_and_refuses_new_ones() -> None:
    store = MemoryStore()
    in_tool, release = threading.Event(), threading.Event()

    @agent.tool
    def slow() -> str:
        """Work slowly."""
        in_tool.set()
        release.wait(10)
        return "done"

    runner = agent.Runner()
    endpoint = ScriptedEndpoint([call("slow"), call("slow"), agent.Message.assistant("never")])
    run = runner.start(agent.Spec(tools=[slow], session=agent.open("s", store)), [USER], endpoint)
    assert in_tool.wait(5)
    stopping = threading.Thread(target=lambda: runner.shutdown(timeout=10))
    stopping.start()
    wait_for("the run to be asked to stop", lambda: run._cancelled)
    release.set()  # the tool under way finishes; the next model request is never made
    stopping.join(10)
    result = run.wait(0)
    assert (result.stop_reason, len(endpoint.requests)) == ("cancelled", 1)
    assert (store.info("s").state, store.messages("s")) == (agent.RunState.CANCELLED, result.messages)
    with pytest.raises(RunnerClosedError):
        runner.start(agent.Spec(), [USER], ScriptedEndpoint([]))
    assert isinstance(RunnerClosedError("x"), RuntimeError)


def test_shutdown_reports_a_run_that_did_not_finish_in_time() -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(_: agent.ModelRequest) -> agent.Message:
        entered.set()
        release.wait(10)
        return agent.Message.assistant("late")

    with agent.Runner() as runner:
        run = runner.start(agent.Spec(), [USER], ScriptedEndpoint([stuck]))
        assert entered.wait(5)
        assert runner.shutdown(timeout=0.05) is False  # a model request is not interrupted
        release.set()
        assert run.wait(5).stop_reason == "end_turn"  # it had no step left to cancel before
        assert runner.shutdown(timeout=5) is True


EXITING = """
import sys, threading
import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores import sqlite

@agent.tool
def tick(n: int) -> str:
    '''Tick.'''
    print("ticking", flush=True)
    threading.Event().wait(0.01)
    return str(n)

replies = [agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use(f"c{i}", "tick", '{"n": %d}' % i)])
           for i in range(10_000)]
store = sqlite.open(sys.argv[1])
run = agent.Runner().start(agent.Spec(tools=[tick], session=agent.open("s", store), max_steps=10_000),
                           [agent.Message.user("tick forever")], ScriptedEndpoint(replies))
if sys.argv[2] == "wait":
    run.wait()  # until Ctrl-C
"""


@pytest.mark.parametrize("how", ["main-thread-ends", "ctrl-c"])
def test_at_exit_a_run_is_cancelled_and_releases_its_session(how: str, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    script = textwrap.dedent(EXITING)
    mode = "wait" if how == "ctrl-c" else "return"
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(db), mode], env=env, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    if how == "ctrl-c":
        assert process.stdout.readline() == "ticking\n"
        process.send_signal(signal.SIGINT)
    process.wait(20)  # a daemon run thread never keeps the process alive
    info = sqlite.open(db).info("s")
    assert info.state is agent.RunState.CANCELLED, info
    assert info.length >= (3 if how == "ctrl-c" else 1)


INTERRUPTED = """
import sys, threading
import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores import sqlite

where = sys.argv[2]

@agent.tool
def wait_here() -> str:
    '''Wait (for Ctrl-C), or exit.'''
    if where == "exit-in-tool":
        sys.exit(3)
    print("waiting", flush=True)
    threading.Event().wait(60)
    return "never"

def model(request: agent.ModelRequest) -> agent.Message:
    if where == "model":
        print("waiting", flush=True)
        threading.Event().wait(60)
    return agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c1", "wait_here", "{}")])

store = sqlite.open(sys.argv[1])
spec = agent.Spec(tools=[wait_here], session=agent.open("s", store), lease=60)
agent.Runner().run(spec, [agent.Message.user("go")], ScriptedEndpoint([model]))
"""


@pytest.mark.parametrize("where", ["tool", "model", "exit-in-tool"])
def test_ctrl_c_in_run_saves_and_releases_so_the_session_can_run_again_at_once(where: str, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(INTERRUPTED), str(db), where],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    if where != "exit-in-tool":
        assert process.stdout.readline() == "waiting\n"
        process.send_signal(signal.SIGINT)  # a real Ctrl-C, on the main thread running the run
    _, stderr = process.communicate(timeout=30)
    if where == "exit-in-tool":
        assert process.returncode == 3, stderr
    else:
        assert process.returncode != 0 and "KeyboardInterrupt" in stderr, stderr  # it goes on unwinding
    store = sqlite.open(db)
    info = store.info("s")
    assert info.state is agent.RunState.CANCELLED, info  # released, not held for the 60 s lease
    # What the run had is saved: interrupted in the tool, the model's call too, and a resume runs it.
    saved = store.messages("s")
    assert len(saved) == (1 if where == "model" else 2), saved

    @agent.tool
    def wait_here() -> str:
        """Done at once this time."""
        return "done"

    replies = [agent.Message.assistant("finished")]
    if where == "model":
        replies.insert(0, agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c1", "wait_here", "{}")]))
    spec = agent.Spec(tools=[wait_here], session=agent.open("s", store), lease=60)
    result = agent.Runner().run(spec, agent.Resume(), ScriptedEndpoint(replies))  # no SessionBusyError
    assert result.text == "finished" and result.messages[2] == agent.Message(
        agent.Role.USER, [agent.Content.tool_result("c1", "done")]
    )
