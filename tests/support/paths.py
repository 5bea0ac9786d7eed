"""Where things are in the checkout, wherever the test module that asks lives."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's top: README.md, docs/, examples/, benchmarks/ and the package."""

FIXTURES = ROOT / "tests" / "fixtures"
"""Recorded streams and stored rows that tests read (tests/fixtures/)."""
