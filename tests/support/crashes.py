"""Kill tests: real processes, a real SIGKILL at a random instant, then every steer accounted for.

A *runner* process runs one conversation (a scripted model that answers after a few
milliseconds, a tool whose side effect is a line in a file) over a real store, reporting
each event to the test through a pipe. A *peer* process, another replica, adds steers
while the runner works and resumes the conversation afterwards. The test kills the runner
with SIGKILL a random number of events in, plus a random few milliseconds, so kills land
inside taking steers, inside saves, between them, during model requests and tool calls.

Afterwards, for each trial: the stored transcript is one the run could have saved; every
steer the peer added is exactly once in the transcript or still pending; the session is
``STALLED`` once its lease has run out; and the peer's resume completes with every steer
exactly once in the final transcript. Processes come from a forkserver that has imported
the library already, so a trial costs milliseconds of process start, not a new interpreter.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, suppress
from multiprocessing.connection import Connection
from typing import Any

import attrs

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.loop import IN_DOUBT

Opener = Callable[[], AbstractContextManager[Any]]

TOOL_ROUNDS = 4  # the scripted model calls the tool this many times, then answers
LEASE = 0.6
FIRST = "go"
EVENT_SECONDS = 30.0  # a runner silent for this long is taken for stuck, and the trial fails
# After a kill: the lease lapses (STALLED), or the run had released its session (FINISHED)
# just before, since the kill lands a few milliseconds after the last event the test read.
SETTLED = (agent.RunState.STALLED, agent.RunState.FINISHED)


def context() -> multiprocessing.context.ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["agentsessions", "agentsessions.endpoints", "tests.support.crashes"])
    return ctx


# --- The conversation every process runs ------------------------------------------------


def reply(request: agent.ModelRequest) -> agent.Message:
    """The scripted model: a tool call per round until TOOL_ROUNDS, then an answer. Takes 1-4 ms."""
    time.sleep(random.uniform(0.001, 0.004))  # the model's latency: a window for kills to land in
    rounds = sum(1 for m in request.messages if m.role is agent.Role.ASSISTANT)
    if rounds < TOOL_ROUNDS:
        use = agent.Content.tool_use(f"call-{rounds}", "work", json.dumps({"n": rounds}))
        return agent.Message(agent.Role.ASSISTANT, [use])
    return agent.Message.assistant(f"done after {rounds} rounds")


def spec(store: agent.RunStore, session_id: str, side_effects: str, *, journal: bool = False) -> agent.Spec:
    @agent.tool
    def work(n: int) -> str:
        """Do round n of the work (its side effect: a line in a file)."""
        with open(side_effects, "a") as out:
            out.write(f"{session_id} {n}\n")
        return f"did {n}"

    session = agent.open(session_id, store)
    return agent.Spec(tools=[work], session=session, max_steps=4 * TOOL_ROUNDS, lease=LEASE, journal=journal)


def check_shape(messages: Sequence[agent.Message]) -> list[str]:
    """Check that ``messages`` is a transcript this conversation can have saved; return its steers."""
    assert messages, "the transcript is empty"
    assert messages[0].role is agent.Role.USER and messages[0].content[0].text == FIRST, messages[0]
    steers: list[str] = []
    expected_results: list[str] = []
    rounds = 0
    for index, message in enumerate(messages):
        blocks = list(message.content)
        if message.role is agent.Role.ASSISTANT:
            assert not expected_results, f"message {index}: an answer before the tool results"
            uses = [b for b in blocks if b.type is agent.ContentType.TOOL_USE]
            expected = reply_for(rounds)
            rounds += 1
            assert message == expected or message.text.startswith("done after"), f"message {index}: {message}"
            expected_results = [use.id for use in uses]
            continue
        if index > 0:
            results = [b for b in blocks if b.type is agent.ContentType.TOOL_RESULT]
            assert [r.tool_use_id for r in results] == expected_results, f"message {index}: wrong tool results"
            blocks = [b for b in blocks if b.type is not agent.ContentType.TOOL_RESULT]
        else:
            blocks = blocks[1:]
        expected_results = []
        steers += [b.text for b in blocks]
    return steers


def reply_for(rounds: int) -> agent.Message:
    if rounds < TOOL_ROUNDS:
        use = agent.Content.tool_use(f"call-{rounds}", "work", json.dumps({"n": rounds}))
        return agent.Message(agent.Role.ASSISTANT, [use])
    return agent.Message.assistant(f"done after {rounds} rounds")


# --- Processes --------------------------------------------------------------------------


def runner_process(
    opener: Opener,
    session_id: str,
    replica: str,
    side_effects: str,
    events: Connection,
    journal: bool = False,
    go: Any = None,
    answer_when: Any = None,
    gate_round: int = 0,
) -> None:
    """Run the conversation (or resume it, when the store has it), reporting every event's name.

    With ``go`` (an Event), start fresh when it is set, as one of several processes at once;
    with ``answer_when`` (an Event), the model's answer in round ``gate_round`` waits until
    it is set. The test may kill this at any instant.
    """

    def answer(request: agent.ModelRequest) -> agent.Message:
        rounds = sum(1 for m in request.messages if m.role is agent.Role.ASSISTANT)
        if answer_when is not None and rounds == gate_round:
            answer_when.wait(EVENT_SECONDS)
        return reply(request)

    with opener() as store:
        messages = store.messages(session_id) if go is None else []
        messages = messages or [agent.Message.user(FIRST)]
        if messages[-1].role is agent.Role.ASSISTANT and not messages[-1].tool_uses:
            messages.append(agent.Message.user("continue"))
        if go is not None:
            go.wait(EVENT_SECONDS)
        try:
            result = agent.Runner(replica=replica).run(
                spec(store, session_id, side_effects, journal=journal),
                messages,
                ScriptedEndpoint([answer] * 64),
                lambda event: events.send(type(event).__name__),
            )
        except agent.SessionBusyError:
            events.send(("busy", ""))
        except agent.RunError as error:
            events.send(("failed", type(error.__cause__).__name__))
        else:
            events.send(("finished", result.stop_reason))


def peer_process(opener: Opener, side_effects: str, commands: Connection) -> None:
    """Another replica: adds steers and resumes conversations when told to, answering each command."""
    with opener() as store:
        while True:
            command = commands.recv()
            if command[0] == "stop":
                return
            if command[0] == "steer":
                _, session_id, text = command
                commands.send(("added", text, str(agent.open(session_id, store).steer(text))))
            elif command[0] == "resume":
                commands.send(resume(store, command[1], side_effects))


def resume(store: agent.RunStore, session_id: str, side_effects: str) -> tuple[str, str]:
    """Resume a conversation from what the store holds, as a replica that never ran it does.

    A run killed before its first save left nothing: the conversation starts over.
    """
    messages = store.messages(session_id) or [agent.Message.user(FIRST)]
    if messages and messages[-1].role is agent.Role.ASSISTANT:
        messages.append(agent.Message.user("continue"))
    try:
        result = agent.Runner(replica="resumer").run(
            spec(store, session_id, side_effects), messages, ScriptedEndpoint([reply] * 64)
        )
    except agent.AgentSessionsError as error:
        return ("error", repr(error))
    return ("resumed", result.stop_reason)


# --- Trials -----------------------------------------------------------------------------


@attrs.define
class Tally:
    """What the kill trials of one backend saw."""

    trials: int = 0
    killed: int = 0
    finished_first: int = 0
    steers_added: int = 0
    lost: int = 0
    doubled: int = 0
    resumed: int = 0
    side_effects: int = 0
    kill_points: Counter[str] = attrs.Factory(Counter)

    def __str__(self) -> str:
        points = ", ".join(f"{name} {count}" for name, count in sorted(self.kill_points.items()))
        return (
            f"{self.trials} trials ({self.killed} killed, {self.finished_first} finished first), "
            f"{self.steers_added} steers added, {self.lost} lost, {self.doubled} doubled, "
            f"{self.resumed} resumes completed, {self.side_effects} tool side effects; killed after: {points}"
        )


class Peer:
    """The peer process and the pipe to it."""

    def __init__(self, ctx: multiprocessing.context.ForkServerContext, opener: Opener, side_effects: str) -> None:
        self.pipe, child = ctx.Pipe()
        self.process = ctx.Process(target=peer_process, args=(opener, side_effects, child), daemon=True)
        self.process.start()
        self.waiting = 0

    def steer(self, session_id: str, text: str) -> None:
        self.pipe.send(("steer", session_id, text))
        self.waiting += 1

    def settle(self) -> list[tuple[str, str, str]]:
        """Wait for every steer sent so far to be added; their (verb, text, state) answers."""
        answers = []
        for _ in range(self.waiting):
            assert self.pipe.poll(EVENT_SECONDS), "the peer did not answer"
            answers.append(self.pipe.recv())
        self.waiting = 0
        return answers

    def resume(self, session_id: str) -> tuple[str, str]:
        self.pipe.send(("resume", session_id))
        assert self.pipe.poll(60), "the peer's resume did not finish"
        answer: tuple[str, str] = self.pipe.recv()
        return answer

    def stop(self) -> None:
        self.pipe.send(("stop",))
        self.process.join(10)


def kill_trials(opener: Opener, trials: int, seed: int, workdir: str) -> Tally:
    """Run ``trials`` kill trials against the store ``opener`` opens; raise on the first broken promise."""
    ctx = context()
    side_effects = os.path.join(workdir, "side-effects.log")
    tally = Tally()
    peer = Peer(ctx, opener, side_effects)
    try:
        with opener() as store:
            for trial in range(trials):
                rng = random.Random(seed * 100_003 + trial)
                try:
                    one_trial(ctx, opener, store, peer, rng, trial, tally, side_effects)
                except Exception as error:
                    raise AssertionError(f"kill trial {trial} failed (seed {seed}: replay with that seed)") from error
    finally:
        peer.stop()
    with open(side_effects) as lines:
        tally.side_effects = sum(1 for _ in lines)
    return tally


def one_trial(
    ctx: multiprocessing.context.ForkServerContext,
    opener: Opener,
    store: agent.RunStore,
    peer: Peer,
    rng: random.Random,
    trial: int,
    tally: Tally,
    side_effects: str,
) -> None:
    session_id = f"kill-{os.getpid()}-{rng.getrandbits(32):08x}-{trial}"
    steers = [f"steer {trial}.{k}" for k in range(rng.randint(2, 5))]
    kill_after = rng.randint(1, 40)
    steer_at = sorted(rng.sample(range(1, 40), len(steers) - 1))
    peer.steer(session_id, steers[0])  # one waits before the run starts
    peer.settle()
    events, child_end = ctx.Pipe(duplex=False)
    runner = ctx.Process(target=runner_process, args=(opener, session_id, "doomed", side_effects, child_end))
    runner.start()
    child_end.close()
    seen, last, ended = 0, "", False
    while True:
        assert events.poll(EVENT_SECONDS), f"the runner sent nothing for {EVENT_SECONDS} s after {last!r}"
        event = events.recv()
        if isinstance(event, tuple):
            ended = True
            assert event[0] == "finished", event
            break
        seen, last = seen + 1, event
        for k, at in enumerate(steer_at, start=1):
            if at == seen:
                peer.steer(session_id, steers[k])
        if seen == kill_after:
            time.sleep(rng.uniform(0, 0.004))  # a random instant after the chosen event, not a wait for a state
            kill(runner)
            break
    runner.join(10)
    if not ended and runner.exitcode == 0:  # it finished just before the kill
        ended = outcome(events) == ("finished", "end_turn")
    for k, at in enumerate(steer_at, start=1):  # steers planned for after the kill go in now
        if at > seen:
            peer.steer(session_id, steers[k])
    peer.settle()
    tally.trials += 1
    tally.steers_added += len(steers)
    if ended or runner.exitcode == 0:
        tally.finished_first += 1
    else:
        assert runner.exitcode == -signal.SIGKILL, runner.exitcode
        tally.killed += 1
        tally.kill_points[last] += 1
        try:
            wait_until(lambda: store.info(session_id).state in SETTLED, "the session to stall")
        except AssertionError as error:
            raise AssertionError(f"{error}: {store.info(session_id)} (killed after {seen} events, {last})") from None
    account(store, session_id, steers, tally)
    verb, detail = peer.resume(session_id)
    assert verb == "resumed", detail
    tally.resumed += 1
    final = [text for text in check_shape(store.messages(session_id)) if text != "continue"]
    assert sorted(final) == sorted(steers), f"after the resume: {final} vs {steers}"
    info = store.info(session_id)
    assert (info.state, info.pending_steers) == (agent.RunState.FINISHED, 0), info


def account(store: agent.RunStore, session_id: str, steers: list[str], tally: Tally) -> None:
    """Every steer exactly once in the stored transcript or still pending; count what is not."""
    saved = check_shape(store.messages(session_id)) if store.messages(session_id) else []
    pending = [steer.text for steer in store.peek_steers(session_id)]
    counts = Counter(saved + pending)
    lost = [s for s in steers if counts[s] == 0]
    doubled = [s for s in steers if counts[s] > 1]
    tally.lost += len(lost)
    tally.doubled += len(doubled)
    assert not lost and not doubled, f"lost {lost}, doubled {doubled}; saved {saved}, pending {pending}"


def kill(process: multiprocessing.process.BaseProcess) -> None:
    """SIGKILL ``process``; one that has just exited by itself is left as it is (its exit code tells)."""
    with suppress(ProcessLookupError):
        os.kill(process.pid or 0, signal.SIGKILL)
    process.join(10)


def wait_until(probe: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# --- Two processes, one session -----------------------------------------------------------


def outcome(events: Connection) -> tuple[str, str]:
    """Skip a runner's event names; return how it ended."""
    while True:
        assert events.poll(EVENT_SECONDS), "a runner sent nothing"
        event = events.recv()
        if isinstance(event, tuple):
            return (str(event[0]), str(event[1]))


