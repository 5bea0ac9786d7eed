"""Tools: schemas derived from type hints, and every mistake of the model's an observation."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal, NoReturn

import attrs
import pytest

import agentsessions as agent
from agentsessions import events as ev
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.tools import call


@agent.tool
def search(
    query: str, limit: int = 10, mode: Literal["fast", "full"] | None = None, tags: list[str] | None = None
) -> str:
    """Search the code base.

    Args:
        query: what to look for.
        limit: how many hits at most.
    """
    return f"{query}:{limit}:{mode}:{tags}"


def test_the_decorator_derives_name_description_and_schema() -> None:
    assert search.name == "search"
    assert search.description == "Search the code base."
    assert search.input_schema == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for."},
            "limit": {"type": "integer", "description": "how many hits at most."},
            "mode": {"anyOf": [{"enum": ["fast", "full"]}, {"type": "null"}]},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def test_the_decorator_takes_a_name_and_description() -> None:
    @agent.tool(name="lookup", description="Look it up.")
    def f(x: float) -> str:
        return str(x)

    assert (f.name, f.description, f.input_schema["properties"]) == ("lookup", "Look it up.", {"x": {"type": "number"}})


def test_a_parameter_without_a_hint_is_refused() -> None:
    def f(x) -> str:  # type: ignore[no-untyped-def]
        return ""

    with pytest.raises(TypeError, match="needs a type hint on f's parameter 'x'"):
        agent.tool(f)


def _properties(fn: Callable[..., str]) -> dict[str, Any]:
    return dict(agent.tool(fn).input_schema["properties"])


def test_a_fixed_tuple_is_described_position_by_position() -> None:
    def f(pair: tuple[int, str], many: tuple[float, ...], none: tuple[()], bare: tuple) -> str:  # type: ignore[type-arg]
        return ""

    assert _properties(f) == {
        "pair": {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "items": False,
            "minItems": 2,
            "maxItems": 2,
        },
        "many": {"type": "array", "items": {"type": "number"}},
        "none": {"type": "array", "maxItems": 0},
        "bare": {"type": "array"},
    }


def test_optional_allows_null_and_unions_list_every_option() -> None:
    def f(a: int | None, b: int | str | None = None, c: list[int | None] | None = None, d: None = None) -> str:
        return ""

    assert _properties(f) == {
        "a": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "b": {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]},
        "c": {
            "anyOf": [{"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}, {"type": "null"}]
        },
        "d": {"type": "null"},
    }


def test_dicts_sets_and_any_are_described() -> None:
    def f(counts: dict[str, int], labels: set[str], anything: Any, raw: dict) -> str:  # type: ignore[type-arg]
        return ""

    assert _properties(f) == {
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "anything": {},
        "raw": {"type": "object"},
    }


def test_a_type_defined_inside_a_function_is_found_despite_postponed_annotations() -> None:
    # This module has `from __future__ import annotations`: hints are strings, and Mode and
    # Point exist only in this function's frame.
    Mode = Literal["fast", "full"]

    class Point:
        pass

    @agent.tool
    def f(mode: Mode) -> str:
        return mode

    @agent.tool(name="g")
    def g(mode: list[Mode]) -> str:
        return ""

    assert f.input_schema["properties"] == {"mode": {"enum": ["fast", "full"]}}
    assert g.input_schema["properties"] == {"mode": {"type": "array", "items": {"enum": ["fast", "full"]}}}

    def h(where: Point) -> str:
        return ""

    # Found, then refused for what it is, not for a name it cannot find.
    with pytest.raises(TypeError, match=r"h's parameter 'where': <class '.*Point'> has no JSON schema"):
        agent.tool(h)


def test_a_hint_that_does_not_evaluate_names_the_parameter() -> None:
    def f(ok: int, bad: Missing) -> str:  # type: ignore[name-defined]  # noqa: F821
        return ""

    with pytest.raises(TypeError, match="cannot evaluate the type hint of f's parameter 'bad': name 'Missing'"):
        agent.tool(f)


def _star_args(query: str, *rest: str) -> str:
    return query


def _star_kwargs(query: str, **extra: str) -> str:
    return query


def _positional_only(query: str, /) -> str:
    return query


def _bytes_arg(data: bytes) -> str:
    return ""


def _int_keys(table: dict[int, str]) -> str:
    return ""


def _bytes_literal(tag: Literal[b"x"]) -> str:
    return ""


@pytest.mark.parametrize(
    ("fn", "complaint"),
    [
        (_star_args, r"_star_args's parameter \*rest: the model's arguments are one JSON object"),
        (_star_kwargs, r"_star_kwargs's parameter \*\*extra: the model's arguments are one JSON object"),
        (_positional_only, "_positional_only's parameter 'query' by name"),
        (_bytes_arg, "_bytes_arg's parameter 'data': <class 'bytes'> has no JSON schema"),
        (_int_keys, "_int_keys's parameter 'table': .* has keys of <class 'int'>, but JSON keys are str"),
        (_bytes_literal, "_bytes_literal's parameter 'tag': .* holds a value that is not JSON's"),
    ],
)
def test_what_json_schema_cannot_say_is_refused_at_decoration(fn: Callable[..., str], complaint: str) -> None:
    with pytest.raises(TypeError, match=complaint):
        agent.tool(fn)


def _returns_int() -> int:
    return 3


def _returns_none() -> None:
    pass


def _returns_optional() -> str | None:
    return None


def _returns_strings() -> list[str]:
    return []


def _returns_dict() -> dict[str, str]:
    return {}


@pytest.mark.parametrize(
    ("fn", "shown"),
    [
        (_returns_int, "int"),
        (_returns_none, "None"),
        (_returns_optional, "str | None"),
        (_returns_strings, "list[str]"),
        (_returns_dict, "dict[str, str]"),
    ],
)
def test_a_return_annotation_a_tool_cannot_return_is_refused_at_decoration(fn: Callable[[], Any], shown: str) -> None:
    with pytest.raises(TypeError) as raised:
        agent.tool(fn)
    assert str(raised.value).startswith(
        f"@tool: {fn.__name__} is annotated to return {shown}, which a tool cannot return: a tool returns a str"
    )


class Verdict(enum.StrEnum):
    OK = "ok"


def test_every_return_annotation_a_tool_can_return_is_accepted() -> None:
    def text() -> str:
        return ""

    def verdict() -> Verdict:
        return Verdict.OK

    def literal() -> Literal["yes", "no"]:
        return "yes"

    def blocks() -> list[agent.Content]:
        return []

    def sequence() -> Sequence[agent.Content]:
        return ()

    def fixed() -> tuple[agent.Content, agent.Content]:
        return (agent.Content.of_text("a"), agent.Content.of_text("b"))

    def either() -> str | list[agent.Content]:
        return ""

    def output() -> agent.tools.ToolOutput:
        return ""

    def anything() -> Any:
        return ""

    def never() -> NoReturn:
        raise RuntimeError

    def unannotated():  # type: ignore[no-untyped-def]
        return ""

    for fn in (text, verdict, literal, blocks, sequence, fixed, either, output, anything, never, unannotated):
        assert agent.tool(fn).fn is fn


def test_a_scripted_reply_function_returning_a_non_message_is_a_type_error() -> None:
    endpoint = ScriptedEndpoint([lambda request: "just text"])  # type: ignore[list-item,return-value]
    request = agent.ModelRequest("", (agent.Message.user("hi"),), (), 100)
    with pytest.raises(TypeError, match="scripted reply 1 is a function that returned str, not a Message: 'just text'"):
        endpoint.complete(request)
    with pytest.raises(TypeError, match="scripted reply 1 must be a Message or a function returning one, got str"):
        ScriptedEndpoint(["just text"])  # type: ignore[list-item]


def _use(name: str, arguments: str) -> agent.Content:
    return agent.Content.tool_use("call-1", name, arguments)


def test_a_call_passes_the_parsed_arguments() -> None:
    blocks, error = call({"search": search}, _use("search", '{"query": "lease", "limit": 2}'))
    assert (blocks, error) == ([agent.Content.tool_result("call-1", "lease:2:None:None")], None)


@pytest.mark.parametrize(
    ("use", "complaint"),
    [
        (_use("nope", "{}"), "unknown tool 'nope'; the tools are: search"),
        (_use("search", "{not json"), "invalid arguments, so the tool did not run: not valid JSON: Expecting"),
        (_use("search", "[1]"), "invalid arguments, so the tool did not run: expected a JSON object, got array [1]"),
        (
            _use("search", '{"query": "q", "bogus": 1}'),
            "invalid arguments, so the tool did not run: bogus: not allowed (allowed: query, limit, mode, tags)",
        ),
        (_use("search", '{"limit": 2}'), "invalid arguments, so the tool did not run: query: missing (it is required)"),
        (
            _use("search", '{"query": "q", "limit": "two"}'),
            'invalid arguments, so the tool did not run: limit: expected integer, got string "two"',
        ),
        (
            _use("search", '{"query": "q", "tags": ["a", null]}'),
            "invalid arguments, so the tool did not run: tags[1]: expected string, got null null",
        ),
    ],
)
def test_model_mistakes_become_error_results_and_the_tool_does_not_run(
    use: agent.Content, complaint: str, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[dict[str, object]] = []

    def watch(**arguments: object) -> str:
        ran.append(arguments)
        return "ran"

    watched = attrs.evolve(search, fn=watch)
    (result,), error = call({"search": watched}, use)
    assert result.is_error
    assert result.tool_use_id == "call-1"
    assert result.text.startswith(complaint)
    assert ran == []
    # The model's mistake, the model's to read: nothing for the application's log.
    assert (error, caplog.records) == (None, [])


def test_a_tool_that_raises_is_an_error_result_the_exception_and_a_warning_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @agent.tool
    def boom() -> str:
        raise RuntimeError("the disk is on fire")

    with caplog.at_level(logging.WARNING, logger="agentsessions"):
        (result,), error = call({"boom": boom}, _use("boom", "{}"))
    assert (result.is_error, result.text) == (True, "RuntimeError: the disk is on fire")
    assert isinstance(error, RuntimeError) and str(error) == "the disk is on fire"
    (record,) = caplog.records
    assert (record.name, record.levelno) == ("agentsessions", logging.WARNING)
    assert (
        record.getMessage() == "tool 'boom' raised RuntimeError on call call-1; the model reads it as an error result"
    )
    assert record.exc_info is not None and record.exc_info[1] is error
    assert 'raise RuntimeError("the disk is on fire")' in caplog.text  # the traceback, down to the tool's line


def test_a_run_reports_the_tools_exception_in_tool_returned() -> None:
    failure = ValueError("no such city")

    @agent.tool
    def weather(city: str) -> str:
        raise failure

    model = ScriptedEndpoint(
        [
            agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c1", "weather", '{"city": "Atlantis"}')]),
            agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c2", "weather", '{"city": 5}')]),
            agent.Message.assistant("sorry"),
        ]
    )
    seen: list[object] = []
    agent.Runner().run(agent.Spec(tools=[weather]), [agent.Message.user("weather?")], model, seen.append)
    raised, refused = [event for event in seen if isinstance(event, ev.ToolReturned)]
    assert (raised.result.is_error, raised.error) == (True, failure)
    assert (refused.result.is_error, refused.error) == (True, None)  # the model's mistake: the tool never ran


def test_a_tool_needs_an_object_schema() -> None:
    with pytest.raises(ValueError, match='"type": "object"'):
        agent.Tool("t", "", {"type": "string"}, lambda: "")


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@agent.tool
def screenshot(page: str) -> list[agent.Content]:
    """Take a screenshot of a page."""
    return [
        agent.Content.of_text(f"the page {page}"),
        agent.Content.image(media_type="image/png", data=PNG),
        agent.Content.of_text("looks fine"),
        agent.Content.document(url="https://example.com/report.pdf", name="report"),
    ]


def test_a_tool_may_return_text_images_and_documents() -> None:
    blocks, error = call({"screenshot": screenshot}, _use("screenshot", '{"page": "/home"}'))
    assert error is None
    assert blocks == [
        agent.Content.tool_result("call-1", "the page /home\nlooks fine"),
        agent.Content(agent.ContentType.IMAGE, media_type="image/png", data=PNG, tool_use_id="call-1"),
        agent.Content(
            agent.ContentType.DOCUMENT, url="https://example.com/report.pdf", name="report", tool_use_id="call-1"
        ),
    ]
    assert all(block.part_of_result for block in blocks)


@pytest.mark.parametrize(
    ("output", "complaint"),
    [
        ([agent.Content.tool_use("x", "f", "{}")], "returned a list holding a tool_use block"),
        ([agent.Content.of_text("a"), 3], "returned a list holding int"),
        (b"bytes", "returned bytes"),
        ({"a": 1}, "returned dict"),
        (None, "returned NoneType"),
    ],
)
def test_a_tool_returning_anything_else_gives_an_error_result(
    output: object, complaint: str, caplog: pytest.LogCaptureFixture
) -> None:
    odd = agent.Tool("odd", "", {"type": "object"}, lambda: output)  # type: ignore[arg-type,return-value]
    (result,), error = call({"odd": odd}, _use("odd", "{}"))
    assert result.is_error and complaint in result.text
    # The tool's fault, not the model's: the application hears of it too.
    assert isinstance(error, TypeError) and str(error) == result.text
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and complaint in record.getMessage()


def test_a_run_puts_a_tools_images_beside_its_result_and_they_reach_the_next_request() -> None:
    model = ScriptedEndpoint(
        [
            agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c1", "screenshot", '{"page": "/"}')]),
            agent.Message.assistant("I see it"),
        ]
    )
    result = agent.Runner().run(agent.Spec(tools=[screenshot]), [agent.Message.user("look")], model)
    results = result.messages[2]
    assert [b.type for b in results.content] == [
        agent.ContentType.TOOL_RESULT,
        agent.ContentType.IMAGE,
        agent.ContentType.DOCUMENT,
    ]
    assert model.requests[1].messages[-1] == results
