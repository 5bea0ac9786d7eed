"""Running an agent: ``Spec`` says what, ``Runner`` starts it, ``Run`` is the handle."""

from __future__ import annotations

import enum
import threading
from collections.abc import Sequence

import attrs

from agentsessions import events as ev
from agentsessions.endpoint import Endpoint, Usage
from agentsessions.errors import RunError, RunFinishedError
from agentsessions.loop import EventSink, ReactLoop, StopReason
from agentsessions.messages import Message, check_transcript
from agentsessions.session import Session, check_steer
from agentsessions.tools import Tool


class Pattern(enum.StrEnum):
    """How the agent works. ReAct: reason, call tools, read their results, repeat."""

    REACT = "react"


def _tools(value: Sequence[Tool]) -> tuple[Tool, ...]:
    tools = tuple(value)
    for tool in tools:
        if not isinstance(tool, Tool):
            raise TypeError(f"Spec.tools holds Tool objects (see @agentsessions.tool), got {type(tool).__name__}")
    names = [t.name for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"Spec.tools has two tools named {', '.join(duplicates)}")
    return tools


def _session(_: object, __: attrs.Attribute[Session | None], value: object) -> None:
    if value is not None and not isinstance(value, Session):
        raise TypeError(f"Spec.session must be a Session (agentsessions.open(id, store)) or None, got {value!r:.80}")


@attrs.frozen
class Spec:
    """What to run: the pattern, its step limit, the session, the tools and the system prompt.

    ``session`` is ``None`` by default, and then the run touches no store at all.
    """

    pattern: Pattern = attrs.field(default=Pattern.REACT, converter=Pattern)
    max_steps: int = attrs.field(default=8, validator=[attrs.validators.instance_of(int), attrs.validators.ge(1)])
    session: Session | None = attrs.field(default=None, validator=_session)
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tools)
    system: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    max_tokens: int = attrs.field(default=4096, validator=[attrs.validators.instance_of(int), attrs.validators.ge(1)])


@attrs.frozen
class Result:
    """What a run produced.

    ``messages`` is the whole transcript, ``text`` the final answer, ``steps`` how many
    model requests were made. ``unapplied_steers`` are steers that reached ``Run.steer``
    but never made it onto a request; steers left in a session's store are not among them.
    """

    messages: list[Message]
    text: str
    steps: int
    stop_reason: str
    unapplied_steers: list[str] = attrs.Factory(list)
    usage: Usage = attrs.field(factory=Usage)


class Run:
    """A run in progress. ``steer`` and ``cancel`` are safe from any thread and do no I/O."""

    def __init__(self, spec: Spec, messages: list[Message], endpoint: Endpoint, emit: EventSink | None) -> None:
        self._emit = emit
        self._box: list[str] = []
        self._box_lock = threading.Lock()
        self._closed = False
        self._cancelled = False
        self._finished = threading.Event()
        self._result: Result | None = None
        self._error: RunError | None = None
        self._loop = ReactLoop(spec, messages, endpoint, emit, self._take_box, lambda: self._cancelled)

    def steer(self, text: str) -> None:
        """Put ``text`` before the model at the run's next request.

        Raises :class:`RunFinishedError` once the run has finished: the steer would be lost.
        """
        check_steer(text)
        with self._box_lock:
            if self._closed:
                raise RunFinishedError("the run has finished; the steer was not delivered (steer the session)")
            self._box.append(text)

    def cancel(self) -> None:
        """Stop the run before its next model request; it then ends with ``stop_reason`` ``"cancelled"``."""
        self._cancelled = True

    @property
    def done(self) -> bool:
        """Whether the run has finished, successfully or not."""
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> Result:
        """Block until the run finishes and return its result.

        Raises :class:`RunError` (carrying the partial result) if the run failed, and
        ``TimeoutError`` if ``timeout`` seconds pass first.
        """
        if not self._finished.wait(timeout):
            raise TimeoutError(f"the run did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def _take_box(self) -> list[str]:
        with self._box_lock:
            taken, self._box = self._box, []
        return taken

    def _execute(self) -> None:
        error: Exception | None = None
        try:
            try:
                self._loop.run()
            except Exception as caught:
                error = caught
            self._result = self._close(failed=error is not None)
            if self._emit:
                try:
                    self._emit(ev.RunFinished(self._result, error))
                except Exception as caught:
                    error = error or caught
            if error is not None:
                self._error = RunError(f"the run failed in step {self._loop.steps}: {error!r}", self._result)
                self._error.__cause__ = error
        finally:
            self._finished.set()

    def _close(self, failed: bool) -> Result:
        """Refuse further steers and build the result; what is still in the box was never applied."""
        with self._box_lock:
            self._closed = True
            unapplied, self._box = self._box, []
        loop = self._loop
        stop_reason = StopReason.ERROR if failed else loop.stop_reason
        return Result(loop.transcript, loop.final_text(), loop.steps, stop_reason, unapplied, loop.usage)


class Runner:
    """Runs specs. Holds no state: one runner can serve any number of runs at once."""

    def run(
        self, spec: Spec, messages: Sequence[Message], endpoint: Endpoint, events: EventSink | None = None
    ) -> Result:
        """Run on the calling thread until the run finishes; raises :class:`RunError` if it fails."""
        run = self._prepare(spec, messages, endpoint, events)
        run._execute()
        return run.wait()

    def start(
        self, spec: Spec, messages: Sequence[Message], endpoint: Endpoint, events: EventSink | None = None
    ) -> Run:
        """Start the run on a worker thread and return its handle at once."""
        run = self._prepare(spec, messages, endpoint, events)
        threading.Thread(target=run._execute, name="agentsessions-run").start()
        return run

    @staticmethod
    def _prepare(spec: Spec, messages: Sequence[Message], endpoint: Endpoint, events: EventSink | None) -> Run:
        if not isinstance(spec, Spec):
            raise TypeError(f"spec must be an agentsessions.Spec, got {type(spec).__name__}")
        if not callable(getattr(endpoint, "complete", None)):
            raise TypeError(f"endpoint must have a complete(request) method, got {type(endpoint).__name__}")
        if events is not None and not callable(events):
            raise TypeError(f"events must be a callable or None, got {type(events).__name__}")
        return Run(spec, check_transcript(messages), endpoint, events)


__all__ = ["Pattern", "Result", "Run", "Runner", "Spec", "StopReason"]