def start_runner(
    ctx: multiprocessing.context.ForkServerContext,
    opener: Opener,
    session_id: str,
    replica: str,
    side_effects: str,
    journal: bool = False,
    go: Any = None,
    answer_when: Any = None,
    gate_round: int = 0,
) -> tuple[multiprocessing.process.BaseProcess, Connection]:
    events, child_end = ctx.Pipe(duplex=False)
    args = (opener, session_id, replica, side_effects, child_end, journal, go, answer_when, gate_round)
    runner = ctx.Process(target=runner_process, args=args)
    runner.start()
    child_end.close()
    return runner, events


def same_session_trials(opener: Opener, trials: int, seed: int, workdir: str) -> Counter[str]:
    """Two runners start one session at once; then one hangs past its lease and another takes over.

    Returns how the runs ended, counted: at once, exactly one ran and the other was refused
    with SessionBusyError; after a takeover, the hung run failed with ConflictError when it
    woke. In every trial no steer is lost or doubled.
    """
    ctx = context()
    side_effects = os.path.join(workdir, "side-effects.log")
    seen: Counter[str] = Counter()
    peer = Peer(ctx, opener, side_effects)
    try:
        with opener() as store:
            for trial in range(trials):
                rng = random.Random(seed * 100_003 + trial)
                try:
                    seen.update(at_once(ctx, opener, store, peer, rng, trial, side_effects))
                    seen.update(takeover(ctx, opener, store, peer, rng, trial, side_effects))
                except Exception as error:
                    raise AssertionError(f"same-session trial {trial} failed (seed {seed})") from error
    finally:
        peer.stop()
    return seen


