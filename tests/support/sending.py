"""Kill tests for ``Runner.send``: a text that ``send`` acknowledged is answered once, whoever dies.

Two *sender* processes, two replicas of a chat view, send texts to one conversation from
three threads each through ``Runner.send``, and report to the test each text whose ``send``
returned (it was *acknowledged*). The test SIGKILLs one of them at a random instant (a
random number of its acknowledgements in, plus a random few milliseconds), so kills land
inside sends, inside the runs they start or steer, in saves and model requests. The other
sends all its texts and waits for the runs it started. Once the dead one's lease has
lapsed, a *resumer* runs the conversation if anything waits, as ``examples/resumer.py`` does.

Every acknowledged text must then be in the transcript exactly once or still pending before
the resume, and in the transcript exactly once after it, with the model's answer last.
Processes come from a forkserver that has imported the library already.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from multiprocessing.connection import Connection
from typing import Any

import attrs

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from tests.support.crashes import kill, wait_until

Opener = Callable[[], AbstractContextManager[Any]]

SENDERS = 2
THREADS = 3
TEXTS = 3  # per thread
LEASE = 1.2  # short, so the dead sender's session lapses soon; long enough for a loaded machine's heartbeats
MAX_STEPS = 50
EVENT_SECONDS = 60.0


def context() -> multiprocessing.context.ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["agentsessions", "agentsessions.endpoints", "tests.support.sending"])
    return ctx


def answer(_: agent.ModelRequest) -> agent.Message:
    """The scripted model: an answer after 1-4 ms, a window for kills to land in."""
    time.sleep(random.uniform(0.001, 0.004))
    return agent.Message.assistant("ok")


def spec(store: agent.RunStore, session_id: str) -> agent.Spec:
    return agent.Spec(session=agent.open(session_id, store), max_steps=MAX_STEPS, lease=LEASE)


def sender_process(
    opener: Opener,
    session_id: str,
    replica: str,
    texts: list[list[str]],
    events: Connection,
    go: Any,
    if_busy: str = "steer",
) -> None:
    """Send each thread's texts in order, reporting ("ack", text) as each ``send`` returns; then wait for the runs.

    A text ``send`` refused (``if_busy="reject"``, ``SessionBusyError``) is reported ("refused", text).
    """
    lock = threading.Lock()
    started: list[agent.Run] = []

    def report(event: tuple[str, str]) -> None:
        with lock:
            events.send(event)

    with opener() as store:
        runner = agent.Runner(replica=replica)

        def sender(mine: list[str]) -> None:
            for text in mine:
                try:
                    run = runner.send(
                        spec(store, session_id), text, ScriptedEndpoint([answer] * MAX_STEPS), if_busy=if_busy
                    )
                except agent.SessionBusyError:
                    report(("refused", text))
                    continue
                except Exception as error:
                    report(("error", f"send {text!r}: {error!r}"))
                    return
                report(("ack", text))
                if run is not None:
                    started.append(run)
                time.sleep(random.uniform(0, 0.003))

        threads = [threading.Thread(target=sender, args=(mine,)) for mine in texts]
        go.wait(EVENT_SECONDS)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(EVENT_SECONDS)
        for run in started:
            try:
                run.wait(EVENT_SECONDS)
            except agent.RunError as error:
                # A run of this process whose lease lapsed under load, taken over by another send:
                # what it held is the taker's now. Counted, not hidden; any other failure is an error.
                kind = "superseded" if isinstance(error.__cause__, agent.ConflictError) else "error"
                report((kind, f"a run failed: {error.__cause__!r}"))
        wait_for_followers(report)
        report(("done", ""))


def wait_for_followers(report: Callable[[tuple[str, str]], None]) -> None:
    """Wait for the runs this process started on its own: those answering texts queued while a run was live.

    A run starts its follower before its ``wait()`` returns, so once every live run is done
    no follower is left to start.
    """
    from agentsessions.runner import _live_runs

    deadline = time.monotonic() + EVENT_SECONDS
    while time.monotonic() < deadline:
        live = [run for run in list(_live_runs) if not run.done]
        if not live:
            return
        for run in live:
            try:
                run.wait(max(0.0, deadline - time.monotonic()))
            except agent.RunError as error:
                kind = "superseded" if isinstance(error.__cause__, agent.ConflictError) else "error"
                report((kind, f"a follower failed: {error.__cause__!r}"))
            except TimeoutError:
                break
    report(("error", "runs still live after the senders finished"))


@attrs.define
class SendTally:
    """What the send kill trials of one backend saw."""

    trials: int = 0
    killed: int = 0
    texts: int = 0  # texts the senders were given, sent or not (a killed sender leaves the rest unsent)
    stored: int = 0  # user texts in the final transcripts, every copy, acknowledged or not
    acknowledged: int = 0
    answered_once: int = 0
    lost: int = 0
    doubled: int = 0
    pending_at_resume: int = 0
    resumed: int = 0
    refused: int = 0  # texts send refused (if_busy="reject"): stored nowhere
    superseded: int = 0  # survivors' runs taken over after their lease lapsed on a loaded machine
    broken: list[str] = attrs.Factory(list)  # each trial that lost or doubled a text, and what

    def __str__(self) -> str:
        return (
            f"{self.trials} trials ({self.killed} senders killed), {self.texts} texts given to the senders, "
            f"{self.acknowledged} acknowledged and {self.refused} refused, {self.stored} stored: "
            f"{self.answered_once} answered once, {self.lost} lost, {self.doubled} doubled; "
            f"{self.pending_at_resume} still pending for the resumer, which ran {self.resumed} times; "
            f"{self.superseded} runs superseded"
        )


def send_trials(opener: Opener, trials: int, seed: int, if_busy: str = "steer") -> SendTally:
    """Run ``trials`` send kill trials against the store ``opener`` opens, every text sent with ``if_busy``.

    A text lost or doubled is counted (``SendTally.broken`` names the trial); anything else
    amiss raises at once, naming the seed and the trial.
    """
    ctx = context()
    tally = SendTally()
    with opener() as store:
        for trial in range(trials):
            rng = random.Random(seed * 100_003 + trial)
            try:
                one_send_trial(ctx, opener, store, rng, trial, tally, if_busy)
            except Exception as error:
                raise AssertionError(f"send trial {trial} failed (seed {seed}: replay with that seed)") from error
    return tally


def one_send_trial(
    ctx: multiprocessing.context.ForkServerContext,
    opener: Opener,
    store: agent.RunStore,
    rng: random.Random,
    trial: int,
    tally: SendTally,
    if_busy: str = "steer",
) -> None:
    session_id = f"send-{os.getpid()}-{rng.getrandbits(32):08x}-{trial}"
    texts = [[[f"text {trial}.{p}.{t}.{n}" for n in range(TEXTS)] for t in range(THREADS)] for p in range(SENDERS)]
    go = ctx.Event()
    pipes, senders = [], []
    for p in range(SENDERS):
        pipe, child = ctx.Pipe(duplex=False)
        process = ctx.Process(
            target=sender_process, args=(opener, session_id, f"sender-{p}", texts[p], child, go, if_busy)
        )
        process.start()
        child.close()
        pipes.append(pipe)
        senders.append(process)
    victim, kill_after = rng.randrange(SENDERS), rng.randint(0, THREADS * TEXTS)
    acked, errors, superseded, refused = collect(pipes, senders, go, victim, kill_after, rng)
    tally.texts += SENDERS * THREADS * TEXTS
    tally.superseded += superseded
    tally.refused += len(refused)
    survivors = [p for p in range(SENDERS) if p != victim]
    assert not [e for p in survivors for e in errors[p]], f"a survivor failed: {errors}"
    tally.trials += 1
    tally.killed += senders[victim].exitcode != 0
    wait_until(lambda: store.info(session_id).state is not agent.RunState.RUNNING, "the dead sender's lease to lapse")
    before = Counter(user_texts(store.messages(session_id)) + [s.text for s in store.peek_steers(session_id)])
    if amiss := {text: before[text] for text in acked if before[text] != 1}:
        tally.broken.append(f"trial {trial}, before the resume (text: times kept): {amiss}")
    info = store.info(session_id)
    if info.state is agent.RunState.STALLED or info.pending_steers:
        tally.pending_at_resume += info.pending_steers
        tally.resumed += 1
        agent.Runner(replica="resumer").run(spec(store, session_id), agent.Resume(), ScriptedEndpoint([answer] * 64))
    account(store, session_id, acked, tally, trial)
    if stored := [text for text in refused if text in set(user_texts(store.messages(session_id)))]:
        tally.broken.append(f"trial {trial}: texts refused and answered all the same: {stored}")


def collect(
    pipes: Sequence[Connection],
    senders: Sequence[multiprocessing.process.BaseProcess],
    go: Any,
    victim: int,
    kill_after: int,
    rng: random.Random,
) -> tuple[list[str], list[list[str]], int, list[str]]:
    """Start the senders, kill ``victim`` after ``kill_after`` of its acknowledgements; every ack, error and refusal."""
    superseded: list[str] = []
    refused: list[tuple[int, str]] = []
    acked: list[list[str]] = [[] for _ in senders]
    errors: list[list[str]] = [[] for _ in senders]
    done = [False for _ in senders]
    killed = False
    go.set()
    deadline = time.monotonic() + EVENT_SECONDS
    while not all(done[p] for p in range(len(senders)) if p != victim) or not (killed or done[victim]):
        assert time.monotonic() < deadline, f"the senders did not finish: acked {acked}, errors {errors}"
        heard = len(acked[victim]) + sum(1 for who, _ in refused if who == victim)  # answers its sends got
        if not killed and not done[victim] and heard >= kill_after:
            time.sleep(rng.uniform(0, 0.004))  # a random instant after the chosen ack
            kill(senders[victim])
            killed = True
        for p, pipe in enumerate(pipes):
            if not done[p] and not (p == victim and killed) and pipe.poll(0.002):
                read(pipe, p, acked, errors, done, superseded, refused)
    for p, pipe in enumerate(pipes):  # what the victim sent before it died is acknowledged too
        while not done[p] and pipe.poll(0):
            try:
                read(pipe, p, acked, errors, done, superseded, refused)
            except (EOFError, OSError):
                break
        senders[p].join(EVENT_SECONDS)
    return [text for texts in acked for text in texts], errors, len(superseded), [text for _, text in refused]


def read(
    pipe: Connection,
    p: int,
    acked: list[list[str]],
    errors: list[list[str]],
    done: list[bool],
    superseded: list[str],
    refused: list[tuple[int, str]],
) -> None:
    kind, detail = pipe.recv()
    if kind == "ack":
        acked[p].append(detail)
    elif kind == "refused":
        refused.append((p, detail))
    elif kind == "error":
        errors[p].append(detail)
    elif kind == "superseded":
        superseded.append(detail)
    else:
        done[p] = True


def user_texts(messages: Sequence[agent.Message]) -> list[str]:
    texts = agent.ContentType.TEXT
    return [c.text for m in messages if m.role is agent.Role.USER for c in m.content if c.type is texts]


def account(store: agent.RunStore, session_id: str, acked: list[str], tally: SendTally, trial: int) -> None:
    """After the resume: every acknowledged text answered exactly once, nothing pending, the answer last."""
    transcript = store.messages(session_id)
    counts = Counter(user_texts(transcript))
    lost = [text for text in acked if counts[text] == 0]
    doubled = [text for text, count in counts.items() if count > 1]
    tally.acknowledged += len(acked)
    tally.stored += sum(counts.values())
    tally.answered_once += sum(1 for text in acked if counts[text] == 1)
    tally.lost += len(lost)
    tally.doubled += len(doubled)
    if lost or doubled:
        tally.broken.append(f"trial {trial}: lost {lost}, doubled {doubled}")
    info = store.info(session_id)
    assert (info.state, info.pending_steers) == (agent.RunState.FINISHED, 0), info
    assert transcript[-1].role is agent.Role.ASSISTANT, transcript[-1]
