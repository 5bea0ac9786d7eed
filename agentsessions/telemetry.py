"""Runs as OpenTelemetry spans and metrics, named as the GenAI semantic conventions name them.

    runner.run(spec, messages, endpoint, events=OpenTelemetry())

One run is one ``invoke_agent`` span (kind ``INTERNAL``; ``invoke_agent {name}`` with a
``Spec.name``, which every span of the run carries as ``gen_ai.agent.name``); each model
request a ``chat {model}`` child (``CLIENT``) with ``gen_ai.response.model``, the model the
provider says answered; each tool call an ``execute_tool {tool}`` child (``INTERNAL``). A run
with a session carries ``gen_ai.conversation.id`` = the session id on every span, so a
session resumed by another replica continues under the same conversation id. Steers
applied, saves, in-doubt journal results, a cancel, and a claim that took the session over
from a holder whose lease lapsed are events on the run's span. The
``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` histograms are
recorded with the buckets the convention advises.

Only ``opentelemetry-api`` is needed (``pip install agentsessions[otel]``); without a
provider given, the global ones are used, and with none set up everything is a no-op.
Message content (transcripts, system prompt, tool arguments and results, steer texts) is
recorded only with ``capture_message_content=True``; endpoints are never read beyond
their ``model`` (they hold API keys), stores not at all.

A telemetry failure never fails a run: it is logged once per run and the run goes on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from agentsessions import events as ev
from agentsessions.endpoint import Endpoint
from agentsessions.loop import EventSink
from agentsessions.messages import Content, ContentType, Message, Role
from agentsessions.runner import Listener
from agentsessions.spec import StopReason

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError("agentsessions.telemetry needs the OpenTelemetry API: pip install agentsessions[otel]") from error

log = logging.getLogger("agentsessions")

TOKEN_BUCKETS = [4**power for power in range(14)]
"""The convention's advice for ``gen_ai.client.token.usage``: 1, 4, 16 ... 67,108,864 tokens."""
DURATION_BUCKETS = [0.01 * 2**power for power in range(14)]
"""The convention's advice for ``gen_ai.client.operation.duration``: 0.01, 0.02 ... 81.92 s."""

_PROVIDERS = {"AnthropicEndpoint": "anthropic", "OpenAIEndpoint": "openai", "ScriptedEndpoint": "scripted"}


def provider_name(endpoint: Endpoint) -> str:
    """``gen_ai.provider.name`` for an endpoint: ``anthropic``, ``openai``; else its class name, lowercased."""
    for kind in type(endpoint).__mro__:
        if kind.__name__ in _PROVIDERS:
            return _PROVIDERS[kind.__name__]
    return type(endpoint).__name__.lower().removesuffix("endpoint") or "unknown"


def server_of(endpoint: Endpoint) -> dict[str, str | int]:
    """``server.address`` and ``server.port`` from the endpoint's ``base_url``: host and port only,
    never a user, password, path or query that the URL might carry."""
    base_url = getattr(endpoint, "base_url", None)
    if not isinstance(base_url, str):
        return {}
    try:
        parts = urllib.parse.urlsplit(base_url)
        host, port = parts.hostname, parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:  # a port that is not a number: no address rather than a wrong one
        return {}
    return {"server.address": host, "server.port": port} if host and port else {}


def model_name(endpoint: Endpoint) -> str | None:
    """The endpoint's ``model`` attribute when it is a str; nothing else of it is read."""
    model = getattr(endpoint, "model", None)
    return model if isinstance(model, str) and model else None


class _RunTrace:
    """One run's spans and its own fenced ``then`` callback; lives from RunStarted to RunFinished."""

    __slots__ = (
        "agent",
        "base",
        "chat",
        "chat_started",
        "context",
        "logged",
        "named",
        "response_model",
        "server",
        "started",
        "then",
        "tools",
    )

    def __init__(self, then: EventSink | None) -> None:
        self.then = Listener(then) if then is not None else None
        self.agent: Span | None = None
        self.context: otel_context.Context | None = None
        self.base: dict[str, str] = {}
        self.server: dict[str, str | int] = {}  # on model requests only: tools and runs are here
        self.named: dict[str, str] = {}  # gen_ai.agent.name: on every span, in no metric
        self.response_model = ""  # the model that gave the run's last answer
        self.chat: Span | None = None
        self.chat_started = 0.0
        self.tools: dict[str, tuple[Span, float]] = {}
        self.started = time.perf_counter()
        self.logged = False