def at_once(
    ctx: multiprocessing.context.ForkServerContext,
    opener: Opener,
    store: agent.RunStore,
    peer: Peer,
    rng: random.Random,
    trial: int,
    side_effects: str,
) -> list[str]:
    session_id = f"twice-{os.getpid()}-{rng.getrandbits(32):08x}-{trial}"
    steers = [f"steer {trial}.{k}" for k in range(3)]
    go, answer = ctx.Event(), ctx.Event()
    runners = [
        start_runner(ctx, opener, session_id, name, side_effects, go=go, answer_when=answer)
        for name in ("first", "second")
    ]
    go.set()  # both claim at the same instant
    for text in steers:
        peer.steer(session_id, text)
    # The model answers the winner only once the other run has ended, so the runs overlap
    # however the two processes are scheduled, and the loser must have been refused.
    pipes = [events for _, events in runners]
    ends: list[tuple[str, str]] = []
    deadline = time.monotonic() + EVENT_SECONDS
    while not ends:
        assert time.monotonic() < deadline, "neither runner ended"
        ready = [pipe for pipe in pipes if pipe.poll(0.01)]
        for pipe in ready:
            event = pipe.recv()
            if isinstance(event, tuple):
                ends.append((str(event[0]), str(event[1])))
                pipes.remove(pipe)
    answer.set()
    ends = sorted([*ends, outcome(pipes[0])])
    for runner, _ in runners:
        runner.join(10)
    peer.settle()
    assert ends == [("busy", ""), ("finished", "end_turn")], ends
    account(store, session_id, steers, Tally())
    return [f"at once: {ends[0][0]} + {ends[1][0]}"]


