"""The benchmark suite's quick mode still runs and prints its figures (timings are never asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.paths import ROOT
from tests.support.servers import POSTGRES_DSN, require_server

pytestmark = pytest.mark.slow  # the benchmark suite, quick mode


def run_benchmark(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python argv...`` from the repository's root, which must exit 0; its output."""
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_quick_mode_runs_and_prints_every_section() -> None:
    done = run_benchmark("-m", "benchmarks", "--quick")
    out = done.stdout
    for heading in (
        "== loop overhead per step",
        "== telemetry overhead per step",
        "-step run with a SQLite store",
        "messages from SQLite",
        "a lease renewal",
        "concurrent runs in one process",
        "prompt caching over a",
        "== goals (measured / goal)",
    ):
        assert heading in out, f"{heading!r} missing from:\n{out}"
    for figure in ("floor (plain dicts)", "agentsessions, NORMAL", "agentsessions, durable (FULL)"):
        assert figure in out, f"{figure!r} missing from:\n{out}"
    # The durable option reaches SQLite: the suite reads the pragma back from the store's connection.
    assert "sqlite, synchronous=NORMAL" in out and "sqlite, synchronous=FULL" in out, out
    assert "loop overhead, agentsessions / plain-dict floor" in out, out
    # The test extra installs the OpenTelemetry SDK, so the telemetry figures are measured, not skipped.
    assert "OpenTelemetry, SDK + in-memory" in out, out
    assert "save / bare write, redis" in out or "redis: skipped (" in out, out  # Redis measured, or why not
    # Each peer either ran or was skipped with its reason.
    for peer in ("LangGraph", "OpenAI Agents"):
        assert f"{peer}: skipped" in out or f"\n  {peer}" in out, out


def test_session_listing_quick_mode_lists_the_user_beside_listing_by_state() -> None:
    done = run_benchmark("-m", "benchmarks.session_listing", "--quick")
    assert "sqlite,     1,000 sessions: u42's 20 newest" in done.stdout, done.stdout
    for store in ("postgres", "mysql", "redis"):  # measured, or skipped saying why
        assert f"{store},     1,000 sessions" in done.stdout or f"{store}: skipped (" in done.stdout, done.stdout
    peer = "LangGraph PostgresSaver,     1,000 sessions"
    assert peer in done.stdout or "langgraph: skipped (" in done.stdout, done.stdout


def test_the_compaction_benchmark_prints_both_runs_for_each_provider() -> None:
    argv = ["--steps", "30", "--window", "9000", "--trigger", "6000", "--keep", "2000"]
    done = run_benchmark("benchmarks/compaction_window.py", *argv)
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith(("  Anthropic", "  OpenAI"))]
    assert len(rows) == 6, done.stdout
    for provider in ("Messages", "Chat", "Responses"):
        without, with_ = (row for row in rows if row[1].rstrip(",") == provider)
        assert "never" in with_ and "never" not in without, done.stdout  # only the compacted run fits the window


@pytest.mark.server
def test_the_prune_benchmark_prints_the_batches_beside_the_claims() -> None:
    import psycopg

    require_server("PostgreSQL", lambda: psycopg.connect(POSTGRES_DSN).close())
    done = run_benchmark("-m", "benchmarks.prune", "--sessions", "2000")
    assert "a batch transaction: median " in done.stdout, done.stdout
    assert "a claim during the prune (" in done.stdout, done.stdout


def test_session_scaling_interleaved_tells_a_plain_save_that_reads_the_transcript() -> None:
    argv = ["--sessions", "300", "--stores", "sqlite", "--modes", "run,plain", "--repeats", "1", "--interleave"]
    done = run_benchmark("-m", "benchmarks.session_scaling", *argv)
    pattern = r"^sqlite +300 (run|plain), mixed +[\d.]+ +[\d.]+ +([\d.]+) (ok|over) "
    rows = {m[1]: (float(m[2]), m[3]) for m in re.finditer(pattern, done.stdout, re.MULTILINE)}
    assert set(rows) == {"run", "plain"}, done.stdout
    # Early and late sessions timed in one round: a plain save of a forgotten session reads its
    # 120 stored rows (several times the early one's cost), a run's save does not.
    assert rows["plain"][1] == "over" and rows["plain"][0] > rows["run"][0], done.stdout
