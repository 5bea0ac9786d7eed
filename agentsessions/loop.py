"""The ReAct loop: collect steers, save, ask the model, run its tools; repeat.

One instance runs one conversation turn on one thread. ``Run`` (runner.py) owns the
thread, the in-memory steer box and cancellation; this module owns what a step does.

Where the transcript goes was decided when the run started: the loop hands it to the run's
:class:`~agentsessions.persistence.Persistence` at fixed points (a step's start, around
each tool call, the finish) and never asks which one it has.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence

from agentsessions import compaction as cp
from agentsessions import events as ev
from agentsessions.approvals import APPROVED, EXPIRED, REJECTED, Approval, Call, binding, expired, rejected
from agentsessions.endpoint import Endpoint, ModelRequest, Usage
from agentsessions.errors import RunFinishedError
from agentsessions.messages import Content, ContentType, Message, Role, put_results
from agentsessions.persistence import IN_DOUBT as IN_DOUBT  # the journal's mark, where users import it from
from agentsessions.persistence import Persistence
from agentsessions.runs import RunState, utcnow
from agentsessions.spec import Spec, StopReason
from agentsessions.tools import Tool, call

EventSink = Callable[[ev.Event], object]

CANCELLED_TOOL = "the run was cancelled before this tool call ran"


class SteerBox:
    """The in-memory steers of one run: ``Run.steer`` puts, the loop takes. Thread-safe, no I/O.

    The loop closes the box when it is about to finish: a steer given after that raises
    :class:`RunFinishedError`, so the caller steers the session instead, and the check the
    run makes in the store as it releases the session sees it. The box reopens when the run
    goes on after all.
    """

    __slots__ = ("closed", "lock", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.lock = threading.Lock()
        self.closed = False

    def put(self, text: str) -> None:
        with self.lock:
            if self.closed:
                raise RunFinishedError("the run has finished; the steer was not delivered (steer the session)")
            self.texts.append(text)

    def take(self, *, close: bool = False) -> list[str]:
        if not (self.texts or close):
            # Most steps find nothing: no lock for that. A steer put just now is taken at the
            # next step, or by the take that closes the box.
            return []
        with self.lock:
            taken, self.texts = self.texts, []
            self.closed = self.closed or close
        return taken

    def reopen(self) -> None:
        with self.lock:
            self.closed = False


class ReactLoop:
    """The state of one run of the ReAct pattern; :meth:`run` drives it to a stop reason."""

    def __init__(
        self,
        spec: Spec,
        messages: Sequence[Message],
        endpoint: Endpoint,
        emit: EventSink | None,
        box: SteerBox,
        cancelled: Callable[[], bool],
        keep: Persistence,
        *,
        for_steers: bool = False,
    ) -> None:
        self.spec = spec
        self.transcript = list(messages)
        self.endpoint = endpoint
        self.emit = emit
        self.box = box
        self.run_cancelled = cancelled
        self.keep = keep
        self.tools = {tool.name: tool for tool in spec.tools}
        self.steps = 0
        self.input_tokens = self.output_tokens = self.cache_read_tokens = self.cache_write_tokens = 0
        self.stop_reason: str = ""
        self.asked: list[Approval] = []  # the calls the run stopped for, when it stops for approval
        # Steers from the run's box that are in the transcript but in no save (or request) yet:
        # if the run fails before one, they are reported unapplied; and those it had no step left for.
        self.unsaved_box: list[str] = []
        self.unapplied: list[str] = []
        # A run Runner.send started for a stored text: if another run took the text and
        # answered it first, this one finds nothing waiting and must not answer again.
        self.for_steers = for_steers
        # The store's steers were just collected (by that check): step 1 asks only the box.
        self.collected = False
        # Where requests start: the last summary in the transcript (a resumed one's too), if any.
        self.summary_at = cp.last_compaction(self.transcript)
        self.prompt_tokens: int | None = None  # the last response's input, cached included
        keep.count_usage(lambda: self.usage)  # each save records the run's tokens so far

    def run(self) -> None:
        """Step until the model answers, ``max_steps`` is spent, or the run is cancelled; then save."""
        self.finish_pending_calls()
        if self.for_steers and self.answered_already():
            self.stop_reason = StopReason.END_TURN
        while True:
            while not self.stop_reason:
                if self.cancelled():
                    self.stop_reason = StopReason.CANCELLED
                elif self.steps == self.spec.max_steps:
                    self.stop_reason = StopReason.MAX_STEPS
                else:
                    self.step()
            # The last reply appears in no request, so it would otherwise never be saved.
            late = self.finish()
            if not late:
                return
            self.box.reopen()
            self.apply_steers(late)
            self.stop_reason = ""

    def step(self) -> None:
        """One model request and the tool calls it asks for."""
        self.steps += 1
        step, emit = self.steps, self.emit
        if emit:
            emit(ev.StepStarted(step))
        self.collect_steers(store=not self.collected)
        self.collected = False
        if self.spec.compaction is not None:
            self.compact(step, self.spec.compaction)
        self.save()
        self.unsaved_box.clear()  # saved, or (without a session) carried by the request below
        if self.keep.cancel_requested:  # the save brought a cancel from elsewhere
            self.stop_reason = StopReason.CANCELLED
            return
        request = ModelRequest(
            self.spec.system,
            tuple(self.transcript)
            if self.summary_at is None
            else cp.request_messages(self.transcript, self.summary_at),
            self.spec.tools,
            self.spec.max_tokens,
            on_text=(lambda text: emit(ev.TextDelta(step, text))) if emit else None,
        )
        if emit:
            emit(ev.ModelRequested(step, request))
        response = self.endpoint.complete(request)
        if emit:
            emit(ev.ModelResponded(step, response))
        # Counted as two ints and made a Usage once, at the end: a Usage a step is garbage.
        usage = response.usage
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.prompt_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        self.transcript.append(response.message)
        uses = [c for c in response.message.content if c.type is ContentType.TOOL_USE]
        if not uses:
            # A pause (a server tool still working) is not the end: the next step sends the
            # transcript back as it is, and the provider goes on from its own last message.
            if response.stop_reason != StopReason.PAUSE_TURN:
                self.stop_reason = response.stop_reason or "end_turn"
            return
        self.answer(uses, [], {})

    def compact(self, step: int, rule: cp.Compaction) -> None:
        """Append a summary when the transcript passed the trigger; a failed summarizer changes nothing."""
        transcript = self.transcript
        if not transcript or transcript[-1].role is not Role.USER:
            return  # a request after a pause or a prefill: the summary goes before a user's turn only
        view_start = 0 if self.summary_at is None else self.summary_covers()
        tokens = self.prompt_tokens
        if tokens is None:
            tokens = cp.estimate_tokens(cp.request_messages(transcript, self.summary_at))
        if tokens < rule.trigger_tokens:
            return
        cut = cp.cut_point(transcript, view_start, rule.keep_tokens)
        if cut is None:
            return
        before = cp.messages_before(transcript, self.summary_at, cut)
        summarizer = rule.summarizer or self.endpoint
        request = ModelRequest(
            self.spec.system,
            tuple(cp.summary_request_messages(before, rule.instructions)),
            self.spec.tools,
            self.spec.max_tokens,
        )
        try:
            response = summarizer.complete(request)
            summary = response.message.text
            if not summary.strip():
                raise ValueError("the summarizer answered with no text")
        except Exception as error:  # any failure leaves the run as it was, reported
            if self.emit:
                self.emit(ev.CompactionFailed(step, error))
            return
        usage = response.usage
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        transcript.append(Message(Role.USER, (Content.compaction(summary, covers=cut),)))
        self.summary_at = len(transcript) - 1
        self.prompt_tokens = None  # the next response says how large the compacted request was
        if self.emit:
            self.emit(ev.Compacted(step, cut, summary))

    def summary_covers(self) -> int:
        """How many messages the summary requests start at covers."""
        assert self.summary_at is not None
        blocks = self.transcript[self.summary_at].content
        return [b for b in blocks if b.type is ContentType.COMPACTION][-1].covers

    def answer(self, uses: list[Content], results: list[Content], decisions: Mapping[Call, Approval]) -> None:
        """Run the calls that may run; a rejected one is answered with its reason; the rest wait.

        A call waits when its tool asks for approval and ``decisions`` holds no decision
        bound to that exact call (id, tool and input). Calls that wait stop the run with
        ``APPROVAL_REQUIRED`` once the others ran, unless the run was cancelled meanwhile:
        then they are answered as cancelled, like any call the run did not get to.
        """
        run, asked = self.sort_calls(uses, results, decisions)
        if run or results or not asked:
            self.call_tools(run, results)
        if not asked:
            return
        if self.stop_reason == StopReason.CANCELLED or self.cancelled():
            self.stop_reason = StopReason.CANCELLED
            results += [Content.tool_result(a.call_id, CANCELLED_TOOL, is_error=True) for a in asked]
            put_results(self.transcript, results)
            return
        self.stop_reason = StopReason.APPROVAL_REQUIRED
        self.asked = asked
        if self.emit:
            for approval in asked:
                self.emit(ev.ApprovalRequested(self.steps, approval))

    def sort_calls(
        self, uses: list[Content], results: list[Content], decisions: Mapping[Call, Approval]
    ) -> tuple[list[Content], list[Approval]]:
        """The calls to run, and those to wait for; a rejected call's result joins ``results``."""
        run: list[Content] = []
        asked: list[Approval] = []
        now = None
        for use in uses:
            tool = self.tools.get(use.name)
            if tool is None or not tool.asks_approval(use.input):
                run.append(use)
                continue
            approval = decisions.get((use.id, use.name, use.input))
            if approval is not None and approval.decision is not None and self.emit:
                self.emit(ev.ApprovalDecided(self.steps, approval))
            if approval is not None and approval.decision == APPROVED:
                run.append(use)
            elif approval is not None and approval.decision == REJECTED:
                results.append(Content.tool_result(use.id, rejected(approval), is_error=True))
            elif approval is not None and approval.decision == EXPIRED:
                results.append(Content.tool_result(use.id, expired(approval), is_error=True))
            else:
                now = now or utcnow()
                requested = approval.requested_at if approval is not None else now
                expires = None if tool.approval_timeout is None else requested + tool.approval_timeout
                # The tool's schema waits with the call: a decider that never saw the tool checks an edited input.
                schema = json.dumps(dict(tool.input_schema), ensure_ascii=False, separators=(",", ":"))
                asked.append(Approval(use.id, use.name, use.input, requested, input_schema=schema, expires_at=expires))
        return run, asked

    def call_tools(self, uses: list[Content], results: list[Content]) -> None:
        """Run tool calls in order, their results joining ``results`` in the user message after the calls.

        Once the run is cancelled, the rest get error results. The run's persistence sees
        each call before it runs (proving the run still holds its session; the journal
        records it as started) and after it returned (the journal records its result).
        """
        keep = self.keep
        for use in uses:
            # A tool may have side effects: run it only while the run holds the session and
            # nobody asked it to stop.
            if not self.cancelled() and keep.before_call(self.transcript, results, use):
                self.saved()
            if self.cancelled():
                self.stop_reason = StopReason.CANCELLED
                results.append(Content.tool_result(use.id, CANCELLED_TOOL, is_error=True))
                continue
            results += self.call_tool(use)
            if keep.after_call(self.transcript, results):
                self.saved()
        put_results(self.transcript, results)

    def finish_pending_calls(self) -> None:
        """A transcript that ends in tool calls without results: run those calls first, in order.

        A call whose result is the journal's in-doubt mark runs again only if its tool is
        idempotent; any other keeps the mark, telling the model its result was lost.
        """
        uses, results = self.pending_calls()
        if not uses:
            return
        marked = {
            r.tool_use_id for r in results if r.type is ContentType.TOOL_RESULT and r.is_error and r.text == IN_DOUBT
        }
        in_doubt = [use for use in uses if use.id in marked]
        # A tool this run does not have counts as not idempotent: it never runs again.
        redo = {use.id for use in in_doubt if self.tools.get(use.name, _UNKNOWN).idempotent}
        if self.emit:
            for use in in_doubt:
                self.emit(ev.ToolInDoubt(0, use, use.id in redo))
        kept = [r for r in results if r.tool_use_id not in redo]
        answered = {r.tool_use_id for r in kept if r.type is ContentType.TOOL_RESULT}
        missing = [use for use in uses if use.id not in answered]
        if not missing:
            return
        # Decisions are read only when a pending call's tool asks for them: one read per resumed wait.
        asks = any(use.name in self.tools and self.tools[use.name].asks_approval(use.input) for use in missing)
        self.answer(missing, kept, binding(self.keep.approvals()) if asks else {})

    def pending_calls(self) -> tuple[list[Content], list[Content]]:
        """The last assistant message's tool calls and the results after them, if it is the end of the transcript."""
        transcript = self.transcript
        if transcript and transcript[-1].role is Role.ASSISTANT:
            return list(transcript[-1].tool_uses), []
        if len(transcript) >= 2 and transcript[-2].role is Role.ASSISTANT:
            results = [c for c in transcript[-1].content if c.part_of_result]
            return list(transcript[-2].tool_uses), results
        return [], []

    def call_tool(self, use: Content) -> list[Content]:
        """Run one tool call, reporting it to the event sink: its result, then the media the tool returned."""
        if self.emit:
            self.emit(ev.ToolCalled(self.steps, use))
        blocks, error = call(self.tools, use)
        if self.emit:
            self.emit(ev.ToolReturned(self.steps, blocks[0], tuple(blocks[1:]), error))
        return blocks

    def cancelled(self) -> bool:
        """Whether ``Run.cancel`` or, through the store, another replica asked the run to stop."""
        return self.run_cancelled() or self.keep.cancel_requested

    def answered_already(self) -> bool:
        """Whether, with the waiting steers collected, the transcript still ends in the model's answer.

        Then there is nothing to ask: the text that started the run was taken and answered by
        another run between ``send`` storing it and this run's claim.
        """
        self.collect_steers()
        # Step 1 follows at once: a steer stored in between is taken at step 2, or by the
        # release, as one stored just after step 1's collection would be. One round trip less.
        self.collected = True
        last = self.transcript[-1] if self.transcript else None
        return (
            last is not None
            and last.role is Role.ASSISTANT
            and not any(content.type is ContentType.TOOL_USE for content in last.content)
        )

    def collect_steers(self, *, store: bool = True) -> None:
        """Put waiting steers (the run's box, then the session's unless ``store`` is false) where the run has got to."""
        # The store's first: if taking them fails, the box's are still in the box, and the
        # failed run reports them unapplied instead of losing them.
        stored = self.keep.take_steers() if store else []
        box = self.box.take()
        if box or stored:
            self.unsaved_box += box
            self.apply_steers([("run", text) for text in box] + [("session", text) for text in stored])

    def apply_steers(self, texts: list[tuple[str, str]]) -> None:
        """Add steers as user text at the end: to the trailing user message, or as a new one."""
        blocks = tuple(Content(ContentType.TEXT, text=text) for _, text in texts)
        last = self.transcript[-1] if self.transcript else None
        if last is not None and last.role is Role.USER:
            self.transcript[-1] = Message(Role.USER, last.content + blocks)
        else:
            self.transcript.append(Message(Role.USER, blocks))
        if self.emit:
            for source, text in texts:
                self.emit(ev.SteerApplied(self.steps, text, source))

    def save(self) -> None:
        """Hand the transcript to the run's persistence, which writes it if it has somewhere to."""
        if self.keep.save(self.transcript):
            self.saved()

    def finish(self) -> list[tuple[str, str]]:
        """The last save and the release; or the steers that arrived meanwhile, to go on with.

        Steers that arrived after the last collection (in the box, or in the store) keep the
        run going, unless it is cancelled or has no step left for them: then the box's go to
        the store for the next run (or, when it has none, are reported unapplied), and the
        store's stay there for a resumer (a steer answered ``RUNNING`` is a promise). The box
        closes first, so a later ``Run.steer`` raises and its caller steers the session,
        which the release checks in the same step.
        """
        if self.stop_reason == StopReason.APPROVAL_REQUIRED:
            return self.wait()
        room = self.stop_reason != StopReason.CANCELLED and self.steps < self.spec.max_steps
        box = self.box.take(close=True)
        if box and room:
            self.unsaved_box += box
            return [("run", text) for text in box]
        self.unapplied += self.keep.leave_steers(box) if box else []
        end = RunState.CANCELLED if self.stop_reason == StopReason.CANCELLED else RunState.FINISHED
        wrote, late = self.keep.finish(self.transcript, end, room=room)
        if wrote:
            self.saved()
        return [("session", text) for text in late]

    def wait(self) -> list[tuple[str, str]]:
        """Save and leave the session waiting for the asked calls; steers wait for the run after the decision."""
        box = self.box.take(close=True)
        self.unapplied += self.keep.leave_steers(box) if box else []
        if self.keep.wait(self.transcript, self.asked):
            self.saved()
        return []

    def saved(self) -> None:
        """Report a save: it carries the box's steers taken so far."""
        self.unsaved_box.clear()
        if self.emit:
            self.emit(ev.TranscriptSaved(self.steps, len(self.transcript)))

    @property
    def usage(self) -> Usage:
        """Tokens the run's model calls consumed, all together."""
        return Usage(self.input_tokens, self.output_tokens, self.cache_read_tokens, self.cache_write_tokens)

    def final_text(self) -> str:
        """The text of the last assistant message, the run's answer."""
        for message in reversed(self.transcript):
            if message.role is Role.ASSISTANT:
                return message.text
        return ""


_UNKNOWN = Tool("unknown", "", {"type": "object"}, lambda: "")