def takeover(
    ctx: multiprocessing.context.ForkServerContext,
    opener: Opener,
    store: agent.RunStore,
    peer: Peer,
    rng: random.Random,
    trial: int,
    side_effects: str,
) -> list[str]:
    session_id = f"takeover-{os.getpid()}-{rng.getrandbits(32):08x}-{trial}"
    steers = [f"steer {trial}.{k}" for k in range(3)]
    # Hang it inside a random one of its model requests, where it holds no database lock: the
    # model waits there until the test has stopped the process (events are read late, so
    # without the gate the run could be over before the stop arrives).
    stop_at, answer = rng.randint(1, TOOL_ROUNDS), ctx.Event()
    hung, hung_events = start_runner(
        ctx, opener, session_id, "hung", side_effects, answer_when=answer, gate_round=stop_at - 1
    )
    requests = 0
    while requests < stop_at:
        assert hung_events.poll(EVENT_SECONDS)
        event = hung_events.recv()
        assert not isinstance(event, tuple), event
        requests += event == "ModelRequested"
    os.kill(hung.pid or 0, signal.SIGSTOP)
    try:
        peer.steer(session_id, steers[0])
        peer.settle()
        wait_until(lambda: store.info(session_id).state is agent.RunState.STALLED, "the hung run's lease to lapse")
        taker, taker_events = start_runner(ctx, opener, session_id, "taker", side_effects)
        peer.steer(session_id, steers[1])
        took = outcome(taker_events)
        taker.join(10)
    finally:
        os.kill(hung.pid or 0, signal.SIGCONT)
        # Only now: setting a multiprocessing Event waits for its waiters to wake, and a
        # stopped process never does.
        answer.set()
    peer.steer(session_id, steers[2])
    woke = outcome(hung_events)
    hung.join(10)
    peer.settle()
    assert took == ("finished", "end_turn"), took
    assert woke == ("failed", "ConflictError"), woke
    assert store.info(session_id).holder == "taker"
    account(store, session_id, steers, Tally())
    return [f"takeover: taker {took[0]}, hung run {woke[0]} with {woke[1]}"]


