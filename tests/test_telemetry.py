"""agentsessions.telemetry: runs as GenAI spans and metrics, read back through the OpenTelemetry SDK."""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")  # before the imports that need them

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import agentsessions as agent
from agentsessions import events as ev
from agentsessions.endpoints import AnthropicEndpoint, ScriptedEndpoint
from agentsessions.loop import IN_DOUBT
from agentsessions.runs import Claim, Renewal
from agentsessions.stores import sqlite
from agentsessions.stores.memory import MemoryStore
from agentsessions.telemetry import DURATION_BUCKETS, TOKEN_BUCKETS, OpenTelemetry
from agentsessions.testing.fakes.messages import FakeMessagesAPI, Reply, text, tool_use
from tests.support.scripts import call, double, echo_last_result

USER = agent.Message.user("double 1, please")
USAGE = agent.Usage(input_tokens=10, output_tokens=5, cache_read_tokens=3, cache_write_tokens=2)
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "agentsessions.steer.text",
}


class Otel:
    """An SDK tracer provider with an in-memory exporter, and a meter provider with an in-memory reader."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def telemetry(self, **options: Any) -> OpenTelemetry:
        return OpenTelemetry(self.tracer_provider, self.meter_provider, **options)

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def points(self, name: str) -> list[HistogramDataPoint]:
        data = self.reader.get_metrics_data()
        assert data is not None
        found = [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]
        assert all(isinstance(point, HistogramDataPoint) for point in found)
        return found  # type: ignore[return-value]


@pytest.fixture
def otel() -> Iterator[Otel]:
    recorded = Otel()
    yield recorded
    recorded.tracer_provider.shutdown()
    recorded.meter_provider.shutdown()


def attributes(item: Any) -> dict[str, Any]:
    """The attributes of a span, a span event or a metric point, as a dict (SDK objects may hold None)."""
    return dict(item.attributes or {})


def tree(spans: Sequence[ReadableSpan]) -> list[tuple[str, str | None, SpanKind]]:
    """Each span's name, its parent's name and its kind, in the order they ended."""
    names = {span.context.span_id: span.name for span in spans if span.context is not None}
    return [(span.name, names.get(span.parent.span_id) if span.parent else None, span.kind) for span in spans]


def by_name(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def two_steps() -> ScriptedEndpoint:
    return ScriptedEndpoint([agent.ModelResponse(call("double", n=1), "tool_use", USAGE), echo_last_result])


def test_a_run_with_a_tool_call_is_one_agent_span_with_chat_and_tool_children(otel: Otel) -> None:
    seen: list[object] = []
    runner = agent.Runner("replica-a")
    result = runner.run(agent.Spec(tools=[double]), [USER], two_steps(), otel.telemetry(then=seen.append))
    assert result.text == "result: 2"
    spans = otel.spans()
    assert tree(spans) == [
        ("chat", "invoke_agent", SpanKind.CLIENT),
        ("execute_tool double", "invoke_agent", SpanKind.INTERNAL),
        ("chat", "invoke_agent", SpanKind.CLIENT),
        ("invoke_agent", None, SpanKind.INTERNAL),
    ]
    assert len({span.context.trace_id for span in spans if span.context}) == 1
    first_chat, tool, second_chat, run = spans
    base = {"gen_ai.provider.name": "scripted"}
    assert attributes(first_chat) == {
        "gen_ai.operation.name": "chat",
        **base,
        "gen_ai.request.max_tokens": 4096,
        "agentsessions.step": 1,
        "gen_ai.response.finish_reasons": ("tool_use",),
        "gen_ai.usage.input_tokens": 15,  # the convention counts cached input too: 10 + 3 + 2
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 3,
        "gen_ai.usage.cache_creation.input_tokens": 2,
    }
    assert attributes(tool) == {
        "gen_ai.operation.name": "execute_tool",
        **base,
        "gen_ai.tool.name": "double",
        "gen_ai.tool.call.id": "call-1",
        "gen_ai.tool.type": "function",
        "agentsessions.step": 1,
    }
    assert attributes(second_chat)["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert attributes(run) == {
        "gen_ai.operation.name": "invoke_agent",
        **base,
        "agentsessions.replica": "replica-a",
        "gen_ai.response.finish_reasons": ("end_turn",),
        "gen_ai.usage.input_tokens": 15,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 3,
        "gen_ai.usage.cache_creation.input_tokens": 2,
        "agentsessions.steps": 2,
        "agentsessions.unapplied_steers": 0,
    }
    assert all(span.status.status_code is StatusCode.UNSET for span in spans)
    # `then` got every event, as it would have without telemetry.
    assert [type(e).__name__ for e in seen][:2] == ["RunStarted", "StepStarted"]
    assert isinstance(seen[-1], ev.RunFinished) and len(seen) == 10


def test_the_histograms_follow_the_convention(otel: Otel) -> None:
    agent.Runner().run(agent.Spec(tools=[double]), [USER], two_steps(), otel.telemetry())
    tokens = {attributes(point)["gen_ai.token.type"]: point for point in otel.points("gen_ai.client.token.usage")}
    assert (tokens["input"].sum, tokens["input"].count) == (15, 2)
    assert (tokens["output"].sum, tokens["output"].count) == (5, 2)
    assert list(tokens["input"].explicit_bounds) == TOKEN_BUCKETS
    assert attributes(tokens["input"]) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.token.type": "input",
    }
    durations = {attributes(point)["gen_ai.operation.name"]: point for point in otel.points(DURATION)}
    assert {name: point.count for name, point in durations.items()} == {"chat": 2, "execute_tool": 1, "invoke_agent": 1}
    assert list(durations["chat"].explicit_bounds) == DURATION_BUCKETS
    assert durations["invoke_agent"].sum >= durations["chat"].sum


DURATION = "gen_ai.client.operation.duration"


KEY = "sk-ant-test-telemetry-never-export-me"


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_run_names_its_model_provider_and_server_and_never_its_key(otel: Otel, stream: bool) -> None:
    script = [
        Reply([tool_use("toolu_1", "double", {"n": 4})], cache_read=30, cache_write=20),
        Reply([text("8")]),
    ]
    seen: list[object] = []
    with FakeMessagesAPI(script, api_key=KEY) as fake:
        endpoint = AnthropicEndpoint("claude-test", api_key=KEY, base_url=fake.origin, stream=stream)
        telemetry = otel.telemetry(then=seen.append, capture_message_content=True)
        assert agent.Runner().run(agent.Spec(tools=[double]), [USER], endpoint, telemetry).text == "8"
        port = int(fake.origin.rsplit(":", 1)[1])
    spans = otel.spans()
    assert [span.name for span in spans] == [
        "chat claude-test",
        "execute_tool double",
        "chat claude-test",
        "invoke_agent",
    ]
    first = attributes(spans[0])
    assert {key: first[key] for key in ("gen_ai.provider.name", "gen_ai.request.model", "server.address")} == {
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-test",
        "server.address": "127.0.0.1",
    }
    assert first["server.port"] == port
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.cache_read.input_tokens"]) == (11 + 30 + 20, 30)
    assert (
        "server.address" not in attributes(spans[1]) and attributes(spans[3])["gen_ai.request.model"] == "claude-test"
    )
    assert KEY not in _strings(spans) and "never-export" not in repr([span.to_json() for span in spans])
    assert any(isinstance(event, ev.TextDelta) for event in seen) is stream  # forwarded to then= untouched


@pytest.mark.parametrize("stream", [False, True])
def test_the_agent_name_is_on_every_span_and_the_answering_model_on_chats_and_the_run(otel: Otel, stream: bool) -> None:
    script = [
        Reply([tool_use("toolu_1", "double", {"n": 4})], model="claude-test-1"),
        Reply([text("8")], model="claude-test-2"),
    ]
    with FakeMessagesAPI(script, api_key=KEY) as fake:
        endpoint = AnthropicEndpoint("claude-test", api_key=KEY, base_url=fake.origin, stream=stream)
        spec = agent.Spec(tools=[double], name="Math Tutor")
        assert agent.Runner().run(spec, [USER], endpoint, otel.telemetry()).text == "8"
    spans = otel.spans()
    assert [span.name for span in spans] == [
        "chat claude-test",
        "execute_tool double",
        "chat claude-test",
        "invoke_agent Math Tutor",
    ]
    assert {attributes(span)["gen_ai.agent.name"] for span in spans} == {"Math Tutor"}
    answered = [attributes(span).get("gen_ai.response.model") for span in spans]
    assert answered == ["claude-test-1", None, "claude-test-2", "claude-test-2"]  # the run: its last answer's
    assert {attributes(span)["gen_ai.request.model"] for span in spans} == {"claude-test"}
    tokens = {(p.attributes or {}).get("gen_ai.response.model") for p in otel.points("gen_ai.client.token.usage")}
    assert tokens == {"claude-test-1", "claude-test-2"}
    durations = otel.points("gen_ai.client.operation.duration")
    chats = [p.attributes or {} for p in durations if (p.attributes or {}).get("gen_ai.operation.name") == "chat"]
    assert {a.get("gen_ai.response.model") for a in chats} == {"claude-test-1", "claude-test-2"}
    assert not any("gen_ai.agent.name" in (p.attributes or {}) for p in durations)  # spans only, not metrics


def test_a_run_without_a_name_or_a_named_model_leaves_both_out(otel: Otel) -> None:
    agent.Runner().run(agent.Spec(tools=[double]), [USER], two_steps(), otel.telemetry())
    spans = otel.spans()
    assert spans[-1].name == "invoke_agent"
    assert not any({"gen_ai.agent.name", "gen_ai.response.model"} & set(attributes(span)) for span in spans)
    assert not any(event.name == "agentsessions.session.taken_over" for event in spans[-1].events)


class Hangs(sqlite.SQLiteStore):
    """Replica A's view of the file: once its process hangs, its lease renewals reach nothing."""

    hung = False

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        return Renewal() if self.hung else super().renew(claims)


