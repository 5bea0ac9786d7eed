"""Kill tests for compaction: a run SIGKILLed while its summarizer works or just after the summary is appended.

A *runner* process runs one long tool conversation with compaction on (a scripted model, a
scripted summarizer that takes a few milliseconds) over a real store, reporting each event
name to the test through a pipe; the summarizer reports ``Summarizing`` as it starts. The
test kills the runner a random few milliseconds after the k-th ``Summarizing`` or the k-th
``Compacted`` (the save follows it), waits for the lease to lapse, and starts another
process that resumes the session with ``Resume()`` until the conversation finishes.

Afterwards: what was stored before the kill is a prefix of the final transcript (appends
stayed appends); the final transcript, summaries left out, is the conversation exactly
(no message lost or doubled); every stored summary is whole, alone in its message, and
covers more messages than the one before it (at most one summary per cut); and the
resumer's first request started at the last summary it found (or added).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import signal
import time
from collections import Counter
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import attrs

import agentsessions as agent
from agentsessions.compaction import last_compaction, request_messages
from agentsessions.endpoint import ModelRequest, ModelResponse, Usage
from tests.support.crashes import EVENT_SECONDS, LEASE, SETTLED, Opener, kill, wait_until

ROUNDS = 16  # tool calls before the answer
FIRST = "read every page"
PAGE = "p" * 400  # a tool result: ~100 tokens, so the transcript passes the trigger every few rounds
SUMMARY = re.compile(r"summary up to call-\d+: s{300} \[end\]")


def context() -> multiprocessing.context.ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["agentsessions", "tests.support.compaction_crashes"])
    return ctx


@agent.tool
def look(n: int) -> str:
    """Read page n."""
    return f"page {n}: {PAGE}"


def _tokens(request: ModelRequest) -> int:
    return sum(len(b.text) + len(b.input) + 8 for m in request.messages for b in m.content) // 4


def _last_call(request: ModelRequest) -> int:
    """The number of the last tool call answered in ``request`` (-1 when none)."""
    for message in reversed(request.messages):
        for block in reversed(message.content):
            if block.type is agent.ContentType.TOOL_RESULT:
                return int(block.tool_use_id.removeprefix("call-"))
    return -1


class Model:
    """A tool call per round until ROUNDS, then an answer; 1-3 ms each, its input counted as ~4 characters a token."""

    def complete(self, request: ModelRequest) -> ModelResponse:
        time.sleep(random.uniform(0.001, 0.003))
        n = _last_call(request) + 1
        if n < ROUNDS:
            return ModelResponse(call(n), "tool_use", Usage(_tokens(request), 5))
        return ModelResponse(agent.Message.assistant(f"done after {n} pages"), "end_turn", Usage(_tokens(request), 5))


def call(n: int) -> agent.Message:
    return agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use(f"call-{n}", "look", json.dumps({"n": n}))])


@attrs.define
class Summarizer:
    """Says ``Summarizing`` on the pipe, then takes 2-6 ms to answer with a whole, recognisable summary."""

    events: Connection | None

    def complete(self, request: ModelRequest) -> ModelResponse:
        if self.events is not None:
            self.events.send("Summarizing")
        time.sleep(random.uniform(0.002, 0.006))
        text = f"summary up to call-{_last_call(request)}: {'s' * 300} [end]"
        return ModelResponse(agent.Message.assistant(text), "end_turn", Usage(_tokens(request), 80))


def spec(store: agent.RunStore, session_id: str, events: Connection | None) -> agent.Spec:
    rule = agent.Compaction(trigger_tokens=700, keep_tokens=250, summarizer=Summarizer(events))
    return agent.Spec(
        tools=[look], session=agent.open(session_id, store), max_steps=4 * ROUNDS, lease=LEASE, compaction=rule
    )


def runner_process(opener: Opener, session_id: str, replica: str, events: Connection, fresh: bool) -> None:
    """Start the conversation (``fresh``) or resume what the store holds; report events, then how it ended
    and the first request's first block (type and text)."""
    first: list[str] = []

    def sink(event: Any) -> None:
        if isinstance(event, agent.events.ModelRequested) and not first:
            block = event.request.messages[0].content[0]
            first.extend([block.type.value, block.text])
        events.send(type(event).__name__)

    with opener() as store:
        if fresh:
            messages: Sequence[agent.Message] | agent.Resume = [agent.Message.user(FIRST)]
        else:  # a run killed before its first save left nothing: the conversation starts over
            messages = agent.Resume() if store.messages(session_id) else agent.Resume(FIRST)
        try:
            result = agent.Runner(replica=replica).run(spec(store, session_id, events), messages, Model(), sink)
        except agent.AgentSessionsError as error:
            events.send(("failed", repr(error), *first))
        else:
            events.send(("finished", result.stop_reason, *first))