# --- The tool journal across crashes ------------------------------------------------------


@attrs.define
class JournalTally:
    """What the journal's kill trials saw, per backend."""

    conversations: int = 0
    kills: int = 0
    resumes_completed: int = 0
    side_effects: int = 0
    performed_twice: int = 0
    in_doubt: int = 0

    def __str__(self) -> str:
        return (
            f"{self.conversations} conversations, {self.kills} kills, {self.resumes_completed} resumes completed, "
            f"{self.side_effects} side effects, {self.performed_twice} performed twice, "
            f"{self.in_doubt} in-doubt results given"
        )


def settled(
    runner: multiprocessing.process.BaseProcess,
    events: Connection,
    ended: tuple[str, str] | None,
    store: agent.RunStore,
    session_id: str,
) -> bool:
    """After an attempt: ``True`` if the runner finished the conversation; else (killed) once its lease lapsed."""
    runner.join(10)
    if ended is None and runner.exitcode == 0:  # it finished just before the kill
        ended = outcome(events)
    if ended is not None:
        assert ended == ("finished", "end_turn"), ended
        return True
    wait_until(lambda: store.info(session_id).state in SETTLED, "the killed run's lease to lapse")
    return False


def each_trial(
    opener: Opener,
    trials: int,
    seed: int,
    name: str,
    side_effects: str,
    trial: Callable[[agent.RunStore, random.Random, str], None],
) -> None:
    """Run ``trial(store, rng, session_id)`` ``trials`` times, each on a fresh session with its own seeded
    random; a failure names ``name``, the trial and the seed. ``side_effects`` is the tools' log, made empty."""
    open(side_effects, "a").close()
    with opener() as store:
        for n in range(trials):
            rng = random.Random(seed * 100_003 + n)
            session_id = f"{name}-{os.getpid()}-{rng.getrandbits(32):08x}-{n}"
            try:
                trial(store, rng, session_id)
            except Exception as error:
                raise AssertionError(f"{name} trial {n} failed (seed {seed})") from error


