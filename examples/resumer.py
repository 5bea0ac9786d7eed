"""The cron job: resume every run whose process died, through the library alone.

    python examples/resumer.py --store sqlite:///sessions.db [--max-parallel 4] [--model anthropic:MODEL]
    python examples/resumer.py --store "postgresql://postgres@127.0.0.1/test?options=-csearch_path%3Dmyschema"
    python examples/resumer.py --store "redis://127.0.0.1:6379/0?prefix=myapp:"

``--store`` is any URL ``agentsessions.stores.from_url`` opens (SQLite, PostgreSQL, MySQL,
MongoDB, Redis), the same the ``agentsessions`` command takes.

It lists the ``STALLED`` sessions (``store.sessions(state=RunState.STALLED)``: a run held
each and its lease ran out, so its process died or hangs, or it had no step left for a
steer it was to take and left the session to stall), the ended ones (``FINISHED``,
``CANCELLED``, ``FAILED``) with steers waiting: a steer left by ``agentsessions steer`` or
the console on a session no run holds waits for the next run, and nothing else starts one;
the ``WAITING`` ones whose every call someone approved or rejected (``pending_approvals``
0): the run after the decision runs the approved calls and answers the rejected ones; and
the ``WAITING`` ones past their ``approval_deadline``: the run records each expired call's
expiry and gives the model an error result saying so (a call still waiting without a
deadline, or before its own, keeps the session waiting: it is skipped).
It resumes each with ``Resume()``, at most ``--max-parallel`` at once, printing one line
per session:

- ``resumed ID``: the transcript ended in tool results or a user message (a turn under
  way), or in tool calls the journal saved, or steers wait; the run goes on from there,
  taking the steers at its first step.
- ``skipped ID``: the transcript ends with the assistant's answer and no steer waits, or
  is empty: nothing was lost that a run could redo (the run died after claiming and before
  its first save, so the message that started it lived only in the dead process; the user
  sends it again). It stays ``STALLED`` until the conversation's next run. Also skipped: a
  session no longer ``STALLED`` (or ended with steers waiting) when its turn comes (another
  resumer or a replica took it), or whose claim raises ``SessionBusyError`` (taken an
  instant before ours).
- ``failed ID``: the resumed run failed; the exit code is then 1, else 0.

The resumed run must be the agent the service runs: same tools, same system prompt. Here
that is :func:`service_agent` (an offline demo: an order-status tool and a scripted model);
put your service's own in its place.

Finding the ended sessions with steers waiting reads the listing of every ended session (a
store keeps no index of pending steers); a store of millions of conversations runs this
part less often than the stalled one. A session no run has held yet (``IDLE``) is left
alone: starting its first run is the application's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed

import agentsessions as agent
from agentsessions import stores

Agent = Callable[[agent.StoreSession], tuple[agent.Spec, agent.Endpoint]]
"""What the service runs for a session: its spec (with the session in it) and its model."""


@agent.tool
def order_status(order_id: str) -> str:
    """The status of an order.

    Args:
        order_id: the order's number.
    """
    return f"order {order_id}: shipped on 3 March, parcel 7731"


@agent.tool(needs_approval=True, approval_timeout=datetime.timedelta(hours=24))
def cancel_order(order_id: str) -> str:
    """Cancel an order: a person approves each call first (the session waits, see agentsessions.approvals).

    Args:
        order_id: the order's number.
    """
    return f"order {order_id}: cancelled, refund on its way"


def demo_model(request: agent.ModelRequest) -> agent.Message:
    """The offline model: asks for the order's status (or to cancel it), then answers from what the tool returned."""
    last = request.messages[-1]
    results = [c.text for c in last.content if c.type is agent.ContentType.TOOL_RESULT]
    if results:
        return agent.Message.assistant("Here is what I found: " + "; ".join(results))
    order = re.search(r"\d+", last.text)
    arguments = json.dumps({"order_id": order[0] if order else "unknown"})
    tool = "cancel_order" if "cancel" in last.text else "order_status"
    return agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use(f"call-{tool}", tool, arguments)])


class DemoEndpoint:
    """:func:`demo_model` as an endpoint: its reply depends on the request only, so any replica may ask it."""

    def complete(self, request: agent.ModelRequest) -> agent.ModelResponse:
        """Answer ``request``."""
        message = demo_model(request)
        return agent.ModelResponse(message, stop_reason="tool_use" if message.tool_uses else "end_turn")


def service_agent(session: agent.StoreSession, model: str = "") -> tuple[agent.Spec, agent.Endpoint]:
    """The service's agent for ``session``: its tools, prompt and lease, and the model (``provider:MODEL`` or demo)."""
    tools = [order_status, cancel_order]
    spec = agent.Spec(session=session, tools=tools, system="You answer questions about orders.", lease=30.0)
    if not model:
        return spec, DemoEndpoint()
    from agentsessions.endpoints import by_name

    return spec, by_name(model)


