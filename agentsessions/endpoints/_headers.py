"""The API key and the extra headers: checked when an endpoint is made, and never shown.

A key with whitespace or control characters, sent, makes ``requests`` refuse the header
with a message that quotes it; so such keys (and such header values) are refused here,
by a message that names where the key came from and what is wrong, never the value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class Secret:
    """A credential that never shows itself: its repr and str are a placeholder.

    Kept inside the endpoints instead of the plain key, so a debugger, a ``vars()`` dump
    or an f-string cannot print it by accident; only :meth:`reveal` gives it out.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The credential itself, for the one header that carries it."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('<hidden>')"

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("an API key is not pickled; construct the endpoint again where it is needed")


def _flaw(key: str) -> str:
    """What makes ``key`` unfit for a header, in words that give away none of it; ``""`` if nothing."""
    for index, char in enumerate(key):
        if char.isspace() or not char.isprintable() or not char.isascii():
            kind = "whitespace" if char.isspace() else "a control character"
            if char.isprintable() and not char.isspace():
                kind = "a non-ASCII character"
            where = "at its start" if index == 0 else "at its end" if index == len(key) - 1 else "inside it"
            return f"{kind} {where}"
    return ""


def resolve_key(given: str | None, env_var: str) -> Secret:
    """``given``, else the environment variable; a ``ValueError`` naming where it came from if it is unusable.

    A key with whitespace or control characters (a newline kept from a file, a space
    pasted along) is refused here: sent, ``requests`` would refuse the header with a
    message that quotes it. No message says anything of the key but what is wrong with it.
    """
    key = given if given is not None else os.environ.get(env_var)
    if not key:
        raise ValueError(f"no API key: pass api_key=... or set the environment variable {env_var}")
    if not isinstance(key, str):
        raise TypeError(f"api_key must be a str, got {type(key).__name__}")
    flaw = _flaw(key)
    if flaw:
        source = "api_key" if given is not None else f"the environment variable {env_var}"
        raise ValueError(
            f"{source} holds an API key with {flaw}; a key is printable ASCII without spaces "
            "(a key read from a file often keeps its newline: strip it)"
        )
    return Secret(key)


def check_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` as a dict, or a ``ValueError`` that names the header at fault but never shows its value."""
    for name, value in headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a header name")
        if not isinstance(value, str):
            raise TypeError(f"the value of the header {name!r} must be a str, got {type(value).__name__}")
        if value != value.strip() or not all(" " <= char <= "~" for char in value):
            raise ValueError(f"the header {name!r} has whitespace at an end, or a control or non-ASCII character")
    return dict(headers)