def test_one_session_keeps_its_conversation_id_across_replicas(otel: Otel, tmp_path: Path) -> None:
    path = str(tmp_path / "sessions.db")
    in_send, wake = threading.Event(), threading.Event()

    @agent.tool
    def send(to: str) -> str:
        """Send the report (not idempotent): the first replica hangs while it runs, as if dead."""
        if threading.current_thread().name != "replica-b":
            first.hung = True
            in_send.set()
            wake.wait(20)
        return f"sent to {to}"

    first, second = Hangs(path), sqlite.open(path)  # two replicas, two store objects, one file
    try:
        session_a = agent.open("conversation-7", first)
        spec_a = agent.Spec(tools=[send], session=session_a, journal=True, lease=0.2)
        replica_a = agent.Runner("replica-a")
        turn_one = ScriptedEndpoint([agent.Message.assistant("hello")])
        replica_a.run(spec_a, [agent.Message.user("hi")], turn_one, otel.telemetry())  # released
        messages = [*session_a.messages(), agent.Message.user("send it to r1")]
        hanging = replica_a.start(spec_a, messages, ScriptedEndpoint([call("send", "c1", to="r1")]), otel.telemetry())
        assert in_send.wait(10)
        # Replica B takes over once A's lease has lapsed, and resumes from the stored transcript.
        spec_b = agent.Spec(tools=[send], session=agent.open("conversation-7", second), journal=True)
        resume = threading.Thread(
            target=_resume_when_stalled, args=(spec_b, second, otel.telemetry()), name="replica-b"
        )
        resume.start()
        resume.join(20)
        spans = otel.spans()  # before A wakes: what a dead replica A would have left
        wake.set()
        with pytest.raises(agent.RunError) as superseded:  # woken, it writes nothing more
            hanging.wait(10)
        assert isinstance(superseded.value.__cause__, agent.ConflictError)
    finally:
        first.close()
        second.close()
    runs = by_name(spans, "invoke_agent")
    assert [attributes(run)["agentsessions.replica"] for run in runs] == ["replica-a", "replica-b"]
    # The hung run's own span had not ended (as if its process were gone); what it finished was exported.
    assert [span.name for span in spans] == ["chat", "invoke_agent", "chat", "chat", "invoke_agent"]
    assert {attributes(span)["gen_ai.conversation.id"] for span in spans} == {"conversation-7"}
    assert len({span.context.trace_id for span in runs if span.context}) == 2  # two runs, joined by the id
    resumed = runs[1]
    in_doubt = [event for event in resumed.events if event.name == "agentsessions.tool.in_doubt"]
    assert [attributes(event) for event in in_doubt] == [
        {"gen_ai.tool.name": "send", "gen_ai.tool.call.id": "c1", "agentsessions.tool.rerun": False}
    ]
    saves = [event for event in resumed.events if event.name == "agentsessions.transcript.saved"]
    assert saves and all(attributes(event)["agentsessions.messages"] >= 5 for event in saves)
    # The first run's claim was a first claim; B's ended A's lapsed lease, and says so.
    taken = [[attributes(e) for e in run.events if e.name == "agentsessions.session.taken_over"] for run in runs]
    assert taken == [[], [{"agentsessions.replica": "replica-b"}]]


