"""Kill -9 during compaction on every persistent backend (see tests/support/compaction_crashes.py).

CI runs 2 trials per backend (``AGENTSESSIONS_CRASH_TRIALS`` sets how many);
``AGENTSESSIONS_CRASH_SEED`` replays a failing run: every failure names its seed and trial.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support.backends import Opener
from tests.support.compaction_crashes import compaction_kill_trials

pytestmark = pytest.mark.crash

TRIALS = int(os.environ.get("AGENTSESSIONS_CRASH_TRIALS", "2"))
SEED = int(os.environ.get("AGENTSESSIONS_CRASH_SEED", str(random.randrange(10**6))))


def test_a_run_killed_while_compacting_stores_a_whole_summary_or_none_and_resumes(opener: Opener) -> None:
    print(f"\nseed {SEED}")
    tally = compaction_kill_trials(opener, TRIALS, SEED)
    print(tally)
    assert tally.trials == tally.killed + tally.finished_first == TRIALS, f"seed {SEED}: {tally}"
    assert tally.resumes == tally.killed, f"seed {SEED}: {tally}"
