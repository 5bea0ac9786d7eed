"""Approvals: a tool call that waits for a person's decision, kept in the store (DESIGN sections 6 and 10).

These show each rule over the memory store; storetest proves the store side on every store
(tests/stores/test_storetest.py), and tests/stores/test_approval_races.py races deciders in
separate processes on the persistent ones.
"""

from __future__ import annotations

import datetime
import json
import threading
from typing import Any

import attrs
import pytest

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.loop import IN_DOUBT
from agentsessions.session import CANCELLED_WAIT
from agentsessions.stores.memory import MemoryStore
from tests.support.waiting import wait_for

USER = agent.Message.user("tidy the files")


def calls(*pairs: tuple[str, str]) -> agent.Message:
    """An assistant message with one call per (tool, path), ids c1, c2..."""
    return agent.Message(
        agent.Role.ASSISTANT,
        [agent.Content.tool_use(f"c{i}", name, json.dumps({"path": p})) for i, (name, p) in enumerate(pairs, 1)],
    )


class Tools:
    """``delete`` needs approval, ``look`` never does, ``move`` only for paths under /etc; each logs its runs."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @agent.tool(needs_approval=True)
        def delete(path: str) -> str:
            """Delete a file."""
            self.ran.append(f"delete {path}")
            return f"deleted {path}"

        @agent.tool
        def look(path: str) -> str:
            """Look at a file."""
            self.ran.append(f"look {path}")
            return f"{path}: 3 lines"

        @agent.tool(needs_approval=lambda arguments: str(arguments["path"]).startswith("/etc"))
        def move(path: str) -> str:
            """Move a file."""
            self.ran.append(f"move {path}")
            return f"moved {path}"

        self.all = (delete, look, move)


def results(message: agent.Message) -> dict[str, agent.Content]:
    return {c.tool_use_id: c for c in message.content if c.type is agent.ContentType.TOOL_RESULT}


@pytest.fixture
def setup() -> tuple[MemoryStore, agent.StoreSession, Tools, agent.Spec]:
    store = MemoryStore()
    session = agent.open("s", store)
    tools = Tools()
    return store, session, tools, agent.Spec(session=session, tools=tools.all)


def test_a_call_that_needs_approval_stops_the_run_after_the_others_ran(setup: Any) -> None:
    store, session, tools, spec = setup
    endpoint = ScriptedEndpoint([calls(("look", "a"), ("delete", "a"), ("move", "/tmp/x"), ("move", "/etc/y"))])
    result = agent.Runner().run(spec, [USER], endpoint)
    assert result.stop_reason == agent.StopReason.APPROVAL_REQUIRED
    assert agent.StopReason.APPROVAL_REQUIRED.value == "approval_required"
    assert tools.ran == ["look a", "move /tmp/x"]
    assert [(a.call_id, a.tool, a.input, a.decision) for a in result.approvals] == [
        ("c2", "delete", '{"path": "a"}', None),
        ("c4", "move", '{"path": "/etc/y"}', None),
    ]
    info = session.info()
    assert (info.state, info.pending_approvals, info.length) == (agent.RunState.WAITING, 2, 3)
    assert session.approvals() == result.approvals
    assert set(results(session.messages()[-1])) == {"c1", "c3"}  # the others' results are saved
    assert [i.id for i in store.sessions(state=agent.RunState.WAITING)] == ["s"]


def test_decisions_then_resume_run_the_approved_and_answer_the_rejected(setup: Any) -> None:
    _, session, tools, spec = setup
    endpoint = ScriptedEndpoint([calls(("delete", "a"), ("delete", "b")), agent.Message.assistant("done")])
    agent.Runner().run(spec, [USER], endpoint)
    with pytest.raises(agent.ApprovalPendingError):
        agent.Runner().run(spec, agent.Resume(), endpoint)
    assert session.approve("c1", by="ann") is agent.RunState.WAITING
    assert session.info().pending_approvals == 1
    with pytest.raises(agent.ApprovalPendingError):  # one still undecided
        agent.Runner().start(spec, agent.Resume(), endpoint)
    assert session.reject("c2", reason="keep b", by="bob") is agent.RunState.WAITING
    assert session.info().pending_approvals == 0
    decided = {a.call_id: a for a in session.approvals()}
    assert (decided["c1"].decision, decided["c1"].by, decided["c1"].decided_at is not None) == ("approved", "ann", True)
    assert (decided["c2"].decision, decided["c2"].reason, decided["c2"].by) == ("rejected", "keep b", "bob")
    result = agent.Runner().run(spec, agent.Resume(), endpoint)
    assert result.stop_reason == "end_turn" and result.text == "done"
    assert tools.ran == ["delete a"]
    answered = results(result.messages[2])
    assert not answered["c1"].is_error and answered["c1"].text == "deleted a"
    assert answered["c2"].is_error and "keep b" in answered["c2"].text and "rejected" in answered["c2"].text
    assert session.info().state is agent.RunState.FINISHED
    assert session.approvals() == []  # the wait is over


def test_a_decision_is_made_once(setup: Any) -> None:
    _, session, _, spec = setup
    agent.Runner().run(spec, [USER], ScriptedEndpoint([calls(("delete", "a"), ("delete", "b"))]))
    assert session.approve("c1") is agent.RunState.WAITING
    assert session.approve("c1", by="someone else") is agent.RunState.WAITING  # a retry: recorded once
    assert next(a for a in session.approvals() if a.call_id == "c1").by == ""
    with pytest.raises(agent.ConflictError, match="already approved"):
        session.reject("c1")
    with pytest.raises(agent.ConflictError, match="no call 'nope'"):
        session.approve("nope")


def test_a_batch_is_all_or_none(setup: Any) -> None:
    _, session, _, spec = setup
    agent.Runner().run(spec, [USER], ScriptedEndpoint([calls(("delete", "a"), ("delete", "b"))]))
    session.reject("c2")
    with pytest.raises(agent.ConflictError):
        session.decide({"c1": agent.Decision.approve(), "c2": agent.Decision.approve()})
    assert session.info().pending_approvals == 1  # c1 was not recorded either
    assert session.decide({"c1": agent.Decision.approve(), "c2": agent.Decision.reject()}) is agent.RunState.WAITING
    assert [a.decision for a in session.approvals()] == ["approved", "rejected"]


def test_a_decision_does_not_run_a_call_changed_behind_it(setup: Any) -> None:
    _, session, tools, spec = setup
    agent.Runner().run(spec, [USER], ScriptedEndpoint([calls(("delete", "a"))]))
    session.approve("c1")
    # Someone rewrites the stored call: same id, another input. The old yes must not run it.
    forged = agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c1", "delete", '{"path": "/"}')])
    result = agent.Runner().run(spec, [USER, forged], ScriptedEndpoint([]))
    assert result.stop_reason == "approval_required" and tools.ran == []
    assert [(a.call_id, a.input, a.decision) for a in result.approvals] == [("c1", '{"path": "/"}', None)]
    assert session.info().pending_approvals == 1


def test_steers_while_waiting_wait_for_the_run_after_the_decision(setup: Any) -> None:
    _, session, _, spec = setup
    endpoint = ScriptedEndpoint([calls(("delete", "a")), agent.Message.assistant("ok")])
    agent.Runner().run(spec, [USER], endpoint)
    assert session.steer("and b too") is agent.RunState.WAITING
    assert session.info().pending_steers == 1
    assert agent.Runner().send(spec, "hurry", endpoint) is None  # undecided: the text waits as a steer
    session.approve("c1")
    result = agent.Runner().run(spec, agent.Resume(), endpoint)
    last_user = result.messages[2]
    assert [c.text for c in last_user.content if c.type is agent.ContentType.TEXT] == ["and b too", "hurry"]


def test_cancelled_before_the_wait_answers_the_calls_as_cancelled(setup: Any) -> None:
    _, session, tools, spec = setup
    runner = agent.Runner()
    holder: list[agent.Run] = []
    started = threading.Event()

    def cancel_then_call(request: agent.ModelRequest) -> agent.Message:
        assert started.wait(10)
        holder[0].cancel()
        return calls(("look", "a"), ("delete", "a"))

    run = runner.start(spec, [USER], ScriptedEndpoint([cancel_then_call]))
    holder.append(run)
    started.set()
    result = run.wait(10)
    assert result.stop_reason == "cancelled" and tools.ran == [] and result.approvals == []
    assert all(r.is_error for r in results(result.messages[-1]).values())
    assert session.info().state is agent.RunState.CANCELLED


def test_an_approved_call_that_is_not_idempotent_runs_through_the_journal(setup: Any) -> None:
    store, session, tools, _ = setup
    spec = agent.Spec(session=session, tools=tools.all, journal=True)
    saved: list[list[agent.Message]] = []
    agent.Runner().run(spec, [USER], ScriptedEndpoint([calls(("delete", "a"))]))
    session.approve("c1")

    def seen(event: object) -> None:
        if isinstance(event, agent.events.ToolCalled):
            saved.append(store.messages("s"))

    agent.Runner().run(spec, agent.Resume(), ScriptedEndpoint([agent.Message.assistant("ok")]), seen)
    # As the approved call started, the store held it as started: a crash now leaves it in doubt.
    assert results(saved[0][-1])["c1"].text == IN_DOUBT
    assert tools.ran == ["delete a"]


def test_a_rule_that_raises_asks(setup: Any) -> None:
    def broken(arguments: dict[str, Any]) -> bool:
        raise RuntimeError("bug")

    tool = agent.Tool("t", "", {"type": "object"}, lambda: "ran", needs_approval=broken)
    assert tool.asks_approval("{}") is True
    assert tool.asks_approval("not json") is False  # it never runs anyway: its arguments are an error
    with pytest.raises(TypeError, match="needs_approval"):
        agent.Tool("t", "", {"type": "object"}, lambda: "", needs_approval="yes")  # type: ignore[arg-type]


def test_without_a_session_the_run_stops_and_reports(setup: Any) -> None:
    _, _, tools, _ = setup
    result = agent.Runner().run(agent.Spec(tools=tools.all), [USER], ScriptedEndpoint([calls(("delete", "a"))]))
    assert result.stop_reason == "approval_required" and [a.call_id for a in result.approvals] == ["c1"]
    assert tools.ran == []


def test_bad_decisions_are_refused_before_any_write(setup: Any) -> None:
    _, session, _, spec = setup
    agent.Runner().run(spec, [USER], ScriptedEndpoint([calls(("delete", "a"))]))
    with pytest.raises(TypeError):
        session.decide({"c1": "approve"})
    with pytest.raises(ValueError):
        session.decide({})
    with pytest.raises(ValueError):
        agent.Decision("maybe")  # type: ignore[arg-type]
    assert session.info().pending_approvals == 1


def test_cancel_ends_a_wait_answering_every_call_as_cancelled(setup: Any) -> None:
    _, session, tools, spec = setup
    agent.Runner().run(spec, [USER], ScriptedEndpoint([calls(("look", "a"), ("delete", "a"), ("delete", "b"))]))
    session.approve("c2")
    assert session.cancel() is True
    info = session.info()
    assert (info.state, info.pending_approvals) == (agent.RunState.CANCELLED, 0)
    answered = results(session.messages()[-1])
    assert answered["c1"].text == "a: 3 lines"  # run before the wait: kept
    assert [answered[c].text for c in ("c2", "c3")] == [CANCELLED_WAIT] * 2 and answered["c3"].is_error
    assert tools.ran == ["look a"]
    assert session.cancel() is False  # nothing left to cancel
    with pytest.raises(agent.ConflictError):
        session.approve("c3")  # the wait is over
    result = agent.Runner().run(spec, agent.Resume("never mind"), ScriptedEndpoint([agent.Message.assistant("ok")]))
    assert result.stop_reason == "end_turn" and tools.ran == ["look a"]


def test_send_to_a_waiting_session_keeps_the_text_or_rejects_the_calls(setup: Any) -> None:
    store, session, tools, spec = setup
    endpoint = ScriptedEndpoint([calls(("delete", "a")), agent.Message.assistant("ok, not deleting")])
    agent.Runner().run(spec, [USER], endpoint)
    assert agent.Runner().send(spec, "wait, what?", endpoint) is None  # "keep", the default
    assert (session.info().state, session.info().pending_steers) == (agent.RunState.WAITING, 1)
    run = agent.Runner().send(spec, "no, keep a", endpoint, on_waiting="reject")
    assert run is not None
    result = run.wait(10)
    assert (result.text, tools.ran, session.info().state) == ("ok, not deleting", [], agent.RunState.FINISHED)
    [approval] = store.approvals("s")
    assert (approval.decision, approval.by, approval.reason) == ("rejected", "user", "no, keep a")
    last_user = result.messages[2]
    rejected = results(last_user)["c1"]
    assert rejected.is_error and "no, keep a" in rejected.text and "(user)" in rejected.text
    assert [c.text for c in last_user.content if c.type is agent.ContentType.TEXT] == ["wait, what?", "no, keep a"]
    with pytest.raises(ValueError, match="on_waiting"):
        agent.Runner().send(spec, "x", endpoint, on_waiting="drop")


def test_approve_with_an_edited_input_runs_it_and_rewrites_the_transcript(setup: Any) -> None:
    _, session, tools, spec = setup
    endpoint = ScriptedEndpoint([calls(("delete", "a"), ("delete", "b")), agent.Message.assistant("done")])
    agent.Runner().run(spec, [USER], endpoint)
    assert json.loads(session.approvals()[0].input_schema)["properties"] == {"path": {"type": "string"}}
    assert session.approve("c1", by="ann", input='{"path": "a.bak"}') is agent.RunState.WAITING
    approval = session.approvals()[0]
    assert (approval.input, approval.original_input, approval.by) == ('{"path": "a.bak"}', '{"path": "a"}', "ann")
    uses = [c for c in session.messages()[-1].content if c.type is agent.ContentType.TOOL_USE]
    assert [u.input for u in uses] == ['{"path": "a.bak"}', '{"path": "b"}']  # the model reads what will run
    session.approve("c2")  # unedited: original_input stays None
    assert session.approvals()[1].original_input is None
    result = agent.Runner().run(spec, agent.Resume(), endpoint)
    assert result.text == "done" and tools.ran == ["delete a.bak", "delete b"]
    assert results(result.messages[2])["c1"].text == "deleted a.bak"


def test_an_edited_input_is_retried_safely_and_another_conflicts(setup: Any) -> None:
    _, session, _, spec = setup
    agent.Runner().run(spec, [USER], ScriptedEndpoint([calls(("delete", "a"), ("delete", "b"))]))
    assert session.approve("c1", input='{"path": "x"}') is agent.RunState.WAITING
    assert session.approve("c1", input='{"path": "x"}', by="again") is agent.RunState.WAITING  # a retry
    for other in ({"input": '{"path": "y"}'}, {}):  # another input, or the model's
        with pytest.raises(agent.ConflictError, match="already approved with another input"):
            session.approve("c1", **other)
    with pytest.raises(agent.ConflictError, match="already approved"):
        session.reject("c1")
    session.approve("c2", input='{"path": "b"}')  # the model's own input is no edit
    assert session.approvals()[1].original_input is None
    assert session.approve("c2") is agent.RunState.WAITING  # and approving it plainly is the same decision
    assert [a.by for a in session.approvals()] == ["", ""]


def test_a_bad_edited_input_is_refused_and_a_batch_with_one_stores_nothing(setup: Any) -> None:
    _, session, _, spec = setup
    agent.Runner().run(spec, [USER], ScriptedEndpoint([calls(("delete", "a"), ("delete", "b"))]))
    before = session.messages()
    with pytest.raises(ValueError, match="not valid JSON"):
        agent.Decision.approve(input="{path")
    with pytest.raises(ValueError, match="JSON object"):
        session.approve("c1", input="[1]")
    with pytest.raises(ValueError, match="only an approval"):
        agent.Decision("rejected", input="{}")
    with pytest.raises(agent.InvalidArgumentsError, match="call 'c2' \\(delete\\)") as error:
        good, bad = agent.Decision.approve(input='{"path": "z"}'), agent.Decision.approve(input='{"path": 3}')
        session.decide({"c1": good, "c2": bad})
    assert error.value.field == "path"
    with pytest.raises(agent.InvalidArgumentsError, match="path"):
        session.approve("c1", input="{}")  # a required field missing
    assert [a.decision for a in session.approvals()] == [None, None]
    assert session.messages() == before


def _expiring(tools: Tools, seconds: float) -> agent.Tool:
    """``delete`` whose approval expires after ``seconds``."""
    return attrs.evolve(tools.all[0], approval_timeout=datetime.timedelta(seconds=seconds))


def test_an_approval_timeout_needs_approval_and_a_positive_timedelta() -> None:
    def noop(path: str) -> str:
        """Nothing."""
        return path

    with pytest.raises(ValueError, match="needs needs_approval"):
        agent.tool(approval_timeout=datetime.timedelta(hours=1))(noop)
    with pytest.raises(ValueError, match="must be positive"):
        agent.tool(needs_approval=True, approval_timeout=datetime.timedelta(0))(noop)
    with pytest.raises(TypeError, match="timedelta"):
        agent.tool(needs_approval=True, approval_timeout=60)(noop)  # type: ignore[call-overload]
    made = agent.tool(needs_approval=True, approval_timeout=datetime.timedelta(hours=24))(noop)
    assert made.approval_timeout == datetime.timedelta(hours=24)


def test_a_call_past_its_deadline_expires_and_the_model_reads_so(setup: Any) -> None:
    store, session, tools, spec = setup
    spec = attrs.evolve(spec, tools=[_expiring(tools, 0.3), *tools.all[1:]])
    endpoint = ScriptedEndpoint([calls(("delete", "a"), ("look", "b")), agent.Message.assistant("done")])
    waited = agent.Runner().run(spec, [USER], endpoint)
    (asked,) = waited.approvals
    assert asked.expires_at is not None
    assert asked.expires_at == asked.requested_at + datetime.timedelta(seconds=0.3)
    info = session.info()
    assert (info.approval_deadline, info.pending_approvals) == (asked.expires_at, 1)
    assert [i.approval_deadline for i in store.sessions(state=agent.RunState.WAITING)] == [asked.expires_at]
    with pytest.raises(agent.ApprovalPendingError):  # before the deadline it still waits
        agent.Runner().run(spec, agent.Resume(), endpoint)
    due = asked.expires_at
    wait_for("the deadline", lambda: datetime.datetime.now(datetime.UTC) > due)
    with pytest.raises(agent.ConflictError, match="already expired"):
        session.approve("c1")
    seen: list[Any] = []
    result = agent.Runner().run(spec, agent.Resume(), endpoint, events=seen.append)
    assert result.text == "done" and tools.ran == ["look b"]  # the expired call never ran
    answered = results(result.messages[2])
    assert answered["c1"].is_error and "expired" in answered["c1"].text and "rejected" not in answered["c1"].text
    decided = [e.approval for e in seen if isinstance(e, agent.events.ApprovalDecided)]
    assert [(a.call_id, a.decision, a.decided_at) for a in decided] == [("c1", "expired", asked.expires_at)]
    assert session.info().approval_deadline is None


def test_an_expired_call_beside_a_decided_one_runs_the_decided_one(setup: Any) -> None:
    _, session, tools, spec = setup
    spec = attrs.evolve(spec, tools=[_expiring(tools, 0.3), *tools.all[1:]])
    endpoint = ScriptedEndpoint([calls(("delete", "a"), ("move", "/etc/b")), agent.Message.assistant("done")])
    waited = agent.Runner().run(spec, [USER], endpoint)
    deadline, no_deadline = (a.expires_at for a in waited.approvals)
    assert deadline is not None and no_deadline is None  # move has no deadline
    assert session.info().approval_deadline == deadline
    wait_for("the deadline", lambda: datetime.datetime.now(datetime.UTC) > deadline)
    with pytest.raises(agent.ApprovalPendingError):  # move still waits: no deadline of its own
        agent.Runner().run(spec, agent.Resume(), endpoint)
    assert session.approve("c2", by="ann") is agent.RunState.WAITING
    assert [a.decision for a in session.approvals()] == ["expired", "approved"]  # recorded with the decision
    assert session.info().pending_approvals == 0
    result = agent.Runner().run(spec, agent.Resume(), endpoint)
    assert tools.ran == ["move /etc/b"]
    answered = results(result.messages[2])
    assert answered["c1"].is_error and "expired" in answered["c1"].text and not answered["c2"].is_error
