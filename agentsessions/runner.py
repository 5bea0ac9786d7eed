"""Running an agent: ``Runner`` starts runs, ``Run`` is the handle. The run's data lives in spec.py.

With a session over a :class:`~agentsessions.session.RunStore`, a run claims its session on
the caller's thread before anything else (so ``run()`` and ``start()`` raise
:class:`~agentsessions.errors.SessionBusyError` at once while another run holds it), keeps
the lease through its process's heartbeat, and releases the session in the state it ended
in. A session over a store with only the four seed methods runs as before: no claim, no
lease, no fencing, and a steer taken by a run that dies before its next save is lost.
"""

from __future__ import annotations

import atexit
import contextvars
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from types import TracebackType

from agentsessions import events as ev
from agentsessions import persistence
from agentsessions.approvals import Decision
from agentsessions.endpoint import Endpoint
from agentsessions.errors import ApprovalPendingError, ConflictError, RunError, RunnerClosedError, SessionBusyError
from agentsessions.loop import EventSink, ReactLoop, SteerBox
from agentsessions.messages import Message, check_transcript
from agentsessions.persistence import Persistence
from agentsessions.runs import RunState
from agentsessions.session import Session, StoreSession, check_if_busy, check_steer
from agentsessions.spec import Pattern, Result, Resume, Spec, StopReason

log = logging.getLogger("agentsessions")


class Listener:
    """The caller's events callback, fenced off: if it raises, the error is logged once, with
    its traceback, the callback gets no further events, and the run goes on (a UI whose client
    went away must not fail the run, nor lose its final save)."""

    __slots__ = ("callback",)

    def __init__(self, callback: EventSink) -> None:
        self.callback: EventSink | None = callback

    def __call__(self, event: ev.Event) -> None:
        callback = self.callback
        if callback is None:
            return
        try:
            callback(event)
        except Exception:
            self.callback = None
            what = type(event).__name__
            log.exception("the events callback raised on %s; it gets no further events from this run", what)


class Run:
    """A run in progress. ``steer`` and ``cancel`` are safe from any thread and do no I/O."""

    def __init__(
        self,
        spec: Spec,
        messages: list[Message],
        endpoint: Endpoint,
        emit: EventSink | None,
        keep: Persistence,
        replica: str = "",
        *,
        for_steers: bool = False,
        follow: Callable[[], object] | None = None,
    ) -> None:
        emit = Listener(emit) if emit is not None else None
        self._replica = replica
        self._follow = follow
        self._emit = emit
        self._box = SteerBox()
        self._cancelled = False
        self._finished = threading.Event()
        self._result: Result | None = None
        self._error: RunError | None = None
        self._loop = ReactLoop(
            spec, messages, endpoint, emit, self._box, lambda: self._cancelled, keep, for_steers=for_steers
        )

    @property
    def session(self) -> Session | None:
        """The session this run works on (its spec's)."""
        return self._loop.spec.session

    def steer(self, text: str) -> None:
        """Put ``text`` before the model at the run's next request.

        Raises :class:`RunFinishedError` once the run is finishing (its last answer is in) or
        has finished: the steer would be lost. Steer the session then: a run that is
        finishing checks the store as it releases the session, and goes on for such steers.
        """
        self._box.put(check_steer(text))

    def cancel(self) -> None:
        """Stop the run before its next model request or tool call; it ends with ``stop_reason`` ``"cancelled"``."""
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

    def _execute(self) -> None:
        error: Exception | None = None
        interrupt: BaseException | None = None
        try:
            if self._emit:
                spec, keep = self._loop.spec, self._loop.keep
                session_id = getattr(spec.session, "id", None)
                started = ev.RunStarted(session_id, self._replica, self._loop.endpoint, spec.name, keep.took_over)
                self._emit(started)
            try:
                self._loop.run()
            except Exception as caught:
                error = caught
                self._stop(RunState.FAILED)
            except BaseException as caught:
                # Ctrl-C (KeyboardInterrupt) or SystemExit unwinding through the run: it ends as a
                # cancel does, saved and released, so that running the script again need not wait
                # out the lease; then the interrupt goes on its way.
                interrupt = caught
                self._loop.stop_reason = StopReason.CANCELLED
                self._stop(RunState.CANCELLED)
            self._result = self._close(StopReason.ERROR if error is not None else self._loop.stop_reason)
            if self._emit:
                self._emit(ev.RunFinished(self._result, error or interrupt))
            if error is not None:
                failure = f"{type(error).__name__}: {error}"  # its words, not a repr that nests its cause's
                self._error = RunError(f"the run failed in step {self._loop.steps}: {failure}", self._result)
                self._error.__cause__ = error
        finally:
            self._loop.keep.let_go()
            try:
                if interrupt is None and self._loop.keep.queued and self._follow is not None:
                    # Texts sent with if_busy="queue" or "interrupt" wait for the run after this
                    # one; it is started before wait() returns, so a caller waiting for this run
                    # finds that one among the runner's runs.
                    self._follow()
            finally:
                self._finished.set()
        if interrupt is not None:
            raise interrupt

    def _stop(self, end: RunState) -> None:
        """After a failure or an interrupt, save what the run has and release its session as ``end``, if we can."""
        loop = self._loop
        if loop.keep.stop(loop.transcript, end):
            loop.unsaved_box = []

    def _close(self, stop_reason: str) -> Result:
        """Refuse further steers and build the result; steers in no save (or request) were never applied."""
        leftover = self._box.take(close=True)
        loop = self._loop
        unapplied = loop.unsaved_box + loop.unapplied + leftover
        approvals = loop.asked if stop_reason == StopReason.APPROVAL_REQUIRED else []
        return Result(loop.transcript, loop.final_text(), loop.steps, stop_reason, unapplied, loop.usage, approvals)


