"""A chat view's retries of ``Runner.send(..., key=...)`` from two processes, counted.

Two *sender* processes, two replicas of a web view behind a load balancer, each get every
request of one conversation and send each text several times with the request's key, as
a view does when it lost the answer to a send that had in fact been committed. Every text
must be stored once and answered once: one model answer after it, and no answer to
nothing new (a run started by a retry after another run had taken the text would make
one).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from multiprocessing.connection import Connection
from typing import Any

import attrs

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from tests.support.sending import context  # the kill tests' forkserver, which has imported the library

Opener = Callable[[], AbstractContextManager[Any]]

SENDERS = 2
TEXTS = 6
ATTEMPTS = 3  # sends of each text by each sender
MAX_STEPS = 20
EVENT_SECONDS = 60.0


def answer(request: agent.ModelRequest) -> agent.Message:
    """The scripted model: quotes the last user words after 1-4 ms, a window for the races."""
    time.sleep(random.uniform(0.001, 0.004))
    return agent.Message.assistant(f"answer to {request.messages[-1].text}")


def spec(store: agent.RunStore, session_id: str) -> agent.Spec:
    return agent.Spec(session=agent.open(session_id, store), max_steps=MAX_STEPS, lease=5.0)


def sender_process(
    opener: Opener, session_id: str, replica: str, seed: int, reports: Connection, go: Any, keyed: bool = True
) -> None:
    """Send each text ``ATTEMPTS`` times with its key (none unless ``keyed``); report ("sent", n), ("requests", n)."""
    rng = random.Random(seed)
    started: list[agent.Run] = []
    requests = 0
    lock = threading.Lock()

    def counted(request: agent.ModelRequest) -> agent.Message:
        nonlocal requests
        with lock:
            requests += 1
        return answer(request)

    with opener() as store:
        runner = agent.Runner(replica=replica)
        go.wait(EVENT_SECONDS)
        sent = 0
        for n in range(TEXTS):
            for _ in range(ATTEMPTS):
                try:
                    run = runner.send(
                        spec(store, session_id),
                        f"text {n}",
                        ScriptedEndpoint([counted] * MAX_STEPS),
                        key=f"req-{n}" if keyed else None,
                    )
                except Exception as error:
                    reports.send(("error", f"send of text {n}: {error!r}"))
                    continue
                sent += 1
                if run is not None:
                    started.append(run)
                time.sleep(rng.uniform(0, 0.003))
        for run in started:
            try:
                run.wait(EVENT_SECONDS)
            except agent.RunError as error:
                reports.send(("error", f"a run failed: {error.__cause__!r}"))
        reports.send(("sent", sent))
        reports.send(("requests", requests))
    reports.send(("done", 0))


@attrs.define
class RetryTally:
    """What the retry trials of one backend saw, summed over trials."""

    trials: int = 0
    attempts: int = 0  # send calls that returned
    texts: int = 0  # distinct texts sent
    stored: int = 0  # user texts in the transcripts
    answered: int = 0  # texts followed by exactly one model answer
    extra_answers: int = 0  # model answers to nothing new
    requests: int = 0  # model requests the senders' runs made
    errors: list[str] = attrs.Factory(list)

    def __str__(self) -> str:
        return (
            f"{self.trials} trials: {self.attempts} sends of {self.texts} texts, {self.stored} stored, "
            f"{self.answered} answered once, {self.extra_answers} answers to nothing new, "
            f"{self.requests} model requests"
        )


def retry_trials(opener: Opener, trials: int, seed: int, *, keyed: bool = True) -> RetryTally:
    """Run ``trials`` trials against the store ``opener`` opens; a failure names the seed and trial.

    ``keyed=False`` sends without keys, for comparison: then retries store texts again.
    """
    ctx = context()
    tally = RetryTally()
    with opener() as store:
        for trial in range(trials):
            try:
                one_trial(ctx, opener, store, seed * 1_000 + trial, tally, keyed)
            except Exception as error:
                raise AssertionError(f"retry trial {trial} failed (seed {seed}: replay with that seed)") from error
    return tally


def one_trial(
    ctx: multiprocessing.context.ForkServerContext,
    opener: Opener,
    store: agent.RunStore,
    seed: int,
    tally: RetryTally,
    keyed: bool,
) -> None:
    session_id = f"retry-{os.getpid()}-{seed}"
    go = ctx.Event()
    pipes, senders = [], []
    for p in range(SENDERS):
        pipe, child = ctx.Pipe(duplex=False)
        process = ctx.Process(
            target=sender_process, args=(opener, session_id, f"sender-{p}", seed * 10 + p, child, go, keyed)
        )
        process.start()
        child.close()
        pipes.append(pipe)
        senders.append(process)
    go.set()
    for pipe in pipes:
        for kind, value in _reports(pipe):
            if kind == "error":
                tally.errors.append(str(value))
            elif kind == "sent":
                tally.attempts += int(value)
            elif kind == "requests":
                tally.requests += int(value)
    for process in senders:
        process.join(EVENT_SECONDS)
        assert process.exitcode == 0, f"a sender exited with {process.exitcode}"
    info = store.info(session_id)
    assert (info.state, info.pending_steers) == (agent.RunState.FINISHED, 0), info
    count(store.messages(session_id), tally)
    tally.trials += 1
    store.delete(session_id)


def _reports(pipe: Connection) -> list[tuple[str, str | int]]:
    got: list[tuple[str, str | int]] = []
    deadline = time.monotonic() + 2 * EVENT_SECONDS
    while time.monotonic() < deadline:
        if pipe.poll(1.0):
            kind, value = pipe.recv()
            if kind == "done":
                return got
            got.append((kind, value))
    raise AssertionError("a sender did not finish in time")


def count(transcript: list[agent.Message], tally: RetryTally) -> None:
    """Add to ``tally`` what ``transcript`` holds: texts stored, texts answered once, answers to nothing new."""
    said: Counter[str] = Counter()
    answers_after: Counter[str] = Counter()
    last_words: list[str] = []
    for message in transcript:
        if message.role is agent.Role.USER:
            last_words = [block.text for block in message.content if block.type is agent.ContentType.TEXT]
            said.update(last_words)
        elif last_words:
            answers_after.update(last_words)
            last_words = []
        else:
            tally.extra_answers += 1  # an answer with no user words since the last one
    tally.texts += TEXTS
    tally.stored += sum(said.values())
    tally.answered += sum(1 for n in range(TEXTS) if said[f"text {n}"] == 1 and answers_after[f"text {n}"] == 1)
