"""Tools the model may call, and the one place a call becomes a result the model reads."""

from __future__ import annotations

import collections.abc
import datetime
import inspect
import json
import logging
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin, overload

import attrs

from agentsessions import schemas
from agentsessions.errors import InvalidArgumentsError
from agentsessions.messages import MEDIA, Content, ContentType

log = logging.getLogger("agentsessions")

ToolOutput = str | Sequence[Content]
"""What a tool returns: a str, or a sequence of ``TEXT``, ``IMAGE`` and ``DOCUMENT`` blocks."""

_RESULT_BLOCKS = frozenset({ContentType.TEXT, *MEDIA})


def _schema_object(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping) or value.get("type") != "object":
        raise ValueError(f'Tool.input_schema must be a JSON schema with "type": "object", got {value!r:.80}')


def _approval_rule(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool) and not callable(value):
        raise TypeError(f"Tool.needs_approval must be a bool or a callable(arguments) -> bool, got {value!r:.80}")


@attrs.frozen
class Tool:
    """A function the model may call.

    ``fn`` is called with the parsed arguments as keyword arguments and returns a str, which
    the model reads as the result, or a sequence of ``TEXT``, ``IMAGE`` and ``DOCUMENT``
    blocks (a screenshot and its caption): their text, joined by newlines, is the result's
    text, and the images and documents follow the result in the transcript, carrying its
    ``tool_use_id``, so that the model sees them as part of it. ``input_schema`` is the JSON schema of those
    arguments, as the providers expect it; a call's arguments are checked against it before
    ``fn`` runs (:meth:`parse_input`). ``idempotent`` says that running a call twice
    does no more than running it once: with ``Spec(journal=True)``, a call that a crash
    left in doubt runs again only then (any other gets an error result saying its result
    was lost). ``needs_approval`` (``True``, or a callable given the call's parsed arguments
    that says ``True`` for the calls to ask about) stops the run before such a call until a
    person approves or rejects it (:mod:`agentsessions.approvals`); ``approval_timeout`` (a
    ``timedelta``) is how long such a call waits before its approval expires.
    """

    name: str = attrs.field(validator=attrs.validators.matches_re(r"^[a-zA-Z0-9_-]{1,64}$"))
    description: str = attrs.field(validator=attrs.validators.instance_of(str))
    input_schema: Mapping[str, Any] = attrs.field(validator=_schema_object, eq=False)
    fn: Callable[..., ToolOutput] = attrs.field(validator=attrs.validators.is_callable(), eq=False)
    idempotent: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool), kw_only=True)
    needs_approval: bool | Callable[[dict[str, Any]], bool] = attrs.field(
        default=False, validator=_approval_rule, kw_only=True, eq=False
    )
    approval_timeout: datetime.timedelta | None = attrs.field(default=None, kw_only=True)
    _check_input: Callable[[object], None] = attrs.field(init=False, eq=False, repr=False)

    @approval_timeout.validator
    def _check_timeout(self, _: attrs.Attribute[Any], value: object) -> None:
        if value is None:
            return
        if not isinstance(value, datetime.timedelta):
            raise TypeError(f"Tool.approval_timeout must be a datetime.timedelta or None, got {value!r:.80}")
        if value <= datetime.timedelta(0):
            raise ValueError(f"Tool.approval_timeout must be positive, got {value}")
        if self.needs_approval is False:
            raise ValueError(f"tool {self.name!r}: approval_timeout needs needs_approval (nothing waits to expire)")

    @_check_input.default
    def _compile_schema(self) -> Callable[[object], None]:
        # Once per tool, so that a call pays only for the check itself.
        return schemas.checker(self.input_schema)

    def parse_input(self, input: str) -> dict[str, Any]:
        """The arguments in a tool call's ``input`` (its JSON text), checked against ``input_schema``.

        Empty text is no arguments. Raises :class:`~agentsessions.InvalidArgumentsError` (a
        ``ValueError``) when the text is not a JSON object, or when a field does not fit the
        schema, naming it (``x: expected integer, got string "two"``). The schema keywords
        it checks are listed in :mod:`agentsessions.schemas`.
        """
        try:
            arguments = json.loads(input) if input and not input.isspace() else {}
        except ValueError as error:
            raise InvalidArgumentsError("", f"not valid JSON: {error}") from error
        if not isinstance(arguments, dict):
            raise InvalidArgumentsError("", f"expected a JSON object, got {schemas.shown(arguments)}")
        self._check_input(arguments)
        return arguments

    def asks_approval(self, input: str) -> bool:
        """Whether the call with ``input`` (its JSON text) must wait for a person's decision.

        A call whose arguments do not fit the schema never runs, so it needs none. A rule
        that raises asks: a call that must not run unapproved is never let through by a bug.
        """
        rule = self.needs_approval
        if rule is False or rule is True:
            return rule
        try:
            arguments = self.parse_input(input)
        except InvalidArgumentsError:
            return False
        try:
            return bool(rule(arguments))
        except Exception:
            log.warning(
                "the needs_approval rule of tool %r raised; the call waits for a decision", self.name, exc_info=True
            )
            return True