def test_a_resumed_run_reports_each_call_in_doubt_and_reruns_only_the_idempotent_one(otel: Otel) -> None:
    @agent.tool(idempotent=True)
    def fetch() -> str:
        """Fetch a page (idempotent)."""
        return "page"

    @agent.tool
    def send() -> str:
        """Send the report (not idempotent)."""
        return "sent"

    calls = agent.Message(
        agent.Role.ASSISTANT, [agent.Content.tool_use("c1", "fetch", "{}"), agent.Content.tool_use("c2", "send", "{}")]
    )
    doubt = agent.Message(
        agent.Role.USER, [agent.Content.tool_result(call_id, IN_DOUBT, is_error=True) for call_id in ("c1", "c2")]
    )
    seen: list[object] = []
    spec = agent.Spec(tools=[fetch, send], session=agent.open("s", MemoryStore()), journal=True)
    endpoint = ScriptedEndpoint([agent.Message.assistant("ok")])
    agent.Runner().run(spec, [USER, calls, doubt], endpoint, otel.telemetry(then=seen.append))
    assert [(e.call.id, e.rerun) for e in seen if isinstance(e, ev.ToolInDoubt)] == [("c1", True), ("c2", False)]
    spans = otel.spans()
    assert [span.name for span in spans] == ["execute_tool fetch", "chat", "invoke_agent"]
    assert attributes(spans[0])["agentsessions.step"] == 0  # before the first step
    in_doubt = [attributes(e) for e in spans[-1].events if e.name == "agentsessions.tool.in_doubt"]
    assert [(a["gen_ai.tool.call.id"], a["agentsessions.tool.rerun"]) for a in in_doubt] == [
        ("c1", True),
        ("c2", False),
    ]


