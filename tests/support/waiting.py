"""Waiting on a state instead of sleeping a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(what: str, probe: Callable[[], Any], seconds: float = 20.0, every: float = 0.02) -> Any:
    """Poll ``probe`` until it returns something true, and return that; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")
