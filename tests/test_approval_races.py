"""Deciders in separate processes racing on one waiting session, on every persistent store.

Each trial makes a session wait for two calls, then starts ``DECIDERS`` processes at one
signal: the even ones approve both calls, the odd ones reject both, each once. Exactly one
kind of decision may be stored, on both calls (a batch is all or none); every decider of
that kind either recorded it or was told the state (a retry of the same decision), and
every decider of the other kind got ``ConflictError``. Never two decisions on one call.
``AGENTSESSIONS_DECIDE_TRIALS`` (default 3) sets the trials per backend; a failure names
its seed. ``-s`` prints the counts.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
import time
from collections import Counter
from multiprocessing.connection import Connection
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runs import utcnow
from tests.support.backends import Opener
from tests.support.sending import context

pytestmark = pytest.mark.slow  # processes

TRIALS = int(os.environ.get("AGENTSESSIONS_DECIDE_TRIALS", "3"))
SEED = int(os.environ.get("AGENTSESSIONS_DECIDE_SEED", str(random.randrange(10**6))))
DECIDERS = 4
SECONDS = 60.0
CALLS = ("c1", "c2")


def decider(opener: Opener, session_id: str, n: int, go: Any, reports: Connection) -> None:
    """Approve (even ``n``) or reject (odd) both calls once, at the signal; report what happened."""
    with opener() as store:
        session = agent.open(session_id, store)
        choice = agent.Decision.approve(by=f"d{n}") if n % 2 == 0 else agent.Decision.reject(reason="no", by=f"d{n}")
        go.wait(SECONDS)
        try:
            state = session.decide(dict.fromkeys(CALLS, choice))
        except agent.ConflictError:
            reports.send((n, choice.decision, "conflict"))
        except Exception as error:  # reported, so the test names it
            reports.send((n, choice.decision, f"error {error!r}"))
        else:
            reports.send((n, choice.decision, state.value))


def waiting_session(store: agent.RunStore, session_id: str) -> None:
    """A session released WAITING for the two calls, as a run leaves it."""
    assert isinstance(store, agent.ApprovalStore)
    claim = store.claim(session_id, replica="test", lease=30)
    store.save_run(claim, [agent.Message.user("go")])
    store.wait(claim, [agent.Approval(c, "delete", '{"path": "x"}', utcnow()) for c in CALLS])


def at_one_signal(target: Any, opener: Opener, session_id: str, rng: random.Random, where: str) -> list[Any]:
    """Start ``DECIDERS`` processes running ``target`` (in an order drawn from ``rng``), signal them at once, and
    return their reports."""
    ctx = context()
    go = ctx.Event()
    pipe, child = ctx.Pipe(duplex=False)
    order = rng.sample(range(DECIDERS), DECIDERS)  # who starts first varies by trial
    processes = [ctx.Process(target=target, args=(opener, session_id, n, go, child)) for n in order]
    for process in processes:
        process.start()
    child.close()
    go.set()
    reports = [pipe.recv() for _ in processes if pipe.poll(SECONDS)]
    for process in processes:
        process.join(SECONDS)
        assert process.exitcode == 0, f"{where}: a decider exited {process.exitcode}"
    return reports


def test_racing_deciders_in_processes_record_one_decision_per_call(opener: Opener) -> None:
    print(f"\nseed {SEED}")
    tally: Counter[str] = Counter()
    rng = random.Random(SEED)
    with opener() as store:
        for trial in range(TRIALS):
            session_id = f"decide-{os.getpid()}-{SEED}-{trial}"
            waiting_session(store, session_id)
            reports = at_one_signal(decider, opener, session_id, rng, f"seed {SEED} trial {trial}")
            where = f"seed {SEED} trial {trial}: {sorted(reports)}"
            assert len(reports) == DECIDERS and not [r for r in reports if r[2].startswith("error")], where
            stored = {a.call_id: a.decision for a in store.approvals(session_id)}
            assert len(set(stored.values())) == 1 and set(stored) == set(CALLS), f"{where}; stored {stored}"
            kind = stored["c1"]
            for _, decision, outcome in reports:
                want = "waiting" if decision == kind else "conflict"
                assert outcome == want, f"{where}; stored {kind}"
                tally[f"{'winner kind' if decision == kind else 'loser kind'} {outcome}"] += 1
            tally[f"won by {kind}"] += 1
            assert store.info(session_id).pending_approvals == 0
            store.delete(session_id)
    print(dict(tally))


def test_a_wait_is_decided_resumed_and_cancelled_through_each_store(opener: Opener) -> None:
    ran: list[str] = []

    @agent.tool(needs_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    def asks(*paths: str) -> agent.Message:
        uses = [agent.Content.tool_use(f"c-{p}", "delete", f'{{"path": "{p}"}}') for p in paths]
        return agent.Message(agent.Role.ASSISTANT, uses)

    with opener() as store:
        for name in ("resumed", "cancelled"):
            session = agent.open(f"approvals-{os.getpid()}-{SEED}-{name}", store)
            spec = agent.Spec(session=session, tools=[delete], journal=True)
            endpoint = ScriptedEndpoint([asks("a", "b"), agent.Message.assistant("done")])
            waited = agent.Runner().run(spec, [agent.Message.user("tidy")], endpoint)
            assert [a.call_id for a in waited.approvals] == ["c-a", "c-b"]
            assert (session.info().state, session.info().pending_approvals) == (agent.RunState.WAITING, 2)
            assert session.approve("c-a", by="ann") is agent.RunState.WAITING
            if name == "cancelled":
                assert session.cancel() is True and session.info().state is agent.RunState.CANCELLED
                assert [a.decision for a in store.approvals(session.id)] == ["approved", "rejected"]
            else:
                assert session.reject("c-b", reason="keep b") is agent.RunState.WAITING
                result = agent.Runner().run(spec, agent.Resume(), endpoint)
                assert (result.text, session.info().state) == ("done", agent.RunState.FINISHED)
                assert ran == ["a"]
            session.delete()


def test_send_rejecting_races_a_decision_and_the_text_is_answered_once(opener: Opener) -> None:
    """A person approves the call while the user's message rejects it (``on_waiting="reject"``), from two
    store objects at once: one decision stands, the tool runs only if it is the approval, and the text is
    in the transcript once, answered once."""
    rng = random.Random(SEED)
    tally: Counter[str] = Counter()
    with opener() as store, opener() as other:
        ran: list[str] = []

        @agent.tool(needs_approval=True)
        def delete(path: str) -> str:
            """Delete a file."""
            ran.append(path)
            return f"deleted {path}"

        for trial in range(2 * TRIALS):
            ran.clear()
            session_id = f"on-waiting-{os.getpid()}-{SEED}-{trial}"
            use = agent.Content.tool_use("c1", "delete", '{"path": "a"}')
            endpoint = ScriptedEndpoint(
                [agent.Message(agent.Role.ASSISTANT, [use])] + [agent.Message.assistant("ok")] * 4
            )
            spec = agent.Spec(session=agent.open(session_id, store), tools=[delete])
            agent.Runner().run(spec, [agent.Message.user("tidy")], endpoint)
            other_session = agent.open(session_id, other)

            def approve(other_session: agent.StoreSession = other_session) -> None:
                time.sleep(rng.uniform(0, 0.02))  # send makes a few round trips before it decides
                with contextlib.suppress(agent.ConflictError):
                    other_session.approve("c1", by="ops")

            approver = threading.Thread(target=approve)
            approver.start()
            time.sleep(rng.uniform(0, 0.003))
            run = agent.Runner().send(spec, "no, keep it", endpoint, on_waiting="reject")
            approver.join(SECONDS)
            if run is None:  # the approval won and no run was started by send: the resumer's job
                assert store.info(session_id).state is agent.RunState.WAITING
                run = agent.Runner().start(spec, agent.Resume(), endpoint)
            result = run.wait(SECONDS)
            [approval] = store.approvals(session_id)
            where = f"seed {SEED} trial {trial}: {approval}"
            assert ran == (["a"] if approval.decision == "approved" else []), where
            texts = [c.text for m in result.messages for c in m.content if c.type is agent.ContentType.TEXT]
            assert texts.count("no, keep it") == 1 and result.text == "ok", where
            assert store.info(session_id).state is agent.RunState.FINISHED, where
            tally[str(approval.decision)] += 1
            store.delete(session_id)
    print(f"\nseed {SEED}: {dict(tally)}")


def editor(opener: Opener, session_id: str, n: int, go: Any, reports: Connection) -> None:
    """Approve ``c1`` with the input ``{"path": "p<n>"}`` once, at the signal; report what happened."""
    with opener() as store:
        session = agent.open(session_id, store)
        text = json.dumps({"path": f"p{n}"})
        go.wait(SECONDS)
        try:
            state = session.approve("c1", by=f"d{n}", input=text)
        except agent.ConflictError:
            reports.send((n, text, "conflict"))
        except Exception as error:  # reported, so the test names it
            reports.send((n, text, f"error {error!r}"))
        else:
            reports.send((n, text, state.value))


def test_racing_deciders_with_different_inputs_one_wins_and_its_input_runs(opener: Opener) -> None:
    print(f"\nseed {SEED}")
    ran: list[str] = []

    @agent.tool(needs_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    rng, tally = random.Random(SEED), Counter[str]()
    with opener() as store:
        for trial in range(TRIALS):
            ran.clear()
            session = agent.open(f"edit-race-{os.getpid()}-{SEED}-{trial}", store)
            spec = agent.Spec(session=session, tools=[delete], journal=True)
            use = agent.Content.tool_use("c1", "delete", '{"path": "asked"}')
            endpoint = ScriptedEndpoint([agent.Message(agent.Role.ASSISTANT, [use]), agent.Message.assistant("done")])
            agent.Runner().run(spec, [agent.Message.user("tidy")], endpoint)
            reports = at_one_signal(editor, opener, session.id, rng, f"seed {SEED} trial {trial}")
            where = f"seed {SEED} trial {trial}: {sorted(reports)}"
            winners = [text for _, text, outcome in reports if outcome == "waiting"]
            assert len(reports) == DECIDERS and len(winners) == 1, where
            assert sorted(outcome for *_, outcome in reports) == ["conflict"] * (DECIDERS - 1) + ["waiting"], where
            [approval] = session.approvals()
            assert (approval.input, approval.original_input) == (winners[0], '{"path": "asked"}'), where
            assert session.messages()[-1].content[0].input == winners[0], where  # exactly the winner's input
            assert agent.Runner().run(spec, agent.Resume(), endpoint).text == "done", where
            assert ran == [json.loads(winners[0])["path"]], where  # the tool ran once, with it
            tally["one winner, the rest ConflictError, the tool ran with the winner's input"] += 1
            session.delete()
    print(dict(tally))