def test_a_wait_and_the_decisions_it_acts_on_are_span_events_of_their_runs(otel: Otel) -> None:
    @agent.tool(needs_approval=True)
    def pay(invoice: int) -> str:
        """Pay an invoice."""
        return f"paid {invoice}"

    uses = [agent.Content.tool_use(f"c{n}", "pay", f'{{"invoice": {n}}}') for n in (1, 2)]
    session = agent.open("s", MemoryStore())
    spec = agent.Spec(tools=[pay], session=session)
    endpoint = ScriptedEndpoint([agent.Message(agent.Role.ASSISTANT, uses), agent.Message.assistant("ok")])
    agent.Runner().run(spec, [USER], endpoint, otel.telemetry())
    session.decide({"c1": agent.Decision.approve(by="ann", input='{"invoice": 7}'), "c2": agent.Decision.reject()})
    agent.Runner().run(spec, agent.Resume(), endpoint, otel.telemetry(capture_message_content=True))
    waited, resumed = by_name(otel.spans(), "invoke_agent")
    requested = [attributes(e) for e in waited.events if e.name == "agentsessions.approval.requested"]
    assert requested == [
        {"agentsessions.step": 1, "gen_ai.tool.name": "pay", "gen_ai.tool.call.id": call} for call in ("c1", "c2")
    ]
    decided = [attributes(e) for e in resumed.events if e.name == "agentsessions.approval.decided"]
    assert [
        (a["gen_ai.tool.call.id"], a["agentsessions.approval.decision"], a["agentsessions.step"]) for a in decided
    ] == [
        ("c1", "approved", 0),
        ("c2", "rejected", 0),
    ]
    assert [a["agentsessions.approval.edited"] for a in decided] == [True, False]  # whether, never the input
    assert decided[0]["gen_ai.tool.call.arguments"] == '{"invoice": 7}'  # content only when asked for: what ran
    assert '{"invoice": 1}' not in str(decided)  # nor the model's input it replaced
    assert "ann" not in str(decided)  # who decided is not recorded