def start(
    ctx: multiprocessing.context.ForkServerContext, opener: Opener, session_id: str, replica: str, fresh: bool
) -> tuple[multiprocessing.process.BaseProcess, Connection]:
    events, child_end = ctx.Pipe(duplex=False)
    process = ctx.Process(target=runner_process, args=(opener, session_id, replica, child_end, fresh))
    process.start()
    child_end.close()
    return process, events


def ended(events: Connection) -> tuple[str, ...]:
    """Skip event names; the runner's closing tuple."""
    while True:
        assert events.poll(EVENT_SECONDS), "a runner sent nothing"
        event = events.recv()
        if isinstance(event, tuple):
            return tuple(str(part) for part in event)


# --- Checks -------------------------------------------------------------------------------


def summaries(messages: Sequence[agent.Message]) -> list[tuple[int, agent.Content]]:
    """Every compaction block with its message's index; each must be whole and alone in a user message."""
    found = []
    for index, message in enumerate(messages):
        blocks = [b for b in message.content if b.type is agent.ContentType.COMPACTION]
        if not blocks:
            continue
        assert message.role is agent.Role.USER and len(message.content) == 1, f"message {index}: {message}"
        assert SUMMARY.fullmatch(blocks[0].text), f"message {index}: a summary stored in part: {blocks[0].text!r}"
        found.append((index, blocks[0]))
    return found


def check_conversation(messages: Sequence[agent.Message]) -> None:
    """Summaries left out, ``messages`` is the conversation so far, every message once, in order; and each
    summary covers a cut before an assistant message, more messages than the summary before it."""
    marks = summaries(messages)
    covers = [block.covers for _, block in marks]
    assert covers == sorted(set(covers)), f"two summaries of one cut, or a cut going back: {covers}"
    for index, block in marks:
        assert block.covers < index and messages[block.covers].role is agent.Role.ASSISTANT, (index, block.covers)
    plain = [m for i, m in enumerate(messages) if i not in {i for i, _ in marks}]
    assert plain and plain[0] == agent.Message.user(FIRST), plain[:1]
    for k, message in enumerate(plain[1:]):
        n = k // 2
        if k % 2 == 0:
            expected = call(n) if n < ROUNDS else agent.Message.assistant(f"done after {n} pages")
            assert message == expected, f"message {k + 1} of the conversation: {message}"
        else:
            assert [(b.type, b.tool_use_id, b.text) for b in message.content] == [
                (agent.ContentType.TOOL_RESULT, f"call-{n}", f"page {n}: {PAGE}")
            ], f"message {k + 1} of the conversation: {message}"


# --- Trials -------------------------------------------------------------------------------