def default_replica() -> str:
    """``"<hostname>:<pid>"``: this process, as ``SessionInfo.holder`` names it."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Runner:
    """Runs specs; one runner can serve any number of runs at once.

    ``replica`` names this process in the sessions its runs hold (``SessionInfo.holder``);
    it defaults to ``"<hostname>:<pid>"``. Runs started with :meth:`start` run on daemon
    threads, so they never keep the process alive: when the interpreter exits (the main
    thread ended, Ctrl-C), the runs still going are cancelled and given a few seconds to
    save and release their sessions, the same as :meth:`shutdown` does. A run killed
    before that is only a crash: its lease lapses and another replica resumes it.
    """

    EXIT_GRACE = 2.0
    """Seconds the runs of a runner still going at interpreter exit get to save and release."""

    def __init__(self, replica: str | None = None) -> None:
        if replica is not None and (not isinstance(replica, str) or not replica):
            raise TypeError(f"replica must be a non-empty str or None, got {replica!r:.80}")
        self.replica = replica if replica is not None else default_replica()
        self._runs: weakref.WeakSet[Run] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> Runner:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = None) -> bool:
        """Stop accepting runs, cancel the live ones, and wait for their final saves and releases.

        A cancelled run stops before its next model request or tool call (a model request
        under way is not interrupted), saves, and releases its session as ``CANCELLED``.
        Returns ``True`` when every run finished within ``timeout`` seconds (``None``: no
        limit); a run still going after that keeps its lease until it ends or its process
        does. Later ``run()`` and ``start()`` calls raise :class:`RunnerClosedError`.
        """
        with self._lock:
            self._closed = True
            runs = list(self._runs)
        return _cancel_and_wait(runs, timeout)

    def __repr__(self) -> str:
        return f"Runner(replica={self.replica!r})"

    def run(
        self, spec: Spec, messages: Sequence[Message] | Resume, endpoint: Endpoint, events: EventSink | None = None
    ) -> Result:
        """Run on the calling thread until the run finishes; raises :class:`RunError` if it fails.

        ``messages`` is the whole transcript, or :class:`Resume` to continue the session's.
        A ``KeyboardInterrupt`` (Ctrl-C) or ``SystemExit`` during the run ends it as a cancel
        does, saved and its session released as ``CANCELLED``, and is then raised on.
        """
        run = self._prepare(spec, messages, endpoint, events)
        run._execute()
        return run.wait()

    def start(
        self, spec: Spec, messages: Sequence[Message] | Resume, endpoint: Endpoint, events: EventSink | None = None
    ) -> Run:
        """Start the run on a worker thread and return its handle at once.

        The thread runs in a copy of the caller's context variables (``contextvars``), so
        what the caller's context carries, such as its current tracing span, applies to the run.
        """
        return self._launch(self._prepare(spec, messages, endpoint, events))

    @staticmethod
    def _launch(run: Run) -> Run:
        """Start ``run`` on a worker thread, in a copy of the caller's context variables (a tracing span)."""
        caller = contextvars.copy_context()
        threading.Thread(target=caller.run, args=(run._execute,), name="agentsessions-run", daemon=True).start()
        return run

    def send(
        self,
        spec: Spec,
        text: str,
        endpoint: Endpoint,
        events: EventSink | None = None,
        *,
        key: str | None = None,
        on_waiting: str = "keep",
        if_busy: str = "steer",
    ) -> Run | None:
        """Deliver one user message to the spec's session: the one call a chat view needs.

        The text goes into the session's store first, after the steers already waiting, so
        once ``send`` returns it outlives this process. A live run holding the session (this
        runner's, another runner's, another replica's) takes it at its next step, or as it
        releases the session; with no live run, a run starts with ``Resume()`` and takes it
        at its first step. Returns the run this runner holds or started, or ``None`` when a
        run held elsewhere takes the text. The text is answered once, whatever races with
        it: another ``send``, a run finishing, a replica dying (its lease lapses and the
        text waits in the store for the resumer or the next ``send``).

        A store with only the seed's four methods keeps no run records: this runner's live
        run of the session takes the text at its next step or as it finishes, and one
        finishing just then leaves it in the store for the next run.

        ``key`` makes the call safe to retry, as a web view retries a request whose answer
        it lost (see ``session.steer``): the text is stored once per key, and a retry finding
        it already taken from the store (a run answered it, or is answering it) starts no
        run. The same key with another text raises :class:`ConflictError`. Keys need a
        session from :func:`agentsessions.open` over a :class:`RunStore`.

        ``on_waiting`` says what a text does to a session that waits for approval
        (``WAITING``): ``"keep"`` leaves it stored for the run after the decision and returns
        ``None``; ``"reject"`` rejects every undecided call with the text as the reason
        (``by="user"``) and starts the run that answers it. A decision racing it stands
        (each call is decided once); the text is answered once either way.

        ``if_busy`` says what the text does when a live run holds the session, decided in
        one atomic step in the store (two replicas racing each get one outcome):
        ``"steer"`` (the default) as above; ``"queue"``: the live run leaves it, and as it
        ends its runner (in whatever process holds it) starts the next run, which answers
        it; ``"interrupt"``: the same, and the live run stops at its next step boundary, as
        a cancel stops it (its finished calls kept and saved, calls it did not run answered
        as cancelled; it ends ``CANCELLED``); ``"reject"``: raises
        :class:`SessionBusyError`, nothing stored. Both ``"queue"`` and ``"interrupt"``
        return ``None`` when a live run holds the session (the run that answers starts
        later, in the holder's process). If that process dies first, the text waits in the
        store, the session ``STALLED`` or ended with steers waiting, where a resumer looks.
        With no live run every policy starts a run with ``Resume()`` as above.
        """
        if on_waiting not in ("keep", "reject"):
            raise ValueError(f'on_waiting must be "keep" or "reject", got {on_waiting!r:.80}')
        text, if_busy = check_steer(text), check_if_busy(if_busy)
        session = spec.session if isinstance(spec, Spec) else None
        if session is None:
            raise ValueError("send needs a Spec with a session: the text goes to that session's conversation")
        # The store before anything else: a run's in-memory box dies with its process.
        state = _steer(session, text, key, if_busy)
        if state is RunState.RUNNING and if_busy != "steer":
            return None  # the live run's runner starts the run that answers it, as that run ends
        mine = self._live_run_of(session)
        # RUNNING: the holder takes it at its next step or as it releases (the release checks
        # for steers in the same atomic step); one with no step left leaves it to a resumer.
        # None: the store keeps no run records; this runner's live run stands for RUNNING.
        if state is RunState.RUNNING or (state is None and mine is not None):
            return mine
        # A keyed text no longer waiting was taken by a run, which answers it: a retry's
        # new run would answer the transcript's end a second time.
        if key is not None and isinstance(session, StoreSession) and not session.info().pending_steers:
            return mine
        if state is RunState.WAITING and on_waiting == "reject" and isinstance(session, StoreSession):
            _reject_undecided(session, text)
        try:
            return self._launch(self._prepare(spec, Resume(), endpoint, events, for_steers=True))
        except SessionBusyError:
            return None  # another run claimed it since: it takes the stored steer at its first step
        except ApprovalPendingError:
            return None  # the session waits for a decision: the run after it takes the stored steer

    def _live_run_of(self, session: Session) -> Run | None:
        """This runner's unfinished run of ``session``, if it has one."""
        with self._lock:
            runs = list(self._runs)
        return next((run for run in runs if not run.done and _same_session(run.session, session)), None)

    def _prepare(
        self,
        spec: Spec,
        messages: Sequence[Message] | Resume,
        endpoint: Endpoint,
        events: EventSink | None,
        *,
        for_steers: bool = False,
    ) -> Run:
        """The run, claimed; ``for_steers``: it is ``send``'s, and asks nothing if no steer waits for it."""
        if not isinstance(spec, Spec):
            raise TypeError(f"spec must be an agentsessions.Spec, got {type(spec).__name__}")
        if not callable(getattr(endpoint, "complete", None)):
            raise TypeError(f"endpoint must have a complete(request) method, got {type(endpoint).__name__}")
        if events is not None and not callable(events):
            raise TypeError(f"events must be a callable or None, got {type(events).__name__}")
        resume = messages if isinstance(messages, Resume) else None
        if resume is not None and spec.session is None:
            raise ValueError("Resume continues a session's stored transcript: the Spec needs a session")
        transcript = [] if resume is not None else check_transcript(messages)
        if self._closed:
            raise RunnerClosedError(f"{self!r} was shut down; it starts no more runs")
        # The claim, when the store keeps runs (no lock held): how the run persists is decided here, once.
        keep = persistence.choose(spec.session, journal=spec.journal, replica=self.replica, lease=spec.lease)
        if resume is not None:
            transcript = self._resumed(spec, resume, keep)
        follow = None if spec.session is None else lambda: self._follow_up(spec, endpoint, events)
        run = Run(spec, transcript, endpoint, events, keep, self.replica, for_steers=for_steers, follow=follow)
        with self._lock:
            self._runs.add(run)
            if self._closed:  # shut down while claiming: it stops before its first request
                run.cancel()
        _live_runs.add(run)
        return run

    def _follow_up(self, spec: Spec, endpoint: Endpoint, events: EventSink | None) -> None:
        """Start the run that answers texts queued while the last one ran; else they wait for a resumer.

        Called on the ended run's thread, after it released the session (``Hold.queued``).
        """
        try:
            self._launch(self._prepare(spec, Resume(), endpoint, events, for_steers=True))
        except (SessionBusyError, ApprovalPendingError):
            pass  # another run claimed the session first: it takes the queued texts
        except Exception as error:  # a runner shut down, a store failing: the texts stay stored
            session_id = getattr(spec.session, "id", None)
            log.warning("could not start the run for texts queued on session %r: %s", session_id, error)

    @staticmethod
    def _resumed(spec: Spec, resume: Resume, keep: Persistence) -> list[Message]:
        """The stored transcript continued by ``resume``, read after the claim so no other run writes in between."""
        assert spec.session is not None
        try:
            return resume.continued(spec.session.messages())
        except BaseException:
            # Nothing was run or written: stop renewing, and the lease lapses (the session
            # shows STALLED until then, and a resumer or the next run takes it).
            keep.let_go()
            raise