def test_without_providers_the_global_ones_serve_and_bad_options_are_refused() -> None:
    seen: list[object] = []
    result = agent.Runner().run(agent.Spec(tools=[double]), [USER], two_steps(), OpenTelemetry(then=seen.append))
    assert result.text == "result: 2" and len(seen) == 10  # OpenTelemetry's global providers: no-ops here
    with pytest.raises(TypeError, match="then must be an events callback"):
        OpenTelemetry(then="print")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="capture_message_content must be a bool"):
        OpenTelemetry(capture_message_content="yes")  # type: ignore[arg-type]


def _resume_when_stalled(spec: agent.Spec, store: agent.RunStore, telemetry: OpenTelemetry) -> None:
    from tests.support.waiting import wait_for

    wait_for("replica A's lease to lapse", lambda: store.info("conversation-7").state is agent.RunState.STALLED)
    messages = store.messages("conversation-7")
    endpoint = ScriptedEndpoint([agent.Message.assistant("sent, though the first attempt's result was lost")])
    agent.Runner("replica-b").run(spec, messages, endpoint, telemetry)


def test_a_failed_run_sets_error_type_and_status_on_its_spans(otel: Otel) -> None:
    with pytest.raises(agent.RunError):
        agent.Runner().run(agent.Spec(), [USER], ScriptedEndpoint([]), otel.telemetry())
    chat, run = otel.spans()
    for span in (chat, run):
        assert attributes(span)["error.type"] == "EndpointError"
        assert span.status.status_code is StatusCode.ERROR
        assert [event.name for event in span.events] == ["exception"]
    assert attributes(run)["gen_ai.response.finish_reasons"] == ("error",)
    failed = [point for point in otel.points(DURATION) if "error.type" in attributes(point)]
    assert sorted(attributes(point)["gen_ai.operation.name"] for point in failed) == ["chat", "invoke_agent"]


def test_a_tool_that_raises_is_an_execute_tool_span_in_error_in_a_run_that_succeeds(otel: Otel) -> None:
    @agent.tool
    def broken() -> str:
        """Always fails."""
        raise RuntimeError("disk full")

    endpoint = ScriptedEndpoint([call("broken"), agent.Message.assistant("it failed")])
    agent.Runner().run(agent.Spec(tools=[broken]), [USER], endpoint, otel.telemetry())
    (tool,) = by_name(otel.spans(), "execute_tool broken")
    # The exception's own type, and the exception recorded, as for a failed model request.
    assert attributes(tool)["error.type"] == "RuntimeError"
    assert tool.status.status_code is StatusCode.ERROR
    (exception,) = [event for event in tool.events if event.name == "exception"]
    assert attributes(exception)["exception.message"] == "disk full"
    (run,) = by_name(otel.spans(), "invoke_agent")
    assert run.status.status_code is StatusCode.UNSET


