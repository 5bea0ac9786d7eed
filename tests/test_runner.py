"""The runner: steps, stop reasons, cancellation, failures, in-memory steers and events."""

from __future__ import annotations

import threading

import pytest

import agentsessions as agent
from agentsessions import events as ev
from agentsessions.endpoints import EndpointError, ScriptedEndpoint
from agentsessions.stores.memory import MemoryStore
from tests.support.scripts import call, double, echo_last_result

USER = agent.Message.user("double 21")


def test_a_run_calls_tools_and_answers() -> None:
    endpoint = ScriptedEndpoint([call("double", n=21), echo_last_result])
    result = agent.Runner().run(agent.Spec(tools=[double]), [USER], endpoint)
    assert result.text == "result: 42"
    assert (result.steps, result.stop_reason, result.unapplied_steers) == (2, "end_turn", [])
    assert [m.role for m in result.messages] == ["user", "assistant", "user", "assistant"]
    assert result.messages[2].content == (agent.Content.tool_result("call-1", "42"),)
    assert endpoint.requests[1].messages == tuple(result.messages[:3])


def test_the_caller_list_is_not_changed() -> None:
    messages = [USER]
    agent.Runner().run(agent.Spec(tools=[double]), messages, ScriptedEndpoint([call("double", n=1), echo_last_result]))
    assert messages == [USER]


def test_max_steps_ends_the_run_with_its_own_reason_after_the_tools_ran() -> None:
    endpoint = ScriptedEndpoint([call("double", n=i) for i in range(5)])
    result = agent.Runner().run(agent.Spec(tools=[double], max_steps=3), [USER], endpoint)
    assert (result.steps, result.stop_reason) == (3, agent.StopReason.MAX_STEPS)
    assert result.messages[-1].content[0].type is agent.ContentType.TOOL_RESULT
    assert len(endpoint.requests) == 3


def test_cancel_stops_before_the_next_model_request() -> None:
    in_tool, release = threading.Event(), threading.Event()

    @agent.tool
    def slow() -> str:
        """Wait."""
        in_tool.set()
        release.wait(5)
        return "done"

    endpoint = ScriptedEndpoint([call("slow"), echo_last_result])
    run = agent.Runner().start(agent.Spec(tools=[slow]), [USER], endpoint)
    assert in_tool.wait(5)
    run.cancel()
    release.set()
    result = run.wait(5)
    assert (result.stop_reason, result.steps, len(endpoint.requests)) == ("cancelled", 1, 1)
    assert run.done


def test_a_failing_endpoint_fails_the_run_with_the_partial_result() -> None:
    endpoint = ScriptedEndpoint([call("double", n=2)])  # the second request has no reply
    run = agent.Runner().start(agent.Spec(tools=[double]), [USER], endpoint)
    with pytest.raises(agent.RunError, match="step 2") as failure:
        run.wait(5)
    assert isinstance(failure.value.__cause__, EndpointError)
    assert failure.value.result.steps == 2
    assert len(failure.value.result.messages) == 3
    with pytest.raises(agent.RunError):
        agent.Runner().run(agent.Spec(tools=[double]), [USER], ScriptedEndpoint([]))


def test_a_steer_lands_where_the_run_has_got_to_and_stays_there() -> None:
    steered = threading.Event()
    run_box: list[agent.Run] = []

    @agent.tool
    def look() -> str:
        """Look."""
        run_box[0].steer("check the lease expiry")
        steered.set()
        return "seen"

    endpoint = ScriptedEndpoint([call("look", "c1"), call("look", "c2"), agent.Message.assistant("ok")])
    start = threading.Event()
    runner = agent.Runner()
    run = runner.start(agent.Spec(tools=[look]), [USER], endpoint, events=lambda e: start.wait(5))
    run_box.append(run)
    start.set()
    result = run.wait(5)
    second, third = endpoint.requests[1].messages, endpoint.requests[2].messages
    assert second[-1].content == (
        agent.Content.tool_result("c1", "seen"),
        agent.Content.of_text("check the lease expiry"),
    )
    assert third[2] == second[2]  # where it landed, not pinned last
    assert third[-1].content == (
        agent.Content.tool_result("c2", "seen"),
        agent.Content.of_text("check the lease expiry"),
    )
    assert result.unapplied_steers == []


def test_a_steer_without_a_trailing_user_message_starts_one() -> None:
    endpoint = ScriptedEndpoint([agent.Message.assistant("done")])
    steered = threading.Event()
    run = agent.Runner().start(agent.Spec(), [agent.Message.assistant("earlier")], endpoint, lambda e: steered.wait(5))
    run.steer("hello")
    steered.set()
    run.wait(5)
    assert endpoint.requests[0].messages == (agent.Message.assistant("earlier"), agent.Message.user("hello"))


def test_a_steer_during_the_last_request_gets_another_request() -> None:
    run_box: list[agent.Run] = []

    def answer(request: agent.ModelRequest) -> agent.Message:
        run_box[0].steer("one more thing")
        return agent.Message.assistant("answer")

    endpoint = ScriptedEndpoint([answer, agent.Message.assistant("and the other thing")])
    go = threading.Event()
    run = agent.Runner().start(agent.Spec(), [USER], endpoint, events=lambda e: go.wait(5))
    run_box.append(run)
    go.set()
    result = run.wait(5)
    assert (result.text, result.unapplied_steers) == ("and the other thing", [])
    assert endpoint.requests[1].messages[-1] == agent.Message.user("one more thing")
    with pytest.raises(agent.RunFinishedError):
        run.steer("after the end")


