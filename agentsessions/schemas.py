"""A tool call's arguments checked against the tool's JSON schema, before the tool runs.

A model may send ``{"x": "two"}`` to a tool whose ``x`` is an ``int``; the check turns that
into an error result naming the field, so the model can correct itself, and the tool never
gets what it cannot take. :meth:`agentsessions.Tool.parse_input` uses it, and so may anyone
holding a call's input (an edited one, say).

It knows the JSON Schema (2020-12) that ``@agent.tool`` writes and the keywords hand-written
and generated (pydantic) schemas commonly use: ``type`` (also a list, and OpenAPI's
``nullable``), ``enum``, ``const``, ``properties``, ``required``, ``additionalProperties``,
``items`` (also draft 7's list form, with ``additionalItems``), ``prefixItems``,
``minItems``, ``maxItems``, ``uniqueItems``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum`` (also draft 4's booleans), ``minLength``, ``maxLength``, ``pattern``,
``allOf``, ``anyOf``, ``oneOf`` and ``$ref`` within the schema (``#/$defs/...``,
``#/definitions/...``). Any other keyword is ignored, as JSON Schema says of keywords a
validator does not know, and so are a remote ``$ref`` and a ``pattern`` Python's ``re``
cannot read: what it cannot check it lets through, so it never refuses a value the schema
allows. A schema is compiled once into nested functions (:func:`checker`), so a check costs
a few function calls per field.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard

from agentsessions.errors import InvalidArgumentsError

Check = Callable[[object], None]
"""A compiled schema: returns when the value fits, raises :class:`Mismatch` when not."""


def check(schema: Mapping[str, Any] | bool, value: object) -> None:
    """Raise :class:`~agentsessions.InvalidArgumentsError` naming the field where ``value`` does not fit ``schema``.

    ``value`` is JSON as :func:`json.loads` returns it. ``schema`` is compiled on each
    call; to check many values against one schema, keep a :func:`checker`.
    """
    checker(schema)(value)


def checker(schema: Mapping[str, Any] | bool) -> Callable[[object], None]:
    """``schema`` compiled once: a function of a value that raises :class:`~agentsessions.InvalidArgumentsError`."""
    compiled = _Compiler(schema).compile(schema)

    def check_value(value: object) -> None:
        try:
            compiled(value)
        except Mismatch as mismatch:
            raise InvalidArgumentsError(mismatch.field, mismatch.problem) from None

    return check_value


class Mismatch(Exception):
    """Where and how a value does not fit; the path grows on the way out, innermost key first."""

    def __init__(self, problem: str, *, expected: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        # What a type, enum or const check wanted, so that anyOf can say "integer or null".
        self.expected = expected
        self.reversed_path: list[str | int] = []

    def at(self, key: str | int) -> Mismatch:
        """This mismatch, seen one level further out, under ``key`` (a property name or an index)."""
        self.reversed_path.append(key)
        return self

    @property
    def field(self) -> str:
        """The path to the value, as ``items[2].name``; ``""`` for the value itself."""
        text = ""
        for key in reversed(self.reversed_path):
            if isinstance(key, int):
                text += f"[{key}]"
            elif key.isidentifier():
                text += f".{key}" if text else key
            else:
                text += f"[{json.dumps(key)}]"
        return text


def kind(value: object) -> str:
    """The JSON type of a value :func:`json.loads` returned."""
    for name, test in _TYPES.items():
        if name != "integer" and test(value):
            return "integer" if name == "number" and isinstance(value, int) else name
    return type(value).__name__


def shown(value: object) -> str:
    """``value`` for a message: its JSON type and the start of its JSON text."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return f"{kind(value)} {text if len(text) <= 40 else text[:37] + '...'}"


