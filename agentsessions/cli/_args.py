"""The command's argument types: durations, states, KEY=VALUE pairs, counts, seconds."""

from __future__ import annotations

import argparse
import datetime
import re

from agentsessions.runs import RunState

_DURATION = re.compile(r"(\d+)([wdhms])")
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def duration(text: str) -> datetime.timedelta:
    """``7d``, ``12h``, ``30m``, ``45s``, ``2w`` or a sum of them (``1h30m``) as a timedelta."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"a duration is like 7d, 12h, 30m, 45s, 2w or 1h30m, got {text!r}")
    return datetime.timedelta(seconds=sum(int(n) * _UNITS[u] for n, u in parts))


def state(text: str) -> RunState:
    try:
        return RunState(text.lower())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of: {', '.join(s.value for s in RunState)}") from None


def pair(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return name, value


def count(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least {least}, got {text!r}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value