def test_a_steer_during_the_last_allowed_request_is_reported_unapplied() -> None:
    run_box: list[agent.Run] = []

    def answer(request: agent.ModelRequest) -> agent.Message:
        run_box[0].steer("too late")
        return agent.Message.assistant("answer")

    go = threading.Event()
    spec = agent.Spec(max_steps=1)
    run = agent.Runner().start(spec, [USER], ScriptedEndpoint([answer]), events=lambda e: go.wait(5))
    run_box.append(run)
    go.set()
    assert run.wait(5).unapplied_steers == ["too late"]


def test_wait_times_out() -> None:
    release = threading.Event()

    def slow(request: agent.ModelRequest) -> agent.Message:
        release.wait(5)
        return agent.Message.assistant("late")

    run = agent.Runner().start(agent.Spec(), [USER], ScriptedEndpoint([slow]))
    with pytest.raises(TimeoutError):
        run.wait(0.05)
    assert not run.done
    release.set()
    assert run.wait(5).text == "late"


def test_events_arrive_in_order() -> None:
    seen: list[object] = []
    agent.Runner().run(
        agent.Spec(tools=[double]), [USER], ScriptedEndpoint([call("double", n=1), echo_last_result]), seen.append
    )
    kinds = [type(e).__name__ for e in seen]
    assert kinds == [
        "RunStarted",
        "StepStarted", "ModelRequested", "ModelResponded", "ToolCalled", "ToolReturned",
        "StepStarted", "ModelRequested", "ModelResponded", "RunFinished",
    ]  # fmt: skip
    finished = seen[-1]
    assert isinstance(finished, ev.RunFinished) and finished.result.text == "result: 2"


def test_an_events_callback_that_raises_is_logged_once_and_the_run_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[object] = []

    def broken(event: object) -> None:
        calls.append(event)
        raise ValueError("listener bug")

    store = MemoryStore()
    spec = agent.Spec(tools=[double], session=agent.open("s", store))
    endpoint = ScriptedEndpoint([call("double", n=1), echo_last_result])
    result = agent.Runner().run(spec, [USER], endpoint, broken)
    assert result.text == "result: 2"
    assert store.messages("s") == result.messages  # the final answer was saved
    assert len(calls) == 1  # no further events after the one that raised
    [record] = [r for r in caplog.records if "events callback raised" in r.getMessage()]
    assert record.exc_info is not None and "listener bug" in str(record.exc_info[1])


@pytest.mark.parametrize(
    ("build", "complaint"),
    [
        (lambda: agent.Spec(max_steps=0), "max_steps"),
        (lambda: agent.Spec(tools=[double, double]), "two tools named double"),
        (lambda: agent.Spec(tools=[print]), "Spec.tools holds Tool objects"),  # type: ignore[list-item]
        (lambda: agent.Spec(session="conversation-1"), "Spec.session must be a Session"),  # type: ignore[arg-type]
        (lambda: agent.Spec(pattern="plan"), "'plan' is not a valid Pattern"),
    ],
)
def test_a_bad_spec_is_refused(build: object, complaint: str) -> None:
    with pytest.raises((TypeError, ValueError), match=complaint):
        build()  # type: ignore[operator]


def test_bad_run_arguments_are_refused() -> None:
    runner = agent.Runner()
    with pytest.raises(TypeError, match="element 0 is str"):
        runner.run(agent.Spec(), ["hello"], ScriptedEndpoint([]))  # type: ignore[list-item]
    with pytest.raises(TypeError, match="complete"):
        runner.run(agent.Spec(), [], object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="steer is a str"):
        runner.start(agent.Spec(), [USER], ScriptedEndpoint([agent.Message.assistant("x")])).steer(b"x")  # type: ignore[arg-type]


def test_a_pause_turn_is_not_the_end_the_run_sends_the_transcript_back() -> None:
    paused = agent.Message(
        agent.Role.ASSISTANT, [agent.Content.raw("anthropic", '{"type":"server_tool_use","id":"s1"}')]
    )
    model = ScriptedEndpoint(
        [
            agent.ModelResponse(paused, "pause_turn"),
            agent.ModelResponse(agent.Message.assistant("found it"), "end_turn"),
        ]
    )
    result = agent.Runner().run(agent.Spec(), [agent.Message.user("search")], model)
    assert (result.text, result.steps, result.stop_reason) == ("found it", 2, "end_turn")
    assert model.requests[1].messages == (agent.Message.user("search"), paused)


def test_a_pause_turn_in_the_last_step_stops_at_max_steps() -> None:
    paused = agent.Message.assistant("working")
    model = ScriptedEndpoint([agent.ModelResponse(paused, "pause_turn")])
    result = agent.Runner().run(agent.Spec(max_steps=1), [agent.Message.user("search")], model)
    assert (result.steps, result.stop_reason) == (1, "max_steps")


def test_usage_sums_every_count_over_the_run() -> None:
    call = agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c1", "nothing", "{}")])
    model = ScriptedEndpoint(
        [
            agent.ModelResponse(call, "tool_use", agent.Usage(10, 2, cache_read_tokens=0, cache_write_tokens=100)),
            agent.ModelResponse(agent.Message.assistant("ok"), "end_turn", agent.Usage(3, 4, 100, 20)),
        ]
    )
    seen: list[agent.Usage] = []
    events = lambda e: seen.append(e.response.usage) if isinstance(e, ev.ModelResponded) else None  # noqa: E731
    result = agent.Runner().run(agent.Spec(), [agent.Message.user("go")], model, events=events)
    assert result.usage == agent.Usage(13, 6, 100, 120)
    assert sum(seen, agent.Usage()) == result.usage