@attrs.define
class CompactionTally:
    """What the compaction kill trials of one backend saw."""

    trials: int = 0
    killed: int = 0
    finished_first: int = 0
    resumes: int = 0
    summaries_before_kill: int = 0
    summaries_after_resume: int = 0
    kill_points: Counter[str] = attrs.Factory(Counter)

    def __str__(self) -> str:
        points = ", ".join(f"{name} {count}" for name, count in sorted(self.kill_points.items()))
        return (
            f"{self.trials} trials ({self.killed} killed, {self.finished_first} finished first), "
            f"{self.resumes} resumes, {self.summaries_before_kill} summaries stored before the kills, "
            f"{self.summaries_after_resume} in the final transcripts; killed in: {points}"
        )


def compaction_kill_trials(opener: Opener, trials: int, seed: int) -> CompactionTally:
    """Run ``trials`` trials against the store ``opener`` opens; raise, naming seed and trial, on the first failure."""
    ctx = context()
    tally = CompactionTally()
    with opener() as store:
        for trial in range(trials):
            rng = random.Random(seed * 100_003 + trial)
            session_id = f"compact-kill-{os.getpid()}-{rng.getrandbits(32):08x}-{trial}"
            try:
                one_trial(ctx, opener, store, rng, session_id, tally)
            except Exception as error:
                raise AssertionError(f"compaction kill trial {trial} failed (seed {seed}: replay with it)") from error
    return tally


def one_trial(
    ctx: multiprocessing.context.ForkServerContext,
    opener: Opener,
    store: agent.RunStore,
    rng: random.Random,
    session_id: str,
    tally: CompactionTally,
) -> None:
    tally.trials += 1
    point = rng.choice(["Summarizing", "Compacted"])
    nth, delay = rng.randint(1, 2), rng.uniform(0, 0.006)
    runner, events = start(ctx, opener, session_id, "first", fresh=True)
    seen, end = 0, None
    while end is None:
        assert events.poll(EVENT_SECONDS), "the runner sent nothing"
        event = events.recv()
        if isinstance(event, tuple):
            end = event
        elif event == point:
            seen += 1
            if seen == nth:
                time.sleep(delay)  # a random instant after the chosen event, not a wait for a state
                kill(runner)
                break
    runner.join(10)
    if end is None and runner.exitcode == 0:  # it finished just before the kill
        end = ended(events)
    if end is not None:
        assert end[:2] == ("finished", "end_turn"), end
        tally.finished_first += 1
    else:
        assert runner.exitcode == -signal.SIGKILL, runner.exitcode
        tally.killed += 1
        tally.kill_points[point] += 1
        wait_until(lambda: store.info(session_id).state in SETTLED, "the killed run's lease to lapse")
    before = store.messages(session_id)
    if before:
        check_conversation(before[:-1] if before[-1].role is agent.Role.ASSISTANT else before)
    tally.summaries_before_kill += len(summaries(before))
    final = before
    if end is None:  # the resume is never killed: it finishes the conversation
        resumer, resumer_events = start(ctx, opener, session_id, "resumer", fresh=False)
        done = ended(resumer_events)
        resumer.join(10)
        assert done[:2] == ("finished", "end_turn"), done
        tally.resumes += 1
        final = store.messages(session_id)
        # Its first request started at the last summary it found, or the one it added before it.
        at = last_compaction(final[: len(before) + 1])
        if at is not None:
            head = request_messages(final[: len(before) + 1], at)[0].content[0]
            assert list(done[2:]) == [head.type.value, head.text], (done[2:], head)
        else:
            assert done[2] == agent.ContentType.TEXT.value, done
    assert final[: len(before)] == before, "a message stored before the kill changed or went away"
    check_conversation(final)
    assert final[-1] == agent.Message.assistant(f"done after {ROUNDS} pages"), final[-1]
    tally.summaries_after_resume += len(summaries(final))
    at = last_compaction(final)
    assert at is not None, "the conversation never compacted"
    request = request_messages(final, at)
    assert request[0].content[0] == final[at].content[0], "a request built from it does not start at the last summary"
    info = store.info(session_id)
    assert info.state is agent.RunState.FINISHED, info
