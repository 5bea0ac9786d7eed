"""Tools the model may call, and the one place a call becomes a result the model reads."""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin, overload

import attrs

from agentsessions.messages import Content


def _schema_object(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping) or value.get("type") != "object":
        raise ValueError(f'Tool.input_schema must be a JSON schema with "type": "object", got {value!r:.80}')


@attrs.frozen
class Tool:
    """A function the model may call.

    ``fn`` is called with the parsed arguments as keyword arguments and returns a str,
    which the model reads as the result. ``input_schema`` is the JSON schema of those
    arguments, as the providers expect it.
    """

    name: str = attrs.field(validator=attrs.validators.matches_re(r"^[a-zA-Z0-9_-]{1,64}$"))
    description: str = attrs.field(validator=attrs.validators.instance_of(str))
    input_schema: Mapping[str, Any] = attrs.field(validator=_schema_object, eq=False)
    fn: Callable[..., str] = attrs.field(validator=attrs.validators.is_callable(), eq=False)


def call(tools: Mapping[str, Tool], use: Content) -> Content:
    """Run one tool call; every mistake of the model's becomes an error result, never a raise."""
    tool = tools.get(use.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return Content.tool_result(use.id, f"unknown tool {use.name!r}; the tools are: {known}", is_error=True)
    try:
        arguments = json.loads(use.input) if use.input.strip() else {}
    except ValueError as error:
        return Content.tool_result(use.id, f"the arguments are not valid JSON: {error}", is_error=True)
    if not isinstance(arguments, dict):
        return Content.tool_result(use.id, "the arguments must be a JSON object", is_error=True)
    try:
        output = tool.fn(**arguments)
    except Exception as error:  # a tool's failure is an observation for the model, not a crash
        return Content.tool_result(use.id, f"{type(error).__name__}: {error}", is_error=True)
    if not isinstance(output, str):
        return Content.tool_result(
            use.id, f"tool {tool.name!r} returned {type(output).__name__}, not str", is_error=True
        )
    return Content.tool_result(use.id, output)


_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_schema(hint: Any) -> dict[str, Any]:
    origin = get_origin(hint)
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if origin is Literal:
        return {"enum": list(get_args(hint))}
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple):
        args = get_args(hint)
        return {"type": "array", "items": _json_schema(args[0])} if args else {"type": "array"}
    if origin is dict or hint is dict:
        return {"type": "object"}
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(hint) if a is not type(None)]
        if len(options) == 1:
            return _json_schema(options[0])
        return {"anyOf": [_json_schema(a) for a in options]}
    raise TypeError(f"@tool cannot describe the type {hint!r} in JSON schema; use a Tool with input_schema")


def _docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """The description before an ``Args:`` section, and each argument's line from it."""
    summary, _, args_block = inspect.cleandoc(doc).partition("\nArgs:")
    described: dict[str, str] = {}
    for match in re.finditer(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)$", args_block, re.MULTILINE):
        described[match.group(1)] = match.group(2).strip()
    return summary.strip(), described


def _derive(fn: Callable[..., str], name: str | None, description: str | None) -> Tool:
    summary, described = _docstring_parts(fn.__doc__ or "")
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.name not in hints:
            raise TypeError(f"@tool needs a type hint on {fn.__name__}'s parameter {parameter.name!r}")
        schema = _json_schema(hints[parameter.name])
        if parameter.name in described:
            schema["description"] = described[parameter.name]
        properties[parameter.name] = schema
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
    return Tool(
        name=name or fn.__name__,
        description=description if description is not None else summary,
        input_schema={"type": "object", "properties": properties, "required": required},
        fn=fn,
    )


@overload
def tool(fn: Callable[..., str], /) -> Tool: ...
@overload
def tool(*, name: str | None = None, description: str | None = None) -> Callable[[Callable[..., str]], Tool]: ...
def tool(
    fn: Callable[..., str] | None = None, /, *, name: str | None = None, description: str | None = None
) -> Tool | Callable[[Callable[..., str]], Tool]:
    """Make a :class:`Tool` from a typed function.

    The name is the function's, the description its docstring up to ``Args:``, and the
    schema comes from the type hints (str, int, float, bool, list, dict, Literal, Optional);
    a parameter with a default is optional. ``Args:`` lines describe the parameters.
    """
    if fn is not None:
        return _derive(fn, name, description)
    return lambda f: _derive(f, name, description)
