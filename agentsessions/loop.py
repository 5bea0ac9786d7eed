"""The ReAct loop: collect steers, save, ask the model, run its tools; repeat.

One instance runs one conversation turn on one thread. ``Run`` (runner.py) owns the
thread, the in-memory steer box and cancellation; this module owns what a step does.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agentsessions import events as ev
from agentsessions.endpoint import Endpoint, ModelRequest, Usage
from agentsessions.messages import Content, ContentType, Message, Role
from agentsessions.tools import call

if TYPE_CHECKING:
    from agentsessions.runner import Spec

EventSink = Callable[[ev.Event], object]


class StopReason(enum.StrEnum):
    """Why a run stopped. A model's own reason (``"end_turn"``, ``"max_tokens"``...) is kept as it came."""

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    MAX_STEPS = "max_steps"
    CANCELLED = "cancelled"
    ERROR = "error"


class ReactLoop:
    """The state of one run of the ReAct pattern; :meth:`run` drives it to a stop reason."""

    def __init__(
        self,
        spec: Spec,
        messages: Sequence[Message],
        endpoint: Endpoint,
        emit: EventSink | None,
        take_box: Callable[[], list[str]],
        cancelled: Callable[[], bool],
    ) -> None:
        self.spec = spec
        self.transcript = list(messages)
        self.endpoint = endpoint
        self.emit = emit
        self.take_box = take_box
        self.cancelled = cancelled
        self.tools = {tool.name: tool for tool in spec.tools}
        self.steps = 0
        self.usage = Usage()
        self.stop_reason: str = ""

    def run(self) -> None:
        """Step until the model answers, ``max_steps`` is spent, or the run is cancelled."""
        while not self.stop_reason:
            if self.cancelled():
                self.stop_reason = StopReason.CANCELLED
            elif self.steps == self.spec.max_steps:
                self.stop_reason = StopReason.MAX_STEPS
            else:
                self.step()
        self.save()  # the last reply appears in no request, so it would otherwise never be saved

    def step(self) -> None:
        """One model request and the tool calls it asks for."""
        self.steps += 1
        step, emit = self.steps, self.emit
        if emit:
            emit(ev.StepStarted(step))
        self.collect_steers()
        self.save()
        request = ModelRequest(
            self.spec.system,
            tuple(self.transcript),
            self.spec.tools,
            self.spec.max_tokens,
            on_text=(lambda text: emit(ev.TextDelta(step, text))) if emit else None,
        )
        if emit:
            emit(ev.ModelRequested(step, request))
        response = self.endpoint.complete(request)
        if emit:
            emit(ev.ModelResponded(step, response))
        self.usage += response.usage
        self.transcript.append(response.message)
        uses = [c for c in response.message.content if c.type is ContentType.TOOL_USE]
        if not uses:
            self.stop_reason = response.stop_reason or "end_turn"
            return
        self.transcript.append(Message(Role.USER, [self.call_tool(use) for use in uses]))

    def call_tool(self, use: Content) -> Content:
        """Run one tool call, reporting it to the event sink."""
        if self.emit:
            self.emit(ev.ToolCalled(self.steps, use))
        result = call(self.tools, use)
        if self.emit:
            self.emit(ev.ToolReturned(self.steps, result))
        return result

    def collect_steers(self) -> None:
        """Put waiting steers (the run's box, then the session's) where the run has got to."""
        texts = [("run", text) for text in self.take_box()]
        if self.spec.session is not None:
            texts += [("session", text) for text in self.spec.session.take_steers()]
        if not texts:
            return
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
        """Write the transcript to the session, when there is one."""
        if self.spec.session is None:
            return
        self.spec.session.save(self.transcript)
        if self.emit:
            self.emit(ev.TranscriptSaved(self.steps, len(self.transcript)))

    def final_text(self) -> str:
        """The text of the last assistant message, the run's answer."""
        for message in reversed(self.transcript):
            if message.role is Role.ASSISTANT:
                return message.text
        return ""
