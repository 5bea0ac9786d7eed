"""examples/resumer.py: a run killed with SIGKILL is found STALLED by the cron job and finished, once.

A real run in a process of its own calls a tool, saves, and is killed during its next
model request; once its lease lapses, two resumers started together (as the cron job
would be, twice, on two machines) find it and one of them finishes it. The other finds
nothing left to do or reports the session taken; neither runs it twice.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import multiprocessing
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores.memory import MemoryStore
from tests.support.backends import Opener, open_postgres, open_sqlite, postgres_url, scratch_redis, store_params
from tests.support.paths import ROOT, load_example
from tests.support.servers import POSTGRES_DSN, REDIS_URL, require_server, skip_without
from tests.support.waiting import wait_for

EXAMPLE = ROOT / "examples" / "resumer.py"
LEASE = 1.0
KILLED = "order-42"
ANSWERED = "answered"
QUESTION = "where is order 42?"


def example() -> ModuleType:
    """examples/resumer.py, imported from its file (examples/ is no package)."""
    return load_example(EXAMPLE, "resumer_example")


def doomed_run(opener: Opener, ready: Any) -> None:
    """The service's run, in a process of its own, stuck in its second model request until it is killed."""
    resumer = example()

    def stuck(request: agent.ModelRequest) -> agent.Message:
        ready.set()  # the tool ran and its result was saved before this request
        threading.Event().wait()  # never set: the process is killed here
        raise AssertionError("unreachable")

    with opener() as store:
        spec, _ = resumer.service_agent(agent.open(KILLED, store))
        spec = attrs.evolve(spec, lease=LEASE)
        model = ScriptedEndpoint([resumer.demo_model, stuck])
        agent.Runner(replica="web-1").run(spec, [agent.Message.user(QUESTION)], model)


@pytest.fixture(params=store_params("sqlite", "postgres", "redis"))
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Opener, list[str]]]:
    """An opener for the store, and the resumer's options naming the same place."""
    if request.param == "sqlite":
        path = str(tmp_path / "sessions.db")
        yield functools.partial(open_sqlite, path), ["--store", f"sqlite:///{path}"]
        return
    if request.param == "redis":
        with contextlib.ExitStack() as stack:
            opener: Any = require_server("Redis", lambda: stack.enter_context(scratch_redis(REDIS_URL)))
            yield opener, ["--store", f"{REDIS_URL}?prefix={opener.args[1]}"]
        return
    skip_without("psycopg", extra="postgres")
    import psycopg

    from agentsessions.stores import postgres

    admin = require_server("PostgreSQL", lambda: psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5))
    schema = f"agentsessions_resumer_{secrets.token_hex(4)}"
    with admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            admin.execute(f"SET search_path = {schema}")
            admin.execute(postgres.SCHEMA)
            yield (
                functools.partial(open_postgres, POSTGRES_DSN, schema),
                ["--store", postgres_url(POSTGRES_DSN, schema)],
            )
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _kill_a_run(opener: Opener) -> None:
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=doomed_run, args=(opener, ready), name="doomed-run")
    process.start()
    try:
        assert ready.wait(60), "the run never reached its second model request"
    finally:
        process.kill()  # SIGKILL: no final save, no release
        process.join(10)
    assert process.exitcode == -9


def test_the_resumer_finishes_a_killed_run_once(place: tuple[Opener, list[str]]) -> None:
    opener, where = place
    _kill_a_run(opener)
    with opener() as store:
        # A run that claimed a session and died before its first save: the stored transcript ends with an answer.
        agent.Runner(replica="web-2").run(
            agent.Spec(session=agent.open(ANSWERED, store)),
            [agent.Message.user("hi")],
            ScriptedEndpoint([agent.Message.assistant("hello")]),
        )
        store.claim(ANSWERED, replica="web-3", lease=LEASE)
        stalled = {KILLED, ANSWERED}
        wait_for("both to stall", lambda: {i.id for i in store.sessions(state=agent.RunState.STALLED)} == stalled)
        before = store.messages(KILLED)
        assert [m.role for m in before] == ["user", "assistant", "user"]  # the question, the call, its result

        command = [sys.executable, str(EXAMPLE), *where, "--max-parallel", "2", "--replica"]
        resumers = [subprocess.Popen([*command, f"resumer-{n}"], stdout=subprocess.PIPE, text=True) for n in (1, 2)]
        outputs = [r.communicate(timeout=60)[0] for r in resumers]
        print("\n".join(f"resumer-{n}:\n{out}" for n, out in enumerate(outputs, 1)))
        assert [r.returncode for r in resumers] == [0, 0]

        lines = [line for out in outputs for line in out.splitlines()]
        resumed = [line for line in lines if line.startswith(f"resumed {KILLED}:")]
        assert len(resumed) == 1, lines
        others = [line for line in lines if KILLED in line and line not in resumed]
        assert all(line.startswith(f"skipped {KILLED}:") for line in others), others
        answered = [line for line in lines if line.startswith(f"skipped {ANSWERED}: its last turn was answered")]
        assert len(answered) == 2, lines  # each resumer reports it; neither runs it

        info = store.info(KILLED)
        winner = "resumer-1" if f"resumed {KILLED}" in outputs[0] else "resumer-2"
        assert (info.state, info.holder) == (agent.RunState.FINISHED, winner)
        after = store.messages(KILLED)
        assert after[:3] == before  # resumed where the killed run stopped: nothing appended, the tool not run again
        assert [m.text for m in after[3:]] == ["Here is what I found: order 42: shipped on 3 March, parcel 7731"]
        assert (store.info(ANSWERED).state, store.info(ANSWERED).length) == (agent.RunState.STALLED, 2)


