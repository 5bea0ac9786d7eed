"""Kill tests for approvals: an approved call killed inside its tool runs at most once.

Each trial makes a session wait for one call of ``pay`` (a tool that needs approval and is
not idempotent; its side effect is a line in a file, written between two random pauses),
approves it, then resumes it in a *runner* process with ``journal=True``. The test kills
the runner with SIGKILL a random few milliseconds after the tool was called (or lets it
finish), and resumes again in a new process, until a resume finishes. Then the side
effect must be there at most once, and the call's result is the tool's own (it ran once)
or the journal's in-doubt mark (it may have run, and never runs again).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from multiprocessing.connection import Connection
from typing import Any

import attrs

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.loop import IN_DOUBT
from tests.support.crashes import EVENT_SECONDS, context, each_trial, kill, settled

Opener = Callable[[], AbstractContextManager[Any]]

LEASE = 0.6
ASK = agent.Message.user("pay the invoice")
CALL = agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("pay-1", "pay", json.dumps({"invoice": 7}))])


def spec(store: agent.RunStore, session_id: str, side_effects: str) -> agent.Spec:
    @agent.tool(needs_approval=True)
    def pay(invoice: int) -> str:
        """Pay an invoice (not idempotent: its side effect is a line in a file)."""
        time.sleep(random.uniform(0, 0.01))
        with open(side_effects, "a") as out:
            out.write(f"{session_id} {invoice}\n")
            out.flush()
            os.fsync(out.fileno())
        time.sleep(random.uniform(0, 0.01))
        return f"paid {invoice}"

    return agent.Spec(tools=[pay], session=agent.open(session_id, store), lease=LEASE, journal=True)


def resumer_process(opener: Opener, session_id: str, side_effects: str, events: Connection) -> None:
    """Resume the approved session, reporting every event's name; the test may kill this at any instant."""
    with opener() as store:
        try:
            result = agent.Runner(replica="resumer").run(
                spec(store, session_id, side_effects),
                agent.Resume(),
                ScriptedEndpoint([agent.Message.assistant("done")]),
                lambda event: events.send(type(event).__name__),
            )
        except agent.AgentSessionsError as error:
            events.send(("failed", repr(error)))
        else:
            events.send(("finished", result.stop_reason))


@attrs.define
class ApprovalTally:
    """What the approval kill trials saw, per backend."""

    trials: int = 0
    kills: int = 0
    ran_once: int = 0  # the tool's side effect once, its own result in the transcript
    in_doubt: int = 0  # the journal's mark as the result (the tool ran once or not at all)
    doubled: int = 0  # the side effect twice or more: must stay 0

    def __str__(self) -> str:
        return (
            f"{self.trials} trials, {self.kills} kills, {self.ran_once} ran once, "
            f"{self.in_doubt} in doubt, {self.doubled} doubled"
        )


def approval_kill_trials(opener: Opener, trials: int, seed: int, workdir: str) -> ApprovalTally:
    """Run ``trials`` trials against the store ``opener`` opens; a failure names the seed and trial."""
    ctx = context()
    side_effects = os.path.join(workdir, "approval-side-effects.log")
    tally = ApprovalTally()

    def trial(store: agent.RunStore, rng: random.Random, session_id: str) -> None:
        one_trial(ctx, opener, store, rng, session_id, side_effects, tally)

    each_trial(opener, trials, seed, "approval", side_effects, trial)
    return tally


def one_trial(
    ctx: Any,
    opener: Opener,
    store: agent.RunStore,
    rng: random.Random,
    session_id: str,
    side_effects: str,
    tally: ApprovalTally,
) -> None:
    waited = agent.Runner().run(spec(store, session_id, side_effects), [ASK], ScriptedEndpoint([CALL]))
    assert waited.stop_reason == agent.StopReason.APPROVAL_REQUIRED, waited
    assert agent.open(session_id, store).approve("pay-1", by="test") is agent.RunState.WAITING
    for _ in range(50):
        pipe, child = ctx.Pipe(duplex=False)
        runner = ctx.Process(target=resumer_process, args=(opener, session_id, side_effects, child))
        runner.start()
        child.close()
        kill_it = rng.random() < 0.8
        ended = None
        while ended is None:
            assert pipe.poll(EVENT_SECONDS), "a resumer sent nothing"
            event = pipe.recv()
            if isinstance(event, tuple):
                ended = event
            elif event == "ToolCalled" and kill_it:
                time.sleep(rng.uniform(0, 0.025))  # inside the tool, or just before or after it
                kill(runner)
                break
        if settled(runner, pipe, ended, store, session_id):
            break
        tally.kills += 1
    else:
        raise AssertionError("no resume finished in 50 attempts")
    account(store, session_id, side_effects, tally)


def account(store: agent.RunStore, session_id: str, side_effects: str, tally: ApprovalTally) -> None:
    with open(side_effects) as lines:
        runs = sum(1 for line in lines if line.split()[0] == session_id)
    results = [c for m in store.messages(session_id) for c in m.content if c.type is agent.ContentType.TOOL_RESULT]
    assert [r.tool_use_id for r in results] == ["pay-1"], results
    tally.trials += 1
    if runs > 1:
        tally.doubled += 1
    elif results[0].text == IN_DOUBT:
        tally.in_doubt += 1
    else:
        assert (runs, results[0].text, results[0].is_error) == (1, "paid 7", False), (runs, results[0])
        tally.ran_once += 1
    store.delete(session_id)
