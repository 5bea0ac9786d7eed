"""Runs that hold their session: claims, busy, takeover, leases, fencing, late steers, cancel.

These run over the memory store, the reference RunStore; every store proves the same
record semantics through storetest, and the kill tests prove them across processes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.holding import Heartbeat
from agentsessions.loop import CANCELLED_TOOL
from agentsessions.runs import Claim, Progress, Renewal
from agentsessions.stores.memory import MemoryStore
from tests.support.scripts import FailsAfterFirstSave, call, double, echo_last_result
from tests.support.waiting import wait_for

USER = agent.Message.user("double 21")


def blocking(entered: threading.Event, release: threading.Event, reply: agent.Message) -> Callable[..., Any]:
    """A scripted reply that signals it was asked, then waits for the test to let it answer."""

    def answer(_: agent.ModelRequest) -> agent.Message:
        entered.set()
        assert release.wait(10), "the test never released the model"
        return reply

    return answer


def test_a_second_run_of_a_held_session_is_refused_on_the_callers_thread() -> None:
    store = MemoryStore()
    entered, release = threading.Event(), threading.Event()
    endpoint = ScriptedEndpoint([blocking(entered, release, agent.Message.assistant("ok"))])
    first = agent.Runner(replica="replica-a").start(agent.Spec(session=agent.open("s", store)), [USER], endpoint)
    assert entered.wait(5)
    with pytest.raises(agent.SessionBusyError, match="replica-a") as refused:
        agent.Runner(replica="replica-b").run(agent.Spec(session=agent.open("s", store)), [USER], ScriptedEndpoint([]))
    assert isinstance(refused.value, agent.ConflictError) and isinstance(refused.value, agent.StoreError)
    with pytest.raises(agent.SessionBusyError):
        agent.Runner().start(agent.Spec(session=agent.open("s", store)), [USER], ScriptedEndpoint([]))
    info = store.info("s")
    assert (info.state, info.holder) == (agent.RunState.RUNNING, "replica-a")
    release.set()
    first.wait(5)
    assert store.info("s").state is agent.RunState.FINISHED


def test_a_stalled_session_is_taken_over_without_ceremony() -> None:
    store = MemoryStore()
    store.claim("s", replica="dead", lease=0.05)  # a run whose process died: nobody renews it
    wait_for("the lease to run out", lambda: store.info("s").state is agent.RunState.STALLED)
    result = agent.Runner(replica="alive").run(
        agent.Spec(session=agent.open("s", store)), [USER], ScriptedEndpoint([agent.Message.assistant("ok")])
    )
    assert result.text == "ok"
    assert (store.info("s").state, store.info("s").holder) == (agent.RunState.FINISHED, "alive")


def test_the_lease_is_renewed_during_a_long_model_request() -> None:
    store = MemoryStore()
    entered, release = threading.Event(), threading.Event()
    run = agent.Runner().start(
        agent.Spec(session=agent.open("s", store), lease=0.3),
        [USER],
        ScriptedEndpoint([blocking(entered, release, agent.Message.assistant("slow answer"))]),
    )
    assert entered.wait(5)
    seen = [store.info("s").lease_expires_at]

    def renewed_three_times() -> bool:
        info = store.info("s")
        assert info.state is agent.RunState.RUNNING, "a live run must never look stalled"
        if info.lease_expires_at != seen[-1]:
            seen.append(info.lease_expires_at)
        return len(seen) > 3

    wait_for("three renewals", renewed_three_times, every=0.01)
    release.set()
    assert run.wait(5).text == "slow answer"


class DeafStore(MemoryStore):
    """A store whose renewals never reach it, as when the holding process hangs."""

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        return Renewal()


def test_a_superseded_run_writes_nothing_more_and_fails_with_a_conflict() -> None:
    store = DeafStore()
    entered, release = threading.Event(), threading.Event()
    first = agent.Runner(replica="hung").start(
        agent.Spec(tools=[double], session=agent.open("s", store), lease=0.1),
        [USER],
        ScriptedEndpoint([blocking(entered, release, call("double", n=1)), echo_last_result]),
    )
    assert entered.wait(5)
    wait_for("the hung run's lease to run out", lambda: store.info("s").state is agent.RunState.STALLED)
    takeover = agent.Runner(replica="new").run(
        agent.Spec(session=agent.open("s", store)), [USER], ScriptedEndpoint([agent.Message.assistant("mine")])
    )
    release.set()
    with pytest.raises(agent.RunError) as failed:
        first.wait(5)
    assert isinstance(failed.value.__cause__, agent.ConflictError)
    assert store.messages("s") == takeover.messages  # the superseded run wrote nothing
    assert (store.info("s").state, store.info("s").holder) == (agent.RunState.FINISHED, "new")


def wait_for_a_beat(store: CountingStore) -> None:
    """Wait until a heartbeat renewal began after this call, and ended."""
    beats = len(store.renewals)
    wait_for("a heartbeat that began after now", lambda: len(store.renewals) >= beats + 2)


def test_a_run_whose_session_is_deleted_fails_and_does_not_recreate_it() -> None:
    store = CountingStore()
    entered, release = threading.Event(), threading.Event()
    run = agent.Runner().start(
        agent.Spec(tools=[double], session=agent.open("s", store), lease=0.3),
        [USER],
        ScriptedEndpoint([blocking(entered, release, call("double", n=1)), echo_last_result]),
    )
    assert entered.wait(5)
    assert agent.open("s", store).delete()
    wait_for_a_beat(store)  # the heartbeat learns that the claim is lost
    release.set()
    with pytest.raises(agent.RunError) as failed:
        run.wait(5)
    assert isinstance(failed.value.__cause__, agent.ConflictError)
    assert failed.value.result.messages[-1].content[0].type is agent.ContentType.TOOL_USE  # it ran no tool
    assert store.info("s") == agent.SessionInfo("s")


def test_a_delete_no_renewal_has_seen_yet_stops_the_run_at_its_next_save() -> None:
    store = CountingStore()
    ran: list[int] = []

    @agent.tool
    def count(n: int) -> str:
        """Count."""
        ran.append(n)
        return str(n)

    entered, release = threading.Event(), threading.Event()
    run = agent.Runner().start(
        agent.Spec(tools=[count], session=agent.open("s", store), lease=60),
        [USER],
        ScriptedEndpoint([blocking(entered, release, call("count", n=1)), echo_last_result]),
    )
    assert entered.wait(5)
    assert agent.open("s", store).delete()
    release.set()
    with pytest.raises(agent.RunError) as failed:
        run.wait(5)
    # Its lease was fresh, so the call ran without asking the store; the save after it was refused.
    assert isinstance(failed.value.__cause__, agent.ConflictError) and ran == [1]
    assert (store.info("s"), store.renewals) == (agent.SessionInfo("s"), [])


def test_a_steer_that_arrives_during_the_last_answer_keeps_the_run_going() -> None:
    store = MemoryStore()
    session = agent.open("s", store)
    entered, release = threading.Event(), threading.Event()
    endpoint = ScriptedEndpoint(
        [blocking(entered, release, agent.Message.assistant("first answer")), agent.Message.assistant("second")]
    )
    run = agent.Runner().start(agent.Spec(session=session), [USER], endpoint)
    assert entered.wait(5)
    assert session.steer("and also this") is agent.RunState.RUNNING  # the live run will take it
    release.set()
    result = run.wait(5)
    assert result.text == "second"
    assert endpoint.requests[1].messages[-2:] == (
        agent.Message.assistant("first answer"),
        agent.Message.user("and also this"),
    )
    assert store.messages("s") == result.messages
    assert store.info("s").pending_steers == 0
    assert session.steer("after the run") is agent.RunState.FINISHED  # waits for the next run


def test_a_steer_answered_running_past_max_steps_is_left_for_a_resumer() -> None:
    store = MemoryStore()
    session = agent.open("s", store)
    entered, release = threading.Event(), threading.Event()
    endpoint = ScriptedEndpoint([blocking(entered, release, agent.Message.assistant("done"))])
    run = agent.Runner().start(agent.Spec(session=session, max_steps=1, lease=0.2), [USER], endpoint)
    assert entered.wait(5)
    assert session.steer("too late") is agent.RunState.RUNNING  # a promise: some run answers it
    release.set()
    assert run.wait(5).stop_reason == "end_turn"
    # Saved but not released: the lease lapses and the session is where a resumer looks.
    wait_for("the lease to lapse", lambda: store.info("s").state is agent.RunState.STALLED)
    assert store.info("s").pending_steers == 1 and store.messages("s") == run.wait().messages
    later = ScriptedEndpoint([agent.Message.assistant("answered")])
    resumed = agent.Runner().run(agent.Spec(session=session), agent.Resume(), later)
    assert later.requests[0].messages[-2:] == (agent.Message.assistant("done"), agent.Message.user("too late"))
    assert resumed.text == "answered"
    assert (store.info("s").state, store.info("s").pending_steers) == (agent.RunState.FINISHED, 0)


def test_cancel_from_another_replica_stops_before_the_next_tool_call() -> None:
    store = CountingStore()
    ran: list[int] = []

    @agent.tool
    def count(n: int) -> str:
        """Count."""
        ran.append(n)
        return str(n)

    entered, release = threading.Event(), threading.Event()
    two_calls = agent.Message(
        agent.Role.ASSISTANT,
        [agent.Content.tool_use("c1", "count", '{"n": 1}'), agent.Content.tool_use("c2", "count", '{"n": 2}')],
    )
    endpoint = ScriptedEndpoint([blocking(entered, release, two_calls), agent.Message.assistant("never")])
    run = agent.Runner().start(agent.Spec(tools=[count], session=agent.open("s", store), lease=0.3), [USER], endpoint)
    assert entered.wait(5)
    assert agent.open("s", MemoryStore()).cancel() is False  # nothing holds a session elsewhere
    assert agent.open("s", store).cancel() is True  # the same store, as another replica's view of it
    wait_for_a_beat(store)  # the cancel reaches this process with its next heartbeat
    release.set()
    result = run.wait(5)
    assert (result.stop_reason, ran, len(endpoint.requests)) == ("cancelled", [], 1)
    # Every tool call has its result, so a provider accepts the transcript as it is.
    assert result.messages[-1].content == (
        agent.Content.tool_result("c1", CANCELLED_TOOL, is_error=True),
        agent.Content.tool_result("c2", CANCELLED_TOOL, is_error=True),
    )
    info = store.info("s")
    assert (info.state, info.cancel_requested) == (agent.RunState.CANCELLED, False)
    assert store.messages("s") == result.messages
    assert agent.open("s", store).cancel() is False  # no run holds it any more


def test_box_steers_in_no_save_are_reported_unapplied_and_store_steers_stay_pending() -> None:
    store = FailsAfterFirstSave()
    holder: list[agent.Run] = []

    @agent.tool
    def look() -> str:
        """Look."""
        holder[0].steer("from the box")
        agent.open("s", store).steer("from the store")
        return "seen"

    go = threading.Event()
    endpoint = ScriptedEndpoint([call("look"), echo_last_result])
    run = agent.Runner().start(
        agent.Spec(tools=[look], session=agent.open("s", store)), [USER], endpoint, lambda _: go.wait(5)
    )
    holder.append(run)
    go.set()
    with pytest.raises(agent.RunError) as failed:
        run.wait(5)
    assert failed.value.result.unapplied_steers == ["from the box"]
    assert store.take_steers("s") == ["from the store"]  # never deleted: no save carried it


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.renewals: list[int] = []

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        self.renewals.append(len(claims))
        return super().renew(claims)


def test_one_heartbeat_renews_every_run_of_the_process_in_one_call() -> None:
    store = CountingStore()
    release = threading.Event()
    entered = [threading.Event() for _ in range(200)]
    runs = [
        agent.Runner().start(
            agent.Spec(session=agent.open(f"s{i}", store), lease=0.3),
            [USER],
            ScriptedEndpoint([blocking(entered[i], release, agent.Message.assistant("ok"))]),
        )
        for i in range(200)
    ]
    assert all(event.wait(10) for event in entered)
    beats = len(store.renewals)
    wait_for("two more beats", lambda: len(store.renewals) >= beats + 2)
    release.set()
    for run in runs:
        run.wait(10)
    # A beat that began after every run was in its model request carried all of them: one call, not one per run.
    assert store.renewals[beats + 1] == 200, store.renewals
    assert all(session.state is agent.RunState.FINISHED for session in store.sessions())
    wait_for("the heartbeat to stop", lambda: Heartbeat.of(store).thread is None)


def test_a_seed_session_object_of_another_kind_runs_without_claims() -> None:
    class Plain:
        def __init__(self) -> None:
            self.saved: list[list[agent.Message]] = []

        def save(self, messages: Sequence[agent.Message]) -> None:
            self.saved.append(list(messages))

        def messages(self) -> list[agent.Message]:
            return self.saved[-1] if self.saved else []

        def steer(self, text: str) -> None:
            pass

        def take_steers(self) -> list[str]:
            return []

    plain = Plain()
    result = agent.Runner().run(agent.Spec(session=plain), [USER], ScriptedEndpoint([agent.Message.assistant("hi")]))
    assert plain.saved[-1] == result.messages


def test_a_runner_names_its_replica() -> None:
    assert ":" in agent.Runner().replica
    with pytest.raises(TypeError, match="replica"):
        agent.Runner(replica="")
    with pytest.raises(ValueError, match="lease"):
        agent.Spec(lease=0)


class SteeredWhileReleasing(MemoryStore):
    """At the release, a web view steers: first the run it holds, then (refused) the session."""

    def __init__(self) -> None:
        super().__init__()
        self.run: agent.Run | None = None
        self.refused = False

    def save_run(self, claim: Claim, messages: Sequence[agent.Message], **options: Any) -> Progress:
        if options.get("end") is not None and self.run is not None and not self.refused:
            try:
                self.run.steer("said while it was finishing")
            except agent.RunFinishedError:
                self.refused = True
                agent.open(claim.session_id, self).steer("said while it was finishing")
        return super().save_run(claim, messages, **options)


def test_a_run_steer_refused_while_finishing_goes_through_the_session_and_is_answered() -> None:
    store = SteeredWhileReleasing()
    go = threading.Event()
    endpoint = ScriptedEndpoint([agent.Message.assistant("first"), agent.Message.assistant("second")])
    run = agent.Runner().start(agent.Spec(session=agent.open("s", store)), [USER], endpoint, lambda _: go.wait(5))
    store.run = run
    go.set()
    result = run.wait(5)
    assert store.refused and result.text == "second"
    assert endpoint.requests[1].messages[-1] == agent.Message.user("said while it was finishing")
    assert (store.info("s").state, store.info("s").pending_steers) == (agent.RunState.FINISHED, 0)
