"""A tool call's arguments checked against its schema: what fits, what does not and where, and
agreement with the reference validator (jsonschema) on schemas of the subset we know."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentsessions as agent
from agentsessions import schemas
from tests.support.servers import skip_without

FIELDS = {
    "type": "object",
    "properties": {
        "x": {"type": "integer"},
        "name": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]*$"},
        "mode": {"anyOf": [{"enum": ["fast", "full"]}, {"type": "null"}]},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "maxItems": 3},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
        "ratio": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
        "point": {
            "type": "object",
            "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
            "required": ["lat", "lon"],
        },
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "required": ["x"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "value",
    [
        {"x": 1},
        {"x": 1.0},  # JSON Schema 2020-12: a number with no fraction is an integer
        {"x": -3, "name": "abc", "mode": None, "tags": ["a", "b"], "pair": [1, "one"], "ratio": 0},
        {"x": 0, "mode": "full", "ratio": 0.999, "point": {"lat": 1, "lon": 2.5, "alt": 3}},
        {"x": 0, "counts": {"a": 1, "b": 2}, "tags": []},
    ],
)
def test_values_that_fit_pass(value: dict[str, Any]) -> None:
    schemas.check(FIELDS, value)


@pytest.mark.parametrize(
    ("value", "field", "problem"),
    [
        ({"x": "two"}, "x", 'expected integer, got string "two"'),
        ({"x": True}, "x", "expected integer, got boolean true"),
        ({"x": 1.5}, "x", "expected integer, got number 1.5"),
        ({}, "x", "missing (it is required)"),
        ({"x": 1, "y": 2}, "y", "not allowed (allowed: x, name, mode, tags, pair, ratio, point, counts)"),
        ({"x": 1, "name": ""}, "name", 'expected at least 1 characters, got string ""'),
        ({"x": 1, "name": "abcdef"}, "name", 'expected at most 5 characters, got string "abcdef"'),
        ({"x": 1, "name": "ABC"}, "name", "expected a string matching '^[a-z]*$', got string \"ABC\""),
        ({"x": 1, "mode": "slow"}, "mode", 'expected one of ["fast", "full"] or null, got string "slow"'),
        ({"x": 1, "tags": ["a", 3]}, "tags[1]", "expected string, got integer 3"),
        ({"x": 1, "tags": ["a", "a"]}, "tags[1]", 'expected unique items, but string "a" repeats an earlier one'),
        ({"x": 1, "tags": ["a", "b", "c", "d"]}, "tags", 'expected at most 3 items, got array ["a", "b", "c", "d"]'),
        ({"x": 1, "pair": [1, 2]}, "pair[1]", "expected string, got integer 2"),
        ({"x": 1, "pair": [1, "a", 3]}, "pair[2]", "not allowed here"),
        ({"x": 1, "ratio": 1}, "ratio", "expected a number less than 1, got integer 1"),
        ({"x": 1, "ratio": -0.5}, "ratio", "expected a number at least 0, got number -0.5"),
        ({"x": 1, "point": {"lat": 1}}, "point.lon", "missing (it is required)"),
        ({"x": 1, "point": {"lat": 1, "lon": "east"}}, "point.lon", 'expected number, got string "east"'),
        ({"x": 1, "counts": {"a b": "1"}}, 'counts["a b"]', 'expected integer, got string "1"'),
    ],
)
def test_a_value_that_does_not_fit_names_the_field_and_the_problem(
    value: dict[str, Any], field: str, problem: str
) -> None:
    with pytest.raises(agent.InvalidArgumentsError) as raised:
        schemas.check(FIELDS, value)
    assert (raised.value.field, raised.value.problem) == (field, problem)
    assert str(raised.value) == f"{field}: {problem}"
    assert isinstance(raised.value, ValueError)


def test_any_of_names_the_deepest_failure_the_option_the_model_meant() -> None:
    schema = {
        "anyOf": [
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            {"type": "string"},
        ]
    }
    with pytest.raises(agent.InvalidArgumentsError, match=r"^city: expected string, got integer 5$"):
        schemas.check(schema, {"city": 5})
    with pytest.raises(agent.InvalidArgumentsError, match=r"^expected object or string, got integer 5$"):
        schemas.check(schema, 5)


def test_one_of_needs_exactly_one_option() -> None:
    schema = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    schemas.check(schema, 1.5)
    with pytest.raises(agent.InvalidArgumentsError, match="fits 2 of the schemas in oneOf"):
        schemas.check(schema, 1)


def test_refs_within_the_schema_resolve_also_when_it_refers_to_itself() -> None:
    # As pydantic writes a model with a nested model, and a tree.
    schema = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["name"],
            }
        },
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}, "other": {"$ref": "https://example.com/remote.json"}},
    }
    check = schemas.checker(schema)
    check({"root": {"name": "a", "children": [{"name": "b", "children": []}]}, "other": 5})
    with pytest.raises(agent.InvalidArgumentsError) as raised:
        check({"root": {"name": "a", "children": [{"name": "b", "children": [{"children": []}]}]}})
    assert raised.value.field == "root.children[0].children[0].name"


def test_what_it_cannot_check_it_lets_through() -> None:
    # Keywords it does not know, an ECMA-262 pattern Python cannot read, patternProperties
    # (which allows more properties): never a refusal of a value the schema may allow.
    schemas.check({"type": "string", "format": "email", "pattern": "\\p{L}+"}, "not an email")
    schemas.check({"type": "object", "patternProperties": {"^x": {}}, "additionalProperties": False}, {"xy": 1})
    schemas.check({"type": "integer", "x-custom": {"type": "string"}}, 5)
    schemas.check(True, {"anything": ["at", "all"]})


def test_openapi_nullable_and_draft_4_exclusive_bounds() -> None:
    schemas.check({"type": "string", "nullable": True}, None)
    schemas.check({"enum": ["a"], "nullable": True}, None)
    schemas.check({"type": "number", "minimum": 0, "exclusiveMinimum": True}, 0.5)
    with pytest.raises(agent.InvalidArgumentsError, match="expected a number greater than 0, got integer 0"):
        schemas.check({"type": "number", "minimum": 0, "exclusiveMinimum": True}, 0)


def test_enum_and_const_use_json_equality() -> None:
    schemas.check({"enum": [1, "a"]}, 1.0)
    with pytest.raises(agent.InvalidArgumentsError):
        schemas.check({"enum": [1]}, True)
    with pytest.raises(agent.InvalidArgumentsError):
        schemas.check({"const": False}, 0)
    schemas.check({"const": {"a": [1, None]}}, {"a": [1.0, None]})


@agent.tool
def schedule(day: int, note: str = "") -> str:
    """Put a note on a day."""
    return f"{day}:{note}"


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        ('{"day": "two"}', "day", 'expected integer, got string "two"'),
        ('{"note": "x"}', "day", "missing (it is required)"),
        ("[1, 2]", "", "expected a JSON object, got array [1, 2]"),
        ("{day: 1}", "", "not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ],
)
def test_a_tools_parse_input_is_the_check_others_can_call(text: str, field: str, problem: str) -> None:
    assert schedule.parse_input('{"day": 3, "note": "dentist"}') == {"day": 3, "note": "dentist"}
    with pytest.raises(agent.InvalidArgumentsError) as raised:
        schedule.parse_input(text)
    assert (raised.value.field, raised.value.problem) == (field, problem)


def test_a_hand_written_tools_schema_is_checked_too() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    read = agent.Tool("read", "Read a file.", schema, lambda path: path)
    assert read.parse_input('{"path": "a.txt", "extra": 1}') == {"path": "a.txt", "extra": 1}
    with pytest.raises(agent.InvalidArgumentsError, match=r"^path: missing"):
        read.parse_input("{}")


# Agreement with the reference: on schemas drawn from the keywords both know, the check
# refuses exactly the values jsonschema's Draft 2020-12 validator finds invalid.

skip_without("jsonschema")  # the whole module, outside CI: the reference validator is in the test extra
jsonschema = importlib.import_module("jsonschema")

KEYS = ["a", "b", "c"]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.5, -1.5, 2.0, 1e3]),
    st.sampled_from(["", "a", "ab", "B", "abc d"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from([*KEYS, "d"]), inner, max_size=4),
    max_leaves=10,
)
TYPES = ["null", "boolean", "integer", "number", "string", "array", "object"]


def _leaf_keywords() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True),
            "enum": st.lists(scalars, min_size=1, max_size=3),
            "const": scalars,
            "minimum": st.integers(-2, 2),
            "maximum": st.integers(-2, 2),
            "exclusiveMinimum": st.sampled_from([-1, 0, 0.5]),
            "exclusiveMaximum": st.sampled_from([0, 1, 2.5]),
            "minLength": st.integers(0, 3),
            "maxLength": st.integers(0, 3),
            "pattern": st.sampled_from(["^a", "b$", "[a-z]+", "^$"]),
            "minItems": st.integers(0, 3),
            "maxItems": st.integers(0, 3),
            "uniqueItems": st.booleans(),
        },
    )


def _extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    with_children = st.fixed_dictionaries(
        {},
        optional={
            "properties": st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
            "required": st.lists(st.sampled_from(KEYS), max_size=3, unique=True),
            "additionalProperties": st.booleans() | inner,
            "items": st.booleans() | inner,
            "prefixItems": st.lists(inner, min_size=1, max_size=2),
            "anyOf": st.lists(inner, min_size=1, max_size=3),
            "oneOf": st.lists(inner, min_size=1, max_size=3),
            "allOf": st.lists(inner, min_size=1, max_size=2),
        },
    )
    return st.builds(lambda leaf, children: {**leaf, **children}, _leaf_keywords(), with_children)


json_schemas = st.recursive(st.booleans() | _leaf_keywords(), _extend, max_leaves=6)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_schemas, json_values)
def test_the_check_agrees_with_jsonschema(schema: Any, value: Any) -> None:
    expected = jsonschema.Draft202012Validator(schema).is_valid(value)
    try:
        schemas.check(schema, value)
    except agent.InvalidArgumentsError as error:
        assert not expected, f"refused a value jsonschema accepts: {json.dumps(value)} ({error})"
        assert _names_a_place(value, error.field)
    else:
        assert expected, f"accepted a value jsonschema refuses: {json.dumps(value)}"


def _names_a_place(value: Any, field: str) -> bool:
    """Whether ``field`` (such as ``a[2].b``) leads into ``value``; its last key may be a missing one."""
    node = value
    parts = field.replace("]", "").replace("[", ".").lstrip(".").split(".") if field else []
    for depth, part in enumerate(parts):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and (part in node or depth == len(parts) - 1):
            node = node.get(part)
        else:
            return False
    return True