def journal_trials(opener: Opener, trials: int, seed: int, workdir: str) -> JournalTally:
    """Conversations with ``journal=True`` killed at random instants and resumed in another process, again
    and again, until a resume finishes; then count each tool call's side effects."""
    ctx = context()
    side_effects = os.path.join(workdir, "journal-side-effects.log")
    tally = JournalTally()

    def trial(store: agent.RunStore, rng: random.Random, session_id: str) -> None:
        journal_conversation(ctx, opener, store, rng, session_id, side_effects, tally)

    each_trial(opener, trials, seed, "journal", side_effects, trial)
    with open(side_effects) as lines:
        effects = Counter(line.strip() for line in lines)
    tally.side_effects = sum(effects.values())
    tally.performed_twice = sum(1 for count in effects.values() if count > 1)
    return tally


def journal_conversation(
    ctx: multiprocessing.context.ForkServerContext,
    opener: Opener,
    store: agent.RunStore,
    rng: random.Random,
    session_id: str,
    side_effects: str,
    tally: JournalTally,
) -> None:
    tally.conversations += 1
    for attempt in range(50):
        runner, events = start_runner(ctx, opener, session_id, f"attempt-{attempt}", side_effects, journal=True)
        kill_after = rng.randint(1, 30) if rng.random() < 0.7 else 10**6
        seen, ended = 0, None
        while ended is None:
            assert events.poll(EVENT_SECONDS), "a runner sent nothing"
            event = events.recv()
            if isinstance(event, tuple):
                ended = event
            else:
                seen += 1
                if seen == kill_after:
                    time.sleep(rng.uniform(0, 0.004))  # a random instant after the chosen event
                    kill(runner)
                    break
        if settled(runner, events, ended, store, session_id):
            break
        tally.kills += 1
    else:
        raise AssertionError("no resume finished in 50 attempts")
    tally.resumes_completed += 1
    messages = store.messages(session_id)
    check_shape(messages)
    tally.in_doubt += sum(
        1 for m in messages for c in m.content if c.type is agent.ContentType.TOOL_RESULT and c.text == IN_DOUBT
    )