def _steer(session: Session, text: str, key: str | None, if_busy: str) -> RunState | None:
    """``session.steer(text, key=key, if_busy=if_busy)``; a key or a policy needs a session that takes them."""
    if key is None and if_busy == "steer":
        return session.steer(text)
    if not isinstance(session, StoreSession):
        kind = type(session).__name__
        what = "key=..." if key is not None else f"if_busy={if_busy!r}"
        raise TypeError(f"send({what}) needs a session from agentsessions.open(id, store), got a {kind}")
    return session.steer(text, key=key, if_busy=if_busy)


def _reject_undecided(session: StoreSession, reason: str) -> None:
    """Reject every call of the session's wait nobody has decided, with ``reason``; decisions racing it stand."""
    for _ in range(8):  # each refusal means another decision landed in between: fewer calls are left
        undecided = [approval.call_id for approval in session.approvals() if approval.decision is None]
        if not undecided:
            return
        try:
            session.decide(dict.fromkeys(undecided, Decision.reject(reason=reason, by="user")))
            return
        except ConflictError:
            continue


def _same_session(one: Session | None, other: Session) -> bool:
    """Whether two sessions address one conversation: the same id in the same store object."""
    if isinstance(one, StoreSession) and isinstance(other, StoreSession):
        return one.id == other.id and one.store is other.store
    return one is other


def _cancel_and_wait(runs: list[Run], timeout: float | None) -> bool:
    """Cancel ``runs`` and wait for them to finish; ``False`` if one is still going after ``timeout``."""
    for run in runs:
        run.cancel()
    deadline = None if timeout is None else time.monotonic() + timeout
    for run in runs:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not run._finished.wait(left):
            return False
    return True


# Every run not yet finished in this process, whatever became of its runner (a run's thread
# keeps the run alive; a runner may be gone long before).
_live_runs: weakref.WeakSet[Run] = weakref.WeakSet()


@atexit.register
def _shut_down_at_exit() -> None:
    # Run threads are daemons; at exit, runs still going get to save and release their sessions.
    _cancel_and_wait([run for run in list(_live_runs) if not run.done], Runner.EXIT_GRACE)


__all__ = ["Pattern", "Result", "Resume", "Run", "Runner", "RunnerClosedError", "Spec", "StopReason"]
