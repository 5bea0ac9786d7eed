"""What a run reports while it works, one frozen class per kind of event.

Pass ``events=callback`` to ``Runner.run``/``Runner.start`` and the callback receives each
event on the run's thread, in order. A callback that raises does not fail the run: the error
is logged once, with its traceback, and that callback gets no further events from the run.

Every run's events begin with :class:`RunStarted` and end with :class:`RunFinished`, all on
the run's own thread; :class:`agentsessions.telemetry.OpenTelemetry` relies on both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from agentsessions.approvals import Approval
from agentsessions.endpoint import Endpoint, ModelRequest, ModelResponse
from agentsessions.messages import Content

if TYPE_CHECKING:
    from agentsessions.spec import Result


@attrs.frozen
class RunStarted:
    """A run began, before its first step: its session's id (``None`` without a session),
    the runner's ``replica`` name, and the endpoint it asks (never shown in the repr).

    ``name`` is the spec's (``Spec.name``); ``took_over`` says the run's claim ended another
    holder's lapsed lease (``Claim.took_over``): that run died or hung, and this one goes on.
    """

    session_id: str | None
    replica: str
    endpoint: Endpoint = attrs.field(eq=False, repr=False)
    name: str = ""
    took_over: bool = False


@attrs.frozen
class StepStarted:
    """A step began; steps count from 1."""

    step: int


@attrs.frozen
class SteerApplied:
    """A steer was put onto the transcript; ``source`` is ``"run"`` (Run.steer) or ``"session"``."""

    step: int
    text: str
    source: str


@attrs.frozen
class TranscriptSaved:
    """The transcript was saved to the session; ``messages`` is how many it holds."""

    step: int
    messages: int


@attrs.frozen
class ModelRequested:
    """A request is about to go to the model."""

    step: int
    request: ModelRequest


@attrs.frozen
class TextDelta:
    """A piece of the model's text, as a streaming endpoint received it."""

    step: int
    text: str


@attrs.frozen
class ModelResponded:
    """The model answered."""

    step: int
    response: ModelResponse


@attrs.frozen
class ToolCalled:
    """The model called a tool; ``call`` is its ``TOOL_USE`` block."""

    step: int
    call: Content


@attrs.frozen
class ToolReturned:
    """A tool call ended; ``result`` is the ``TOOL_RESULT`` block the model will read.

    ``media`` holds the images and documents the tool returned with it, if any. ``error`` is
    the tool's own failure, which the result (``is_error=True``) tells the model about: the
    exception the tool raised, or a ``TypeError`` for output that is not a tool's. It is
    ``None`` when the tool returned, and for the model's mistakes (a tool it invented,
    arguments that do not fit the schema), where the tool never ran.
    """

    step: int
    result: Content
    media: tuple[Content, ...] = ()
    error: BaseException | None = None


@attrs.frozen
class ToolInDoubt:
    """A resumed run found a tool call the journal marked started whose result was never recorded.

    ``rerun`` is whether the call runs again (its tool is idempotent); if not, the in-doubt
    mark stays the result the model reads. ``step`` is 0: it comes before the first step.
    """

    step: int
    call: Content
    rerun: bool


@attrs.frozen
class ApprovalRequested:
    """A tool call waits for a person's decision: the run stops for it once the step's other calls ran."""

    step: int
    approval: Approval


@attrs.frozen
class ApprovalDecided:
    """A resumed run acts on a person's decision on a call it stopped for: runs it, or answers it rejected.

    ``step`` is 0: it comes before the run's first step.
    """

    step: int
    approval: Approval


@attrs.frozen
class Compacted:
    """The loop appended a summary of the transcript's first ``covers`` messages; requests start there now."""

    step: int
    covers: int
    summary: str


@attrs.frozen
class CompactionFailed:
    """The summarizer failed (``error``): nothing was stored, and the run goes on uncompacted."""

    step: int
    error: BaseException


@attrs.frozen
class RunFinished:
    """The run ended, normally or not; ``result`` is final (partial when ``error`` is set)."""

    result: Result
    error: BaseException | None = None


Event = (
    RunStarted
    | StepStarted
    | SteerApplied
    | TranscriptSaved
    | ModelRequested
    | TextDelta
    | ModelResponded
    | ToolCalled
    | ToolReturned
    | ToolInDoubt
    | ApprovalRequested
    | ApprovalDecided
    | Compacted
    | CompactionFailed
    | RunFinished
)
