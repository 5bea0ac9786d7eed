"""The README cannot drift: its Python blocks run, and CI runs the test command it gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_readme_python_blocks_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"README.md python block {number}", "exec"), {"__name__": f"readme_{number}"})


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.search(r"^```sh\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
    assert commands is not None
    test_command = commands.group(1).splitlines()[1].split("#")[0].strip()
    assert test_command in (ROOT / ".ci" / "run").read_text()
