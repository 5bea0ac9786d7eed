"""Tools: schemas derived from type hints, and every mistake of the model's an observation."""

from __future__ import annotations

from typing import Literal

import pytest

import agentsessions as agent
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
            "mode": {"enum": ["fast", "full"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["query"],
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


def _use(name: str, arguments: str) -> agent.Content:
    return agent.Content.tool_use("call-1", name, arguments)


def test_a_call_passes_the_parsed_arguments() -> None:
    result = call({"search": search}, _use("search", '{"query": "lease", "limit": 2}'))
    assert result == agent.Content.tool_result("call-1", "lease:2:None:None")


@pytest.mark.parametrize(
    ("use", "complaint"),
    [
        (_use("nope", "{}"), "unknown tool 'nope'; the tools are: boom, search"),
        (_use("search", "{not json"), "the arguments are not valid JSON"),
        (_use("search", "[1]"), "the arguments must be a JSON object"),
        (_use("search", '{"query": "q", "bogus": 1}'), "TypeError: "),
        (_use("boom", "{}"), "RuntimeError: the disk is on fire"),
        (_use("number", "{}"), "tool 'number' returned int, not str"),
    ],
)
def test_model_mistakes_and_tool_failures_become_error_results(use: agent.Content, complaint: str) -> None:
    def boom() -> str:
        raise RuntimeError("the disk is on fire")

    tools = {"search": search, "boom": agent.tool(boom)}
    if use.name == "number":
        tools = {"number": agent.Tool("number", "", {"type": "object"}, lambda: 7)}  # type: ignore[arg-type,return-value]
    result = call(tools, use)
    assert result.is_error
    assert result.tool_use_id == "call-1"
    assert complaint in result.text


def test_a_tool_needs_an_object_schema() -> None:
    with pytest.raises(ValueError, match='"type": "object"'):
        agent.Tool("t", "", {"type": "string"}, lambda: "")
