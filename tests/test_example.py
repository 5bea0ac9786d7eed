"""examples/sessions: three OS processes over one SQLite file print the six promised lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_three_replica_example_keeps_its_promises(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sessions"), "--db", str(tmp_path / "sessions.db")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 6
    assert lines[1] == "replica A   ran 2 steps and was never told replica B existed"
    assert lines[2] == "transcript  4 messages, and the steer is message 0 of them"
    assert lines[3] == "replica C   resumed from 4 messages it never produced, and answered"
    assert 'line 23 (raise TokenError("token refused' in lines[4]
    assert lines[5] == "steers      0 left in the store: it was handed over exactly once"
