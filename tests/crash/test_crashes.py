"""Kill tests on every persistent backend (see tests/support/crashes.py for what a trial does and checks).

CI runs a few trials per backend (``AGENTSESSIONS_CRASH_TRIALS``, default 4); the full
count is ``AGENTSESSIONS_CRASH_TRIALS=100 python -m pytest tests/crash -s``.
``AGENTSESSIONS_CRASH_SEED`` replays a failing run: every failure names its seed and trial.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.support.approval_crashes import approval_kill_trials
from tests.support.backends import Opener
from tests.support.crashes import journal_trials, kill_trials, same_session_trials
from tests.support.sending import send_trials

pytestmark = pytest.mark.crash

TRIALS = int(os.environ.get("AGENTSESSIONS_CRASH_TRIALS", "4"))
SEED = int(os.environ.get("AGENTSESSIONS_CRASH_SEED", str(random.randrange(10**6))))


def test_a_killed_run_loses_no_steer_and_is_resumed_by_another_process(opener: Opener, tmp_path: Path) -> None:
    print(f"\nseed {SEED}")
    tally = kill_trials(opener, TRIALS, SEED, str(tmp_path))
    print(tally)
    assert (tally.trials, tally.resumed, tally.lost, tally.doubled) == (TRIALS, TRIALS, 0, 0)


def test_one_session_is_run_by_one_process_at_a_time(opener: Opener, tmp_path: Path) -> None:
    print(f"\nseed {SEED}")
    seen = same_session_trials(opener, max(1, TRIALS // 2), SEED, str(tmp_path))
    print(dict(seen))
    assert sum(seen.values()) == 2 * max(1, TRIALS // 2)


def test_with_the_journal_no_finished_tool_runs_twice_across_kills(opener: Opener, tmp_path: Path) -> None:
    print(f"\nseed {SEED}")
    tally = journal_trials(opener, TRIALS, SEED, str(tmp_path))
    print(tally)
    assert (tally.conversations, tally.resumes_completed, tally.performed_twice) == (TRIALS, TRIALS, 0)


def test_a_text_send_acknowledged_is_answered_once_though_its_sender_is_killed(opener: Opener) -> None:
    print(f"\nseed {SEED}")
    tally = send_trials(opener, TRIALS, SEED)
    print(tally)
    assert tally.broken == [], f"seed {SEED}: {tally.broken}"
    assert (tally.trials, tally.lost, tally.doubled) == (TRIALS, 0, 0)
    assert tally.answered_once == tally.acknowledged > 0


@pytest.mark.parametrize("if_busy", ["queue", "interrupt", "reject"])
def test_texts_sent_with_each_if_busy_policy_are_answered_once_or_refused(opener: Opener, if_busy: str) -> None:
    # Two sender processes race sends with one policy, one of them killed at a random instant.
    print(f"\nseed {SEED}, if_busy={if_busy!r}")
    tally = send_trials(opener, TRIALS, SEED, if_busy)
    print(tally)
    assert tally.broken == [], f"seed {SEED}: {tally.broken}"
    assert (tally.trials, tally.lost, tally.doubled) == (TRIALS, 0, 0)
    assert tally.answered_once == tally.acknowledged > 0
    assert if_busy == "reject" or tally.refused == 0


def test_an_approved_call_killed_inside_its_tool_runs_at_most_once(opener: Opener, tmp_path: Path) -> None:
    print(f"\nseed {SEED}")
    tally = approval_kill_trials(opener, TRIALS, SEED, str(tmp_path))
    print(tally)
    assert tally.trials == TRIALS and tally.doubled == 0, f"seed {SEED}: {tally}"
    assert tally.ran_once + tally.in_doubt == TRIALS, f"seed {SEED}: {tally}"