def call(tools: Mapping[str, Tool], use: Content) -> tuple[list[Content], Exception | None]:
    """Run one tool call: its result block and any media the tool returned; and the tool's failure.

    Every mistake of the model's (a tool it invented, arguments that do not fit the tool's
    schema) becomes an error result the model reads, never a raise, and the tool does not
    run. So does every failure of the tool's (an exception, or output that is not a tool's),
    which is also returned (the exception, or a ``TypeError`` saying what came back) and
    logged as a warning with its traceback on the ``agentsessions`` logger: a broken tool
    is the application's to see, not only the model's.
    """
    tool = tools.get(use.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return [Content.tool_result(use.id, f"unknown tool {use.name!r}; the tools are: {known}", is_error=True)], None
    try:
        arguments = tool.parse_input(use.input)
    except InvalidArgumentsError as error:
        text = f"invalid arguments, so the tool did not run: {error}"
        return [Content.tool_result(use.id, text, is_error=True)], None
    try:
        output = tool.fn(**arguments)
    except Exception as error:  # a tool's failure is an observation for the model, not a crash
        log.warning(
            "tool %r raised %s on call %s; the model reads it as an error result",
            tool.name,
            type(error).__name__,
            use.id,
            exc_info=error,
        )
        return [Content.tool_result(use.id, f"{type(error).__name__}: {error}", is_error=True)], error
    if isinstance(output, str):
        return [Content.tool_result(use.id, output)], None
    problem = _not_blocks(output)
    if problem:
        message = (
            f"tool {tool.name!r} returned {problem}; a tool returns a str or a list of TEXT, IMAGE and DOCUMENT blocks"
        )
        log.warning("%s (call %s); the model reads it as an error result", message, use.id)
        return [Content.tool_result(use.id, message, is_error=True)], TypeError(message)
    return _blocks_result(use.id, output), None


def _blocks_result(call_id: str, output: Sequence[Content]) -> list[Content]:
    """The result of a tool that returned blocks: their text as the result's, their media after it."""
    text = "\n".join(block.text for block in output if block.type is ContentType.TEXT)
    media = [attrs.evolve(block, tool_use_id=call_id) for block in output if block.type in MEDIA]
    return [Content.tool_result(call_id, text), *media]


def _not_blocks(output: object) -> str:
    """What is wrong with a tool's output that is not a str, in words for the model; ``""`` if nothing."""
    if not isinstance(output, Sequence) or isinstance(output, (bytes, bytearray)):
        return type(output).__name__
    for block in output:
        if not isinstance(block, Content):
            return f"a list holding {type(block).__name__}"
        if block.type not in _RESULT_BLOCKS:
            return f"a list holding a {block.type.value} block"
    return ""


_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_LITERAL_TYPES = (str, int, bool, type(None))  # what a JSON value can equal in Python
_ARRAYS = (list, set, frozenset, collections.abc.Sequence)


def _json_schema(hint: Any, where: str) -> dict[str, Any]:
    """The JSON schema of the values Python accepts for ``hint``; ``where`` names it in errors."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return {}
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if origin is Literal:
        if not all(type(value) in _LITERAL_TYPES for value in args):
            raise TypeError(f"@tool cannot describe {where}: {hint!r} holds a value that is not JSON's")
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_json_schema(option, where) for option in args]}  # None among them is {"type": "null"}
    if hint is tuple:
        return {"type": "array"}
    if origin is tuple:
        return _tuple_schema(args, where)
    if origin in _ARRAYS or hint in _ARRAYS:
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = _json_schema(args[0], where)
        if set in (origin, hint) or frozenset in (origin, hint):
            schema["uniqueItems"] = True
        return schema
    if origin in (dict, collections.abc.Mapping) or hint in (dict, collections.abc.Mapping):
        if not args:
            return {"type": "object"}
        if args[0] is not str:
            raise TypeError(f"@tool cannot describe {where}: {hint!r} has keys of {args[0]!r}, but JSON keys are str")
        return {"type": "object", "additionalProperties": _json_schema(args[1], where)}
    raise TypeError(f"@tool cannot describe {where}: {hint!r} has no JSON schema; use a Tool with input_schema")


def _tuple_schema(args: tuple[Any, ...], where: str) -> dict[str, Any]:
    if not args:  # tuple[()]: the empty tuple
        return {"type": "array", "maxItems": 0}
    if len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]: any length
        return {"type": "array", "items": _json_schema(args[0], where)}
    return {
        "type": "array",
        "prefixItems": [_json_schema(arg, where) for arg in args],
        "items": False,
        "minItems": len(args),
        "maxItems": len(args),
    }


def _docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """The description before an ``Args:`` section, and each argument's line from it."""
    summary, _, args_block = inspect.cleandoc(doc).partition("\nArgs:")
    described: dict[str, str] = {}
    for match in re.finditer(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)$", args_block, re.MULTILINE):
        described[match.group(1)] = match.group(2).strip()
    return summary.strip(), described


def _type_hints(fn: Callable[..., ToolOutput], localns: dict[str, Any]) -> dict[str, Any]:
    """``fn``'s evaluated type hints, looking names up where ``@tool`` was applied, then in ``fn``'s module.

    The place of decoration matters under ``from __future__ import annotations``, whose hints
    are strings: a type defined inside a function is only there, never in the module.
    """
    try:
        return typing.get_type_hints(fn, localns=localns)
    except Exception as error:  # evaluating a hint runs its code: any failure is that hint's
        raise TypeError(f"@tool cannot evaluate the type hint of {_failing_hint(fn, localns)}: {error}") from error


def _failing_hint(fn: Callable[..., ToolOutput], localns: dict[str, Any]) -> str:
    """Which of ``fn``'s hints does not evaluate, for the error message."""
    for name, annotation in getattr(fn, "__annotations__", {}).items():
        try:
            shim = types.SimpleNamespace(__annotations__={name: annotation})
            typing.get_type_hints(shim, getattr(fn, "__globals__", {}), localns)
        except Exception:
            return f"{fn.__name__}'s return value" if name == "return" else f"{fn.__name__}'s parameter {name!r}"
    return fn.__name__


def _schema_of(parameter: inspect.Parameter, hints: dict[str, Any], fn_name: str) -> dict[str, Any]:
    where = f"{fn_name}'s parameter {parameter.name!r}"
    if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
        star = "*" if parameter.kind is inspect.Parameter.VAR_POSITIONAL else "**"
        raise TypeError(
            f"@tool cannot describe {fn_name}'s parameter {star}{parameter.name}: the model's arguments are "
            "one JSON object of named properties; take a list or a dict parameter instead"
        )
    if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
        raise TypeError(f"@tool cannot pass {where} by name, as a tool's arguments are passed; drop the '/'")
    if parameter.name not in hints:
        raise TypeError(f"@tool needs a type hint on {where}")
    return _json_schema(hints[parameter.name], where)


_SEQUENCES = (list, tuple, collections.abc.Sequence)


def _returnable(hint: Any) -> bool:
    """Whether a function annotated ``-> hint`` returns what a tool may: a str, or a sequence of blocks."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any or hint is typing.NoReturn or hint is typing.Never:
        return True
    if (isinstance(hint, type) and issubclass(hint, str)) or hint in _SEQUENCES:
        return True
    if origin is Literal:
        return all(isinstance(value, str) for value in args)
    if origin in (Union, types.UnionType):
        return all(_returnable(option) for option in args)
    if origin in _SEQUENCES:
        items = args[:1] if origin is not tuple else [arg for arg in args if arg is not Ellipsis]
        return all(item is Any or (isinstance(item, type) and issubclass(item, Content)) for item in items)
    return False


def _check_return(hints: dict[str, Any], fn_name: str) -> None:
    if "return" in hints and not _returnable(hints["return"]):
        hint = hints["return"]
        shown = "None" if hint is type(None) else getattr(hint, "__name__", None) if isinstance(hint, type) else None
        raise TypeError(
            f"@tool: {fn_name} is annotated to return {shown or repr(hint)}, which a tool cannot return: a tool "
            "returns a str (the result the model reads) or a list of TEXT, IMAGE and DOCUMENT Content blocks; "
            "return str(value), or a sentence saying what was done"
        )


def _derive(fn: Callable[..., ToolOutput], name: str | None, description: str | None, localns: dict[str, Any]) -> Tool:
    summary, described = _docstring_parts(fn.__doc__ or "")
    hints = _type_hints(fn, localns)
    _check_return(hints, fn.__name__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(fn).parameters.values():
        schema = _schema_of(parameter, hints, fn.__name__)
        if parameter.name in described:
            schema["description"] = described[parameter.name]
        properties[parameter.name] = schema
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
    # Python refuses a keyword it does not know, so the schema does too.
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return Tool(
        name=name or fn.__name__,
        description=description if description is not None else summary,
        input_schema=schema,
        fn=fn,
    )


@overload
def tool(fn: Callable[..., ToolOutput], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    needs_approval: bool | Callable[[dict[str, Any]], bool] = False,
    approval_timeout: datetime.timedelta | None = None,
) -> Callable[[Callable[..., ToolOutput]], Tool]: ...
def tool(
    fn: Callable[..., ToolOutput] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    needs_approval: bool | Callable[[dict[str, Any]], bool] = False,
    approval_timeout: datetime.timedelta | None = None,
) -> Tool | Callable[[Callable[..., ToolOutput]], Tool]:
    """Make a :class:`Tool` from a typed function.

    The name is the function's, the description its docstring up to ``Args:``, and the
    schema comes from the type hints: str, int, float, bool, None, Any, Literal, unions
    (``X | None`` allows null), list, set, tuple (``tuple[int, str]`` is a pair, with
    ``prefixItems``), and dict with str keys. A parameter with a default is optional;
    ``Args:`` lines describe the parameters. Whatever JSON schema cannot say (a type it has
    no form for, ``*args``, ``**kwargs``, a positional-only parameter) is a ``TypeError`` here,
    at decoration, naming the function and the parameter; so is a return annotation that is
    not a tool's output (``-> int``, ``-> None``): a tool returns a str or a list of blocks.
    ``idempotent=True`` marks a tool that may safely run twice, and ``needs_approval`` one
    whose calls wait for a person's decision, for at most ``approval_timeout`` when given
    (see :class:`Tool`).
    """
    # The caller's frame is where the function was defined: its local types are there.
    if fn is not None:
        derived = _derive(fn, name, description, sys._getframe(1).f_locals)
        return attrs.evolve(
            derived, idempotent=idempotent, needs_approval=needs_approval, approval_timeout=approval_timeout
        )

    def decorate(f: Callable[..., ToolOutput]) -> Tool:
        derived = _derive(f, name, description, sys._getframe(1).f_locals)
        return attrs.evolve(
            derived, idempotent=idempotent, needs_approval=needs_approval, approval_timeout=approval_timeout
        )

    return decorate