def test_arguments_the_model_got_wrong_are_a_tool_error_span_and_the_tool_does_not_run(otel: Otel) -> None:
    endpoint = ScriptedEndpoint([call("double", n="two"), agent.Message.assistant("oops")])
    result = agent.Runner().run(agent.Spec(tools=[double]), [USER], endpoint, otel.telemetry())
    (tool,) = by_name(otel.spans(), "execute_tool double")
    assert attributes(tool)["error.type"] == "tool_error"
    assert [event.name for event in tool.events] == []
    assert "n: expected integer" in result.messages[2].content[0].text


def _steered_run(otel: Otel, **options: Any) -> None:
    """A run on a session, steered by one of its tools (as another replica would) and cancelled by another."""
    session = agent.open("s", MemoryStore())
    handle: list[agent.Run] = []
    started = threading.Event()

    @agent.tool
    def remind() -> str:
        """Steers the session."""
        session.steer("and say it in French")
        return "secret tool result"

    @agent.tool
    def stop() -> str:
        """Cancels the run."""
        started.wait(10)
        handle[0].cancel()
        return "stopping"

    replies = [call("remind", "c1"), call("stop", "c2"), agent.Message.assistant("never asked")]
    spec = agent.Spec(tools=[remind, stop], session=session, system="you are terse")
    user = [agent.Message.user("my secret question")]
    handle.append(agent.Runner().start(spec, user, ScriptedEndpoint(replies), otel.telemetry(**options)))
    started.set()
    assert handle[0].wait(10).stop_reason == "cancelled"


def _strings(spans: Sequence[ReadableSpan]) -> str:
    values = [value for span in spans for value in attributes(span).values()]
    values += [value for span in spans for event in span.events for value in attributes(event).values()]
    return json.dumps([str(value) for value in values])


def test_steers_saves_and_cancels_are_events_and_content_stays_out_by_default(otel: Otel) -> None:
    _steered_run(otel)
    spans = otel.spans()
    (run,) = by_name(spans, "invoke_agent")
    names = [event.name for event in run.events]
    assert "agentsessions.steer.applied" in names and names[-1] == "agentsessions.run.cancelled"
    assert names.count("agentsessions.transcript.saved") >= 2
    (steer,) = [event for event in run.events if event.name == "agentsessions.steer.applied"]
    assert attributes(steer) == {"agentsessions.step": 2, "agentsessions.steer.source": "session"}
    assert not CONTENT_KEYS & {key for span in spans for key in attributes(span)}
    for secret in ("secret", "French", "terse"):
        assert secret not in _strings(spans)


def test_content_is_recorded_when_asked_for_in_the_conventions_shape(otel: Otel) -> None:
    _steered_run(otel, capture_message_content=True)
    spans = otel.spans()
    first_chat = by_name(spans, "chat")[0]
    chat = attributes(first_chat)
    assert json.loads(str(chat["gen_ai.system_instructions"])) == [{"type": "text", "content": "you are terse"}]
    inputs = json.loads(str(chat["gen_ai.input.messages"]))
    assert inputs[0]["role"] == "user" and inputs[0]["parts"][0] == {"type": "text", "content": "my secret question"}
    assert json.loads(str(chat["gen_ai.output.messages"])) == [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "remind", "arguments": {}}],
            "finish_reason": "tool_use",
        }
    ]
    (tool,) = by_name(spans, "execute_tool remind")
    assert attributes(tool)["gen_ai.tool.call.arguments"] == "{}"
    assert attributes(tool)["gen_ai.tool.call.result"] == "secret tool result"
    second_inputs = json.loads(str(attributes(by_name(spans, "chat")[1])["gen_ai.input.messages"]))
    assert second_inputs[-1]["role"] == "user"  # the tool's result, and the steer after it
    assert second_inputs[-1]["parts"][0] == {"type": "tool_call_response", "id": "c1", "response": "secret tool result"}
    (run,) = by_name(spans, "invoke_agent")
    (steer,) = [event for event in run.events if event.name == "agentsessions.steer.applied"]
    assert attributes(steer)["agentsessions.steer.text"] == "and say it in French"