class OpenTelemetry:
    """An ``events`` callback that records each run as GenAI spans and metrics.

    ``tracer_provider`` and ``meter_provider`` default to OpenTelemetry's global ones.
    ``then`` is another events callback, called after this one with every event; if it
    raises, it is treated as the runner treats any events callback (logged once, no
    further events from that run) while telemetry goes on. One instance serves any number
    of runs at once, on any threads: a run's events arrive on the run's thread, and a run
    started inside a tool call of another (a sub-agent) becomes a child of that call.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        then: EventSink | None = None,
        capture_message_content: bool = False,
    ) -> None:
        if then is not None and not callable(then):
            raise TypeError(f"then must be an events callback or None, got {type(then).__name__}")
        if not isinstance(capture_message_content, bool):
            raise TypeError(f"capture_message_content must be a bool, got {capture_message_content!r:.80}")
        self.then = then
        self.capture_message_content = capture_message_content
        self._tracer = trace.get_tracer("agentsessions", tracer_provider=tracer_provider)
        meter = metrics.get_meter("agentsessions", meter_provider=meter_provider)
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._local = threading.local()  # this thread's runs, innermost last
        self._handlers: dict[type, Callable[[_RunTrace, Any], None]] = {
            ev.RunStarted: self._run_started,
            ev.ModelRequested: self._model_requested,
            ev.ModelResponded: self._model_responded,
            ev.ToolCalled: self._tool_called,
            ev.ToolReturned: self._tool_returned,
            ev.SteerApplied: self._steer_applied,
            ev.TranscriptSaved: self._transcript_saved,
            ev.ToolInDoubt: self._tool_in_doubt,
            ev.Compacted: self._compacted,
            ev.CompactionFailed: self._compacted,
            ev.ApprovalRequested: self._approval,
            ev.ApprovalDecided: self._approval,
            ev.RunFinished: self._run_finished,
        }

    def __call__(self, event: ev.Event) -> None:
        """Record ``event``, then pass it on to ``then``."""
        kind = type(event)
        if kind is ev.TextDelta or kind is ev.StepStarted:  # nothing to record: the cheapest path
            self._forward(self._current(), event)
            return
        stack: list[_RunTrace] = self._local.__dict__.setdefault("runs", [])
        if kind is ev.RunStarted:
            stack.append(_RunTrace(self.then))
        run = stack[-1] if stack else None
        handler = self._handlers.get(kind)
        if run is not None and handler is not None:
            try:
                handler(run, event)
            except Exception:
                if not run.logged:  # once a run: a broken exporter must not flood the log
                    run.logged = True
                    log.exception("telemetry failed on %s; the run goes on", kind.__name__)
        if kind is ev.RunFinished and stack:
            stack.pop()
        self._forward(run, event)

    def _current(self) -> _RunTrace | None:
        stack: list[_RunTrace] | None = getattr(self._local, "runs", None)
        return stack[-1] if stack else None

    def _forward(self, run: _RunTrace | None, event: ev.Event) -> None:
        if run is not None:
            if run.then is not None:
                run.then(event)
        elif self.then is not None:  # an event outside any run (called by hand): as without telemetry
            self.then(event)

    # The run's span.

    def _run_started(self, run: _RunTrace, event: ev.RunStarted) -> None:
        base = {"gen_ai.provider.name": provider_name(event.endpoint)}
        model = model_name(event.endpoint)
        if model:
            base["gen_ai.request.model"] = model
        if event.session_id is not None:
            base["gen_ai.conversation.id"] = event.session_id
        run.base = base
        run.server = server_of(event.endpoint)
        run.named = {"gen_ai.agent.name": event.name} if event.name else {}
        outer = self._outer(run)
        attributes = {"gen_ai.operation.name": "invoke_agent", **base, **run.named}
        attributes["agentsessions.replica"] = event.replica
        name = f"invoke_agent {event.name}" if event.name else "invoke_agent"
        run.agent = self._tracer.start_span(name, outer, SpanKind.INTERNAL, attributes)
        run.context = trace.set_span_in_context(run.agent)
        if event.took_over:
            # Another replica's run held this session and its lease ran out: it died or hung.
            run.agent.add_event("agentsessions.session.taken_over", {"agentsessions.replica": event.replica})

    def _outer(self, run: _RunTrace) -> otel_context.Context | None:
        """The parent of a run's span: the tool call of the run it was started in, else the caller's context."""
        stack: list[_RunTrace] = self._local.runs
        if len(stack) > 1:
            outer = stack[-2]
            if outer.tools:
                return trace.set_span_in_context(next(reversed(outer.tools.values()))[0])
            return outer.context
        return None  # the current context of this thread: the caller's own span, if any

    def _run_finished(self, run: _RunTrace, event: ev.RunFinished) -> None:
        error, result = event.error, event.result
        for span, started in run.tools.values():
            self._end(span, started, run, "execute_tool", error)
        run.tools.clear()
        if run.chat is not None:
            self._end(run.chat, run.chat_started, run, "chat", error)
            run.chat = None
        agent = run.agent
        if agent is None:
            return
        usage = result.usage
        agent.set_attributes(
            {
                "gen_ai.response.finish_reasons": [result.stop_reason],
                "gen_ai.usage.input_tokens": usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
                "agentsessions.steps": result.steps,
                "agentsessions.unapplied_steers": len(result.unapplied_steers),
            }
        )
        if run.response_model:
            agent.set_attribute("gen_ai.response.model", run.response_model)
        if result.stop_reason == StopReason.CANCELLED:
            agent.add_event("agentsessions.run.cancelled", {"agentsessions.step": result.steps})
        self._end(agent, run.started, run, "invoke_agent", error)

    def _end(
        self,
        span: Span,
        started: float,
        run: _RunTrace,
        operation: str,
        error: BaseException | str | None,
        answered: dict[str, str] | None = None,
    ) -> None:
        """End ``span``, failed with ``error`` (an exception, or its ``error.type``) if set; record the duration.

        ``answered``: a model request's ``gen_ai.response.model``, for the duration metric.
        """
        attributes = {"gen_ai.operation.name": operation, **run.base, **(run.server if operation == "chat" else {})}
        attributes.update(answered or {})
        if error is not None:
            error_type = error if isinstance(error, str) else type(error).__qualname__
            self._fail(span, error_type, None if isinstance(error, str) else error)
            attributes["error.type"] = error_type
        self._duration.record(time.perf_counter() - started, attributes)
        span.end()

    @staticmethod
    def _fail(span: Span, error_type: str, error: BaseException | None = None) -> None:
        span.set_attribute("error.type", error_type)
        # The type, not the message, as the description: a driver's message is not ours to vouch for.
        span.set_status(Status(StatusCode.ERROR, error_type))
        if error is not None:
            span.record_exception(error)

    # Model requests.

    def _model_requested(self, run: _RunTrace, event: ev.ModelRequested) -> None:
        model = run.base.get("gen_ai.request.model")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            **run.base,
            **run.named,
            **run.server,
            "gen_ai.request.max_tokens": event.request.max_tokens,
            "agentsessions.step": event.step,
        }
        if self.capture_message_content:
            attributes["gen_ai.input.messages"] = _messages_json(event.request.messages)
            if event.request.system:
                attributes["gen_ai.system_instructions"] = json.dumps([_text(event.request.system)])
        name = f"chat {model}" if model else "chat"
        run.chat = self._tracer.start_span(name, run.context, SpanKind.CLIENT, attributes)
        run.chat_started = time.perf_counter()

    def _model_responded(self, run: _RunTrace, event: ev.ModelResponded) -> None:
        span, response = run.chat, event.response
        if span is None:
            return
        run.chat = None
        usage = response.usage
        # The convention counts every input token in input_tokens; ours leaves the cache's out.
        input_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        span.set_attributes(
            {
                "gen_ai.response.finish_reasons": [response.stop_reason],
                "gen_ai.usage.input_tokens": input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
            }
        )
        answered = {"gen_ai.response.model": response.model} if response.model else {}
        span.set_attributes(answered)
        run.response_model = response.model or run.response_model
        if self.capture_message_content:
            output = _message_json(response.message) | {"finish_reason": response.stop_reason}
            span.set_attribute("gen_ai.output.messages", json.dumps([output]))
        metric = {"gen_ai.operation.name": "chat", **run.base, **run.server, **answered}
        self._tokens.record(input_tokens, {**metric, "gen_ai.token.type": "input"})
        self._tokens.record(usage.output_tokens, {**metric, "gen_ai.token.type": "output"})
        self._end(span, run.chat_started, run, "chat", None, answered)

    # Tool calls.

    def _tool_called(self, run: _RunTrace, event: ev.ToolCalled) -> None:
        call = event.call
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            **run.base,
            **run.named,
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "agentsessions.step": event.step,
        }
        if self.capture_message_content:
            attributes["gen_ai.tool.call.arguments"] = call.input
        span = self._tracer.start_span(f"execute_tool {call.name}", run.context, SpanKind.INTERNAL, attributes)
        run.tools[call.id] = (span, time.perf_counter())

    def _tool_returned(self, run: _RunTrace, event: ev.ToolReturned) -> None:
        result = event.result
        opened = run.tools.pop(result.tool_use_id, None)
        if opened is None:
            return
        span, started = opened
        if self.capture_message_content:
            span.set_attribute("gen_ai.tool.call.result", result.text)
        # The tool raised (its exception's type, recorded on the span), or was unknown, or got
        # bad arguments ("tool_error"): the model reads why; the span says so.
        self._end(span, started, run, "execute_tool", event.error or ("tool_error" if result.is_error else None))

    # Events on the run's span.

    def _steer_applied(self, run: _RunTrace, event: ev.SteerApplied) -> None:
        attributes: dict[str, Any] = {"agentsessions.step": event.step, "agentsessions.steer.source": event.source}
        if self.capture_message_content:
            attributes["agentsessions.steer.text"] = event.text
        if run.agent is not None:
            run.agent.add_event("agentsessions.steer.applied", attributes)

    def _transcript_saved(self, run: _RunTrace, event: ev.TranscriptSaved) -> None:
        if run.agent is not None:
            attributes = {"agentsessions.step": event.step, "agentsessions.messages": event.messages}
            run.agent.add_event("agentsessions.transcript.saved", attributes)

    def _compacted(self, run: _RunTrace, event: ev.Compacted | ev.CompactionFailed) -> None:
        if run.agent is None:
            return
        attributes: dict[str, Any] = {"agentsessions.step": event.step}
        if isinstance(event, ev.CompactionFailed):
            attributes["error.type"] = type(event.error).__qualname__
            run.agent.add_event("agentsessions.compaction.failed", attributes)
            return
        attributes["agentsessions.compaction.covers"] = event.covers
        if self.capture_message_content:
            attributes["agentsessions.compaction.summary"] = event.summary
        run.agent.add_event("agentsessions.compaction.done", attributes)

    def _tool_in_doubt(self, run: _RunTrace, event: ev.ToolInDoubt) -> None:
        if run.agent is not None:
            attributes: dict[str, Any] = {
                "gen_ai.tool.name": event.call.name,
                "gen_ai.tool.call.id": event.call.id,
                "agentsessions.tool.rerun": event.rerun,
            }
            run.agent.add_event("agentsessions.tool.in_doubt", attributes)

    def _approval(self, run: _RunTrace, event: ev.ApprovalRequested | ev.ApprovalDecided) -> None:
        if run.agent is not None:
            approval = event.approval
            attributes: dict[str, Any] = {
                "agentsessions.step": event.step,
                "gen_ai.tool.name": approval.tool,
                "gen_ai.tool.call.id": approval.call_id,
            }
            if approval.decision is not None:
                attributes["agentsessions.approval.decision"] = approval.decision
                # Whether a person edited the input, never the input: the arguments are content.
                attributes["agentsessions.approval.edited"] = approval.original_input is not None
            if self.capture_message_content:
                attributes["gen_ai.tool.call.arguments"] = approval.input
            kind = "requested" if isinstance(event, ev.ApprovalRequested) else "decided"
            run.agent.add_event(f"agentsessions.approval.{kind}", attributes)


# Content, in the convention's message shape (only with capture_message_content=True).


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "content": text}


def _part(block: Content) -> dict[str, Any]:
    kind = block.type
    if kind is ContentType.TEXT or kind is ContentType.COMPACTION:
        return _text(block.text)
    if kind is ContentType.TOOL_USE:
        try:
            arguments: Any = json.loads(block.input)
        except ValueError:
            arguments = block.input
        return {"type": "tool_call", "id": block.id, "name": block.name, "arguments": arguments}
    if kind is ContentType.TOOL_RESULT:
        return {"type": "tool_call_response", "id": block.tool_use_id, "response": block.text}
    if kind is ContentType.THINKING:
        return {"type": "reasoning", "content": block.text}
    if block.url:
        return {"type": "uri", "modality": kind.value, "mime_type": block.media_type, "uri": block.url}
    return {"type": kind.value}  # images' and documents' bytes, encrypted thinking, raw blocks: not copied


def _message_json(message: Message) -> dict[str, Any]:
    role = message.role.value
    if message.role is Role.USER and all(c.type is ContentType.TOOL_RESULT for c in message.content):
        role = "tool"
    return {"role": role, "parts": [_part(block) for block in message.content]}


def _messages_json(messages: Sequence[Message]) -> str:
    return json.dumps([_message_json(message) for message in messages])


__all__ = ["DURATION_BUCKETS", "TOKEN_BUCKETS", "OpenTelemetry", "model_name", "provider_name"]
