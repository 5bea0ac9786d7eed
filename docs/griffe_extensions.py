"""Griffe extensions for the API reference: reST roles rendered as links, and attrs classes' signatures.

``RstRoles``: the docstrings' reST roles rendered as links.

The docstrings are written for both readers of the source and the site, with Sphinx's
roles (``:class:`~agentsessions.errors.StoreError```, ``:meth:`save```). mkdocstrings reads
docstrings as Markdown, where a role is shown raw; this turns each into a cross-reference
(a link when the site documents its target, the name in code otherwise), and a paragraph's
closing ``::`` (reST's "a code block follows") into ``:``.

``AttrsSignatures``: an attrs class has no ``__init__`` in its source (attrs writes it at
import), so the reference would show it without a signature; this gives it the one attrs
made, annotations and defaults included. ``mkdocs.yml`` loads both.
"""

from __future__ import annotations

import enum
import html
import inspect
import re
from typing import Any

from griffe import (
    AliasResolutionError,
    Class,
    CyclicAliasError,
    Extension,
    Function,
    GriffeLoader,
    Object,
    ObjectNode,
    Parameter,
    ParameterKind,
    Parameters,
    dynamic_import,
)

ROLE = re.compile(r":(?:py:)?(?P<role>class|meth|func|mod|attr|data|exc|obj|const|ref):`(?P<body>[^`]+)`")
LITERAL_BLOCK = re.compile(r"(?<=\S)::$", re.MULTILINE)
EXPLICIT = re.compile(r"(?P<title>.*?)\s*<(?P<target>[^>]+)>$")


class RstRoles(Extension):
    """Rewrites every docstring's roles once the tree is loaded, when every target can be looked up."""

    def on_object(self, *, obj: Object, loader: GriffeLoader, **kwargs: Any) -> None:
        docstring = obj.docstring
        if obj.is_alias or docstring is None:
            return

        def convert(text: str) -> str:
            text = ROLE.sub(lambda match: _reference(match, obj, loader), text)
            return LITERAL_BLOCK.sub("", text) if "::" in text else text

        docstring.value = convert(docstring.value)
        # An extension that ran before (griffe_fieldz, adding the fields) may have parsed it already.
        for section in docstring.__dict__.get("parsed", ()):
            if isinstance(section.value, str):
                section.value = convert(section.value)
            elif isinstance(section.value, list):
                for item in section.value:
                    if isinstance(getattr(item, "description", None), str):
                        item.description = convert(item.description)


def _reference(match: re.Match[str], obj: Object, loader: GriffeLoader) -> str:
    body = match["body"]
    explicit = EXPLICIT.fullmatch(body)
    target = (explicit["target"] if explicit else body).lstrip("~!").removesuffix("()")
    if explicit:
        title = explicit["title"]
    else:
        title = target.rpartition(".")[2] if body.startswith("~") else target
        if match["role"] in ("meth", "func"):
            title += "()"
    path = _resolve(target, obj, loader)
    code = f"<code>{html.escape(title)}</code>"
    if path is None:
        return code
    return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'


def _resolve(target: str, obj: Object, loader: GriffeLoader) -> str | None:
    """The path of what ``target`` names, seen from ``obj``: in its class, its module, its package, or as given."""
    places = [obj.parent.path if obj.parent is not None and obj.parent.is_class else None]
    places += [obj.module.path, obj.package.path, None]
    for place in places:
        candidate = f"{place}.{target}" if place else target
        try:
            found = loader.modules_collection[candidate]
        except (KeyError, ValueError, AliasResolutionError, CyclicAliasError):  # an import of another package
            continue
        return str(found.path)
    return None


class AttrsSignatures(Extension):
    """Gives each attrs class the ``__init__`` attrs generated, so its signature shows."""

    def on_class_members(self, *, node: Any, cls: Class, **kwargs: Any) -> None:
        if isinstance(node, ObjectNode) or "__init__" in cls.members:
            return
        try:
            runtime = dynamic_import(cls.path)
        except ImportError:
            return
        if not hasattr(runtime, "__attrs_attrs__"):
            return
        signature = inspect.signature(runtime.__init__)
        # A field with a converter takes what the converter takes: its declared type says what it holds.
        declared = {field.alias: field.type for field in runtime.__attrs_attrs__ if field.type is not None}
        parameters = [
            Parameter(
                name,
                annotation=_annotation(parameter.annotation) or _annotation(declared.get(name, parameter.empty)),
                kind=ParameterKind(parameter.kind.description),
                default=None if parameter.default is inspect.Parameter.empty else _default(parameter.default),
            )
            for name, parameter in signature.parameters.items()
        ]
        cls.set_member("__init__", Function("__init__", parameters=Parameters(*parameters), returns="None"))


def _annotation(annotation: object) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _default(value: object) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)