def to_resume(messages: list[agent.Message], pending_steers: int) -> bool:
    """Whether a stalled transcript has a turn to finish: anything but an answer (or nothing) with no steer waiting."""
    if pending_steers:
        return True  # the steers are a user's words no run answered yet
    if not messages:
        return False
    last = messages[-1]
    return last.role is agent.Role.USER or bool(last.tool_uses)


ENDED = frozenset({agent.RunState.FINISHED, agent.RunState.CANCELLED, agent.RunState.FAILED})


def needs_a_run(info: agent.SessionInfo) -> bool:
    """Whether a session waits for a run that nothing else starts: stalled, ended with steers waiting, or a wait
    for approval whose every call is decided or whose deadline passed."""
    return info.state is agent.RunState.STALLED or (info.state in ENDED and info.pending_steers > 0) or due(info)


def due(info: agent.SessionInfo) -> bool:
    """Whether a wait for approval is over: every call decided, or the earliest deadline passed."""
    if info.state is not agent.RunState.WAITING:
        return False
    deadline = info.approval_deadline
    return info.pending_approvals == 0 or (deadline is not None and deadline <= datetime.datetime.now(datetime.UTC))


def resume(runner: agent.Runner, store: agent.RunStore, stalled: agent.SessionInfo, make: Agent) -> tuple[str, bool]:
    """Resume one session listed as needing a run; one line saying what happened, and whether it went well."""
    sid = stalled.id
    info = store.info(sid)  # again, right before the claim: the listing may be minutes old
    if not needs_a_run(info):
        waiting = "" if info.state is agent.RunState.RUNNING else f", {info.pending_steers} steers waiting"
        return f"skipped {sid}: {info.state.value} now, held by {info.holder}{waiting}", True
    messages = store.messages(sid)
    if not to_resume(messages, info.pending_steers):
        return f"skipped {sid}: its last turn was answered, nothing to resume ({len(messages)} messages)", True
    spec, endpoint = make(agent.open(sid, store))
    try:
        # Resume(): the transcript as stored when the claim is ours, appending nothing.
        result = runner.run(spec, agent.Resume(), endpoint)
    except agent.ApprovalPendingError as error:
        return f"skipped {sid}: a call still waits for a decision ({error})", True
    except agent.SessionBusyError as error:
        return f"skipped {sid}: taken by another run an instant ago ({error})", True
    except agent.RunError as error:
        return f"failed {sid}: {error}", False
    done = f"{result.stop_reason} after {result.steps} steps, {len(result.messages)} messages"
    return f"resumed {sid}: {done} (last held by {stalled.holder})", True


def resume_all(store: agent.RunStore, make: Agent, *, max_parallel: int, replica: str | None = None) -> bool:
    """Resume every session that needs a run, ``max_parallel`` at once, one line for each; ``False`` if one failed."""
    stalled = list(store.sessions(state=agent.RunState.STALLED))
    steered = [info for info in store.sessions(state=ENDED) if info.pending_steers > 0]
    decided = [info for info in store.sessions(state=agent.RunState.WAITING) if due(info)]
    runner = agent.Runner(replica=replica)
    ok = True
    with ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="resume") as pool:
        futures = [pool.submit(resume, runner, store, info, make) for info in [*stalled, *steered, *decided]]
        for future in as_completed(futures):
            try:
                line, went_well = future.result()
            except agent.StoreError as error:  # the store failed outside a run: report it, go on with the rest
                line, went_well = f"failed: {error}", False
            print(line, flush=True)
            ok = ok and went_well
    found = f"{len(stalled)} stalled sessions found; {len(steered)} ended with steers waiting"
    print(f"{found}; {len(decided)} waits for approval decided or expired", flush=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", required=True, help="a store URL: sqlite:///PATH, postgresql://..., redis://...")
    parser.add_argument("--max-parallel", type=int, default=4, help="how many sessions to resume at once")
    parser.add_argument("--model", default="", help="anthropic:MODEL or openai:MODEL; the offline demo without")
    parser.add_argument("--replica", default=None, help="this job's name in SessionInfo.holder")
    args = parser.parse_args()
    if args.max_parallel < 1:
        parser.error("--max-parallel must be at least 1")

    def make(session: agent.StoreSession) -> tuple[agent.Spec, agent.Endpoint]:
        return service_agent(session, args.model)

    # A connection for each run, one for the heartbeat, one for the listing.
    with stores.from_url(args.store, connections=args.max_parallel + 2) as store:
        ok = resume_all(store, make, max_parallel=args.max_parallel, replica=args.replica)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