def test_a_steer_the_command_left_on_an_ended_session_is_answered_by_the_resumer(
    place: tuple[Opener, list[str]],
) -> None:
    opener, where = place
    resumer = example()
    with opener() as store:
        for sid in ("steered", "quiet"):
            spec, model = resumer.service_agent(agent.open(sid, store))
            agent.Runner(replica="web-1").run(spec, [agent.Message.user(f"{sid}: where is order 5?")], model)
        assert store.info("steered").state is agent.RunState.FINISHED
        # The command (or the console) leaves a steer; no run holds the session to take it.
        steer = [sys.executable, "-m", "agentsessions", *where, "steer", "steered", "and order 6?"]
        left = subprocess.run(steer, capture_output=True, text=True, timeout=60, check=False)
        assert left.returncode == 0, left.stderr
        assert store.info("steered").pending_steers == 1

        done = subprocess.run([sys.executable, str(EXAMPLE), *where], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert [line.split(":")[0] for line in lines[:-1]] == ["resumed steered"], lines
        assert lines[-1] == (
            "0 stalled sessions found; 1 ended with steers waiting; 0 waits for approval decided or expired"
        )
        info = store.info("steered")
        assert (info.state, info.pending_steers) == (agent.RunState.FINISHED, 0)
        after = store.messages("steered")
        assert after[4].text == "and order 6?"  # the question, the call, its result, the answer, then the steer
        assert after[-1].text == "Here is what I found: order 6: shipped on 3 March, parcel 7731"
        assert store.info("quiet").length == 4  # ended with nothing waiting: left alone


def test_a_wait_for_approval_is_resumed_once_decided_and_left_while_undecided(
    place: tuple[Opener, list[str]],
) -> None:
    opener, where = place
    resumer = example()
    with opener() as store:
        for sid in ("approved", "undecided"):
            spec, model = resumer.service_agent(agent.open(sid, store))
            waited = agent.Runner(replica="web-1").run(spec, [agent.Message.user(f"cancel order {sid[0]}1")], model)
            assert waited.stop_reason == agent.StopReason.APPROVAL_REQUIRED
        assert agent.open("approved", store).approve("call-cancel_order", by="ops") is agent.RunState.WAITING

        done = subprocess.run([sys.executable, str(EXAMPLE), *where], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert [line.split(":")[0] for line in lines[:-1]] == ["resumed approved"], lines
        assert lines[-1] == (
            "0 stalled sessions found; 0 ended with steers waiting; 1 waits for approval decided or expired"
        )
        assert store.info("approved").state is agent.RunState.FINISHED
        assert store.messages("approved")[-1].text == "Here is what I found: order 1: cancelled, refund on its way"
        info = store.info("undecided")
        assert (info.state, info.pending_approvals) == (agent.RunState.WAITING, 1)


def test_a_wait_past_its_deadline_is_resumed_by_the_resumer_and_the_model_reads_the_expiry(
    place: tuple[Opener, list[str]],
) -> None:
    opener, where = place
    resumer = example()
    with opener() as store:
        spec, model = resumer.service_agent(agent.open("late", store))
        # The service's tool with a deadline short enough for a test; the resumer's own waits 24 hours.
        brief = attrs.evolve(resumer.cancel_order, approval_timeout=datetime.timedelta(seconds=0.5))
        spec = attrs.evolve(spec, tools=[resumer.order_status, brief])
        waited = agent.Runner(replica="web-1").run(spec, [agent.Message.user("cancel order 7")], model)
        assert waited.stop_reason == agent.StopReason.APPROVAL_REQUIRED
        deadline = store.info("late").approval_deadline
        assert deadline is not None and deadline == waited.approvals[0].expires_at
        assert deadline - waited.approvals[0].requested_at == datetime.timedelta(seconds=0.5)
        wait_for("the approval's deadline", lambda: datetime.datetime.now(datetime.UTC) > deadline)

        done = subprocess.run([sys.executable, str(EXAMPLE), *where], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert [line.split(":")[0] for line in lines[:-1]] == ["resumed late"], lines
        assert lines[-1].endswith("; 1 waits for approval decided or expired")
        info = store.info("late")
        assert (info.state, info.pending_approvals, info.approval_deadline) == (agent.RunState.FINISHED, 0, None)
        result = [c for c in store.messages("late")[2].content if c.type is agent.ContentType.TOOL_RESULT]
        assert result[0].is_error and "expired" in result[0].text
        assert store.messages("late")[-1].text.startswith("Here is what I found: nobody approved this tool call")


def test_a_session_taken_since_the_listing_is_skipped_and_reported() -> None:
    resumer = example()
    store = MemoryStore()
    store.save("s", [agent.Message.user("where is order 7?")])
    listed = agent.SessionInfo("s", length=1, state=agent.RunState.STALLED, holder="web-1")
    store.claim("s", replica="resumer-other", lease=30.0)  # another resumer took it after our listing
    runner = agent.Runner(replica="resumer-1")
    line, ok = resumer.resume(runner, store, listed, resumer.service_agent)
    assert (line, ok) == ("skipped s: running now, held by resumer-other", True)
    assert store.messages("s") == [agent.Message.user("where is order 7?")]


@pytest.mark.parametrize(
    ("transcript", "steers", "expected"),
    [
        ([], 0, False),
        ([], 1, True),
        ([agent.Message.user("q")], 0, True),
        ([agent.Message.user("q"), agent.Message.assistant("a")], 0, False),
        ([agent.Message.user("q"), agent.Message.assistant("a")], 2, True),
        ([agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c", "order_status", "{}")])], 0, True),
    ],
    ids=["empty", "empty-steered", "question", "answered", "answered-steered", "journaled-calls"],
)
def test_what_the_resumer_resumes(transcript: list[agent.Message], steers: int, expected: bool) -> None:
    assert example().to_resume(transcript, steers) is expected
