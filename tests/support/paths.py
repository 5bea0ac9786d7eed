"""Where things are in the checkout, wherever the test module that asks lives."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
"""The repository's top: README.md, docs/, examples/, benchmarks/ and the package."""

FIXTURES = ROOT / "tests" / "fixtures"
"""Recorded streams and stored rows that tests read (tests/fixtures/)."""


def load_example(path: Path, name: str) -> ModuleType:
    """An example script imported from its file as module ``name`` (examples/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
