"""The ``agentsessions`` command run in this process, as a shell would see it; for the CLI's tests and others."""

from __future__ import annotations

import io
import sys

import attrs

from agentsessions.cli import main


@attrs.frozen
class Outcome:
    """What a run of the command left: its exit code, stdout and stderr."""

    code: int
    out: str
    err: str

    def lines(self) -> list[str]:
        return self.out.splitlines()


def cli(*argv: str) -> Outcome:
    """Run the command in this process, as a shell would see it: exit code, stdout, stderr."""
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = main(list(argv))
    finally:
        sys.stdout, sys.stderr = saved
    texts = []
    for stream in (out, err):
        stream.flush()
        texts.append(stream.buffer.getvalue().decode())
    return Outcome(code, texts[0], texts[1])