def equal(a: object, b: object) -> bool:
    """JSON's equality, for ``enum``, ``const`` and ``uniqueItems``: ``1`` is ``1.0``, ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(map(equal, a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(equal(a[key], b[key]) for key in a)
    return type(a) is type(b) and a == b


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_array(value: object) -> TypeGuard[list[Any] | tuple[Any, ...]]:
    return isinstance(value, (list, tuple))


_TYPES: dict[str, Callable[[object], bool]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    # 2020-12: a number with no fractional part is an integer (1.0 is one).
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": _is_number,
    "string": lambda v: isinstance(v, str),
    "array": _is_array,
    "object": lambda v: isinstance(v, Mapping),
}

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "null": (type(None),),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "array": (list, tuple),
    "object": (dict,),
}

# keyword: the values it applies to, what it measures, how the bound holds, the words for it.
_LIMITS: dict[str, tuple[Callable[[object], bool], Callable[[Any], Any], Callable[[Any, Any], bool], str]] = {
    "minimum": (_is_number, operator.pos, operator.ge, "a number at least {}"),
    "maximum": (_is_number, operator.pos, operator.le, "a number at most {}"),
    "exclusiveMinimum": (_is_number, operator.pos, operator.gt, "a number greater than {}"),
    "exclusiveMaximum": (_is_number, operator.pos, operator.lt, "a number less than {}"),
    "minLength": (_TYPES["string"], len, operator.ge, "at least {} characters"),
    "maxLength": (_TYPES["string"], len, operator.le, "at most {} characters"),
    "minItems": (_is_array, len, operator.ge, "at least {} items"),
    "maxItems": (_is_array, len, operator.le, "at most {} items"),
}


def _anything(value: object) -> None:
    pass


def _nothing(value: object) -> None:
    raise Mismatch("not allowed here")


def _all(checks: Sequence[Check]) -> Check:
    if len(checks) <= 1:
        return checks[0] if checks else _anything

    def check_all(value: object) -> None:
        for one in checks:
            one(value)

    return check_all


class _Compiler:
    """Turns a schema into nested functions; one per schema, as ``$ref`` resolves against its root."""

    def __init__(self, root: object) -> None:
        self.root = root
        self.refs: dict[str, Check] = {}

    def compile(self, schema: object) -> Check:
        if schema is False:
            return _nothing
        if not isinstance(schema, Mapping):
            return _anything  # True, or not a schema at all (the provider refuses those itself)
        return _all(
            [
                *_value_checks(schema),
                *_limit_checks(schema),
                *self.object_checks(schema),
                *self.array_checks(schema),
                *self.combined_checks(schema),
            ]
        )

    def object_checks(self, schema: Mapping[str, Any]) -> list[Check]:
        required = schema.get("required")
        required = [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        additional = schema.get("additionalProperties", True)
        # patternProperties names more properties that are allowed: not checked, so not refused either.
        if "patternProperties" in schema:
            additional = True
        if not (required or properties or additional is not True):
            return []
        compiled = {name: self.compile(sub) for name, sub in properties.items()}
        exact = {name: found for name, sub in properties.items() if (found := _exact_types(sub))}
        extra = None if additional is True else self.compile(additional)
        return [_object_check(required, compiled, exact, extra, closed=additional is False)]

    def array_checks(self, schema: Mapping[str, Any]) -> list[Check]:
        prefix, rest = schema.get("prefixItems"), schema.get("items")
        if isinstance(rest, list):  # draft 7: a list of items is 2020-12's prefixItems
            prefix, rest = rest, schema.get("additionalItems")
        checks: list[Check] = []
        if isinstance(prefix, list) or rest is not None:
            prefix_checks = [self.compile(sub) for sub in prefix] if isinstance(prefix, list) else []
            checks.append(_items_check(prefix_checks, None if rest is None else self.compile(rest)))
        if schema.get("uniqueItems") is True:
            checks.append(_unique_check)
        return checks

    def combined_checks(self, schema: Mapping[str, Any]) -> list[Check]:
        checks: list[Check] = []
        if isinstance(schema.get("$ref"), str):
            checks.append(self.ref(schema["$ref"]))
        if isinstance(schema.get("allOf"), list):
            checks.extend(self.compile(sub) for sub in schema["allOf"])
        for keyword in ("anyOf", "oneOf"):
            options = schema.get(keyword)
            if isinstance(options, list) and options:
                checks.append(_options_check([self.compile(sub) for sub in options], keyword == "oneOf"))
        return checks

    def ref(self, ref: str) -> Check:
        """A ``$ref`` within this schema, compiled once, when first met (a schema may refer to itself)."""
        if not ref.startswith("#"):
            return _anything
        if ref not in self.refs:
            self.refs[ref] = _anything  # a reference to itself, met while compiling it, reads this
            self.refs[ref] = self.compile(_pointer(self.root, ref[1:]))
        refs = self.refs
        return lambda value: refs[ref](value)


def _pointer(root: object, pointer: str) -> object:
    """The part of ``root`` a JSON pointer names, or ``True`` (anything goes) if there is none."""
    node = root
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return True
    return node


# The checks. Each applies only to the values it is about: "minimum" says nothing of a string.


def _expect(test: Callable[[object], bool], expected: str) -> Check:
    def check_expected(value: object) -> None:
        if not test(value):
            raise Mismatch(f"expected {expected}, got {shown(value)}", expected=expected)

    return check_expected


def _type_check(names: list[str]) -> Check:
    # The exact types json.loads makes answer at once; isinstance covers the rest (1.0 is an integer).
    exact = frozenset(python for name in names for python in _PYTHON_TYPES[name])
    tests = [_TYPES[name] for name in names]
    expected = _listed(names)

    def check_type(value: object) -> None:
        if type(value) not in exact and not any(test(value) for test in tests):
            raise Mismatch(f"expected {expected}, got {shown(value)}", expected=expected)

    return check_type


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _value_checks(schema: Mapping[str, Any]) -> list[Check]:
    """``type``, ``enum``, ``const`` and ``pattern``: what the value may be."""
    checks: list[Check] = []
    nullable = schema.get("nullable") is True  # OpenAPI's spelling of "or null"
    names = schema.get("type")
    names = [names] if isinstance(names, str) else names
    if isinstance(names, list) and names and all(name in _TYPES for name in names):
        names = [*names, "null"] if nullable and "null" not in names else names
        checks.append(_type_check(names))
    options = schema.get("enum")
    if isinstance(options, list):
        options = [*options, None] if nullable and None not in options else options
        strings = frozenset(option for option in options if isinstance(option, str))
        expected = "one of " + json.dumps(options, ensure_ascii=False)
        expected = expected if len(expected) <= 80 else expected[:77] + "..."
        checks.append(
            _expect(lambda v: (isinstance(v, str) and v in strings) or any(equal(v, o) for o in options), expected)
        )
    if "const" in schema:
        constant = schema["const"]
        checks.append(_expect(lambda v: equal(v, constant), json.dumps(constant, ensure_ascii=False)))
    pattern = schema.get("pattern")
    try:
        compiled = re.compile(pattern) if isinstance(pattern, str) else None
    except re.error:
        compiled = None  # ECMA-262 syntax Python does not read: not checked
    if compiled is not None:
        checks.append(
            _expect(lambda v: not isinstance(v, str) or bool(compiled.search(v)), f"a string matching {pattern!r}")
        )
    return checks


def _limit_checks(schema: Mapping[str, Any]) -> list[Check]:
    """The bounds on numbers, string lengths and item counts."""
    limits = {keyword: schema[keyword] for keyword in _LIMITS if _is_number(schema.get(keyword))}
    for open_bound, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if schema.get(open_bound) is True and bound in limits:  # draft 4: a boolean beside the bound
            limits[open_bound] = limits.pop(bound)
    return [_limit_check(*_LIMITS[keyword], limit) for keyword, limit in limits.items()]


def _limit_check(
    applies: Callable[[object], bool],
    measure: Callable[[Any], Any],
    holds: Callable[[Any, Any], bool],
    words: str,
    limit: Any,
) -> Check:
    expected = words.format(limit)

    def check_limit(value: object) -> None:
        if applies(value) and not holds(measure(value), limit):
            raise Mismatch(f"expected {expected}, got {shown(value)}")

    return check_limit


_ANNOTATIONS = frozenset({"type", "description", "title", "default", "examples", "format", "deprecated"})


def _exact_types(schema: object) -> frozenset[type]:
    """For a schema that only names types (``{"type": "integer"}``), the Python types that surely fit.

    A property's value of one of them needs no call at all: most tool arguments are such.
    """
    if not isinstance(schema, Mapping) or not _ANNOTATIONS.issuperset(schema) or "type" not in schema:
        return frozenset()
    names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if not all(isinstance(name, str) and name in _PYTHON_TYPES for name in names):
        return frozenset()
    return frozenset(python for name in names for python in _PYTHON_TYPES[name])


def _object_check(
    required: list[str],
    properties: dict[str, Check],
    exact: dict[str, frozenset[type]],
    extra: Check | None,
    *,
    closed: bool,
) -> Check:
    allowed = ", ".join(properties) or "none"

    def check_object(value: object) -> None:
        if type(value) is not dict and not isinstance(value, Mapping):
            return
        for name in required:
            if name not in value:
                raise Mismatch("missing (it is required)").at(name)
        for key, item in value.items():
            if type(item) in exact.get(key, ()):
                continue
            sub = properties.get(key, extra)
            if sub is None:
                continue
            try:
                if closed and key not in properties:
                    raise Mismatch(f"not allowed (allowed: {allowed})")
                sub(item)
            except Mismatch as mismatch:
                raise mismatch.at(key) from None

    return check_object


def _items_check(prefix: list[Check], rest: Check | None) -> Check:
    def check_items(value: object) -> None:
        if not _is_array(value):
            return
        for index, item in enumerate(value):
            sub = prefix[index] if index < len(prefix) else rest
            if sub is not None:
                try:
                    sub(item)
                except Mismatch as mismatch:
                    raise mismatch.at(index) from None

    return check_items


def _unique_check(value: object) -> None:
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            if any(equal(item, earlier) for earlier in value[:index]):
                raise Mismatch(f"expected unique items, but {shown(item)} repeats an earlier one").at(index)


def _options_check(options: list[Check], exactly_one: bool) -> Check:
    """``anyOf`` (at least one option fits) or ``oneOf`` (exactly one does)."""

    def check_options(value: object) -> None:
        misses: list[Mismatch] = []
        for option in options:
            try:
                option(value)
            except Mismatch as mismatch:
                misses.append(mismatch)
            else:
                if not exactly_one:
                    return
        fitting = len(options) - len(misses)
        if fitting > 1:
            raise Mismatch(f"fits {fitting} of the schemas in oneOf, where exactly one must fit")
        if fitting == 0:
            raise _most_telling(misses, value)

    return check_options


def _most_telling(misses: list[Mismatch], value: object) -> Mismatch:
    """Of the options' mismatches, the one that got deepest into the value: the option the model meant.

    If all of them failed at the value itself, what each wanted ("integer or null").
    """
    deepest = max(misses, key=lambda mismatch: len(mismatch.reversed_path))
    if deepest.reversed_path:
        return deepest
    if all(mismatch.expected for mismatch in misses):
        expected = _listed(list(dict.fromkeys(mismatch.expected for mismatch in misses)))
        return Mismatch(f"expected {expected}, got {shown(value)}", expected=expected)
    return Mismatch("fits none of the allowed forms: " + "; or ".join(mismatch.problem for mismatch in misses))