class BrokenTracerProvider(trace.TracerProvider):
    """A tracer provider whose tracers fail at every span."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return BrokenTracer()


class BrokenTracer(trace.NoOpTracer):
    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        raise RuntimeError("the tracer is broken")


class RaisingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise ConnectionError("the collector is down")


def test_a_raising_tracer_or_exporter_never_fails_the_run(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[object] = []
    broken = OpenTelemetry(BrokenTracerProvider(), then=seen.append)
    with caplog.at_level(logging.ERROR, logger="agentsessions"):
        result = agent.Runner().run(agent.Spec(tools=[double]), [USER], two_steps(), broken)
    assert result.text == "result: 2" and len(seen) == 10
    failures = [r for r in caplog.records if r.name == "agentsessions" and "telemetry failed" in r.getMessage()]
    assert len(failures) == 1  # once a run, not once an event

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RaisingExporter()))
    result = agent.Runner().run(agent.Spec(tools=[double]), [USER], two_steps(), OpenTelemetry(provider))
    assert result.text == "result: 2"


def test_a_then_callback_that_raises_is_fenced_off_as_the_runner_would_and_telemetry_goes_on(
    otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[object] = []

    def fragile(event: object) -> None:
        calls.append(event)
        raise ValueError("the UI went away")

    with caplog.at_level(logging.ERROR, logger="agentsessions"):
        result = agent.Runner().run(agent.Spec(tools=[double]), [USER], two_steps(), otel.telemetry(then=fragile))
    assert result.text == "result: 2"
    assert len(calls) == 1  # no further events from this run, as without telemetry
    (record,) = [r for r in caplog.records if "events callback raised" in r.getMessage()]
    assert "RunStarted" in record.getMessage() and record.exc_info is not None
    assert len(otel.spans()) == 4  # every span ended


def test_a_sub_agent_run_inside_a_tool_is_a_child_of_that_tool_call(otel: Otel) -> None:
    telemetry = otel.telemetry()

    @agent.tool
    def ask_expert(question: str) -> str:
        """Ask another agent."""
        endpoint = ScriptedEndpoint([agent.Message.assistant("42")])
        return agent.Runner().run(agent.Spec(), [agent.Message.user(question)], endpoint, telemetry).text

    endpoint = ScriptedEndpoint([call("ask_expert", question="why?"), echo_last_result])
    agent.Runner().run(agent.Spec(tools=[ask_expert]), [USER], endpoint, telemetry)
    assert tree(otel.spans()) == [
        ("chat", "invoke_agent", SpanKind.CLIENT),
        ("chat", "invoke_agent", SpanKind.CLIENT),  # the expert's
        ("invoke_agent", "execute_tool ask_expert", SpanKind.INTERNAL),
        ("execute_tool ask_expert", "invoke_agent", SpanKind.INTERNAL),
        ("chat", "invoke_agent", SpanKind.CLIENT),
        ("invoke_agent", None, SpanKind.INTERNAL),
    ]


def test_concurrent_runs_on_one_instance_keep_their_spans_apart(otel: Otel) -> None:
    telemetry = otel.telemetry()
    both_asking = threading.Barrier(2, timeout=10)

    def reply(request: agent.ModelRequest) -> agent.Message:
        both_asking.wait()  # each run's chat span is open while the other's is
        return agent.Message.assistant("done")

    specs = [agent.Spec(session=agent.open(f"s{n}", MemoryStore())) for n in range(2)]
    runs = [agent.Runner().start(spec, [USER], ScriptedEndpoint([reply]), telemetry) for spec in specs]
    for run in runs:
        run.wait(10)
    spans = otel.spans()
    ids = {span.context.span_id: span for span in spans if span.context}
    for chat in by_name(spans, "chat"):
        assert chat.parent is not None
        parent = ids[chat.parent.span_id]
        assert parent.name == "invoke_agent"
        conversation = attributes(parent)["gen_ai.conversation.id"]
        assert attributes(chat)["gen_ai.conversation.id"] == conversation
    assert sorted(str(attributes(s)["gen_ai.conversation.id"]) for s in by_name(spans, "chat")) == ["s0", "s1"]


def test_a_run_is_a_child_of_the_callers_span_with_run_and_with_start(otel: Otel) -> None:
    telemetry = otel.telemetry()
    tracer = otel.tracer_provider.get_tracer("the application")
    with tracer.start_as_current_span("handle request"):
        agent.Runner().run(agent.Spec(), [USER], ScriptedEndpoint([agent.Message.assistant("a")]), telemetry)
        started = agent.Runner().start(
            agent.Spec(), [USER], ScriptedEndpoint([agent.Message.assistant("b")]), telemetry
        )
        started.wait(10)
    spans = otel.spans()
    assert [name for name, parent, _ in tree(spans) if name == "invoke_agent" and parent == "handle request"] == [
        "invoke_agent",
        "invoke_agent",
    ]
    assert len({span.context.trace_id for span in spans if span.context}) == 1


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps each request body, answers 200 with an empty response."""

    server: ReceiverServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads what arrived, not the access log."""


class ReceiverServer(ThreadingHTTPServer):
    received: list[tuple[str, str, bytes]]


def test_spans_reach_an_otlp_http_receiver(tmp_path: Path) -> None:
    server = ReceiverServer(("127.0.0.1", 0), Receiver)
    server.received = []
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{server.server_address[1]}/v1/traces", timeout=5)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store = sqlite.open(str(tmp_path / "s.db"))
    try:
        spec = agent.Spec(tools=[double], session=agent.open("otlp-session", store))
        agent.Runner().run(spec, [USER], two_steps(), OpenTelemetry(provider))
        provider.shutdown()
    finally:
        store.close()
        server.shutdown()
        server.server_close()
    assert {(path, kind) for path, kind, _ in server.received} == {("/v1/traces", "application/x-protobuf")}
    arrived = []
    for _, _, body in server.received:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        arrived += [
            span for resource in request.resource_spans for scope in resource.scope_spans for span in scope.spans
        ]
    assert [span.name for span in arrived] == ["chat", "execute_tool double", "chat", "invoke_agent"]
    for span in arrived:
        attributes = {a.key: a.value for a in span.attributes}
        assert attributes["gen_ai.conversation.id"].string_value == "otlp-session"
    root = arrived[-1]
    assert all(span.parent_span_id == root.span_id for span in arrived[:-1])
    tokens = {a.key: a.value.int_value for a in root.attributes if a.key.startswith("gen_ai.usage.")}
    assert tokens["gen_ai.usage.input_tokens"] == 15 and tokens["gen_ai.usage.output_tokens"] == 5


def test_a_compaction_is_an_event_on_the_run_span(otel: Otel) -> None:
    def reply(request: agent.ModelRequest) -> agent.Message:
        if request.messages[-1].content[-1].text.startswith("Summarise"):
            return agent.Message.assistant("the summary")
        return agent.Message.assistant("ok")

    old = [agent.Message.user("a" * 400), agent.Message.assistant("b" * 400), agent.Message.user("c" * 400)]
    spec = agent.Spec(compaction=agent.Compaction(trigger_tokens=200, keep_tokens=50))
    agent.Runner().run(spec, old, ScriptedEndpoint([reply, reply]), otel.telemetry())
    (run,) = by_name(otel.spans(), "invoke_agent")
    (done,) = [attributes(e) for e in run.events if e.name == "agentsessions.compaction.done"]
    assert done == {"agentsessions.step": 1, "agentsessions.compaction.covers": 1}
