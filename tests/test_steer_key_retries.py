"""A web view's retries of ``Runner.send(..., key=...)`` from two processes, on every persistent store.

See tests/support/retrying.py for what a trial does. A few trials per backend by default
(``AGENTSESSIONS_RETRY_TRIALS``, default 3); ``AGENTSESSIONS_RETRY_SEED`` replays a failing
run, whose failure names its seed and trial. ``-s`` prints the counts.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support.backends import Opener
from tests.support.retrying import ATTEMPTS, SENDERS, TEXTS, retry_trials

pytestmark = pytest.mark.slow  # processes

TRIALS = int(os.environ.get("AGENTSESSIONS_RETRY_TRIALS", "3"))
SEED = int(os.environ.get("AGENTSESSIONS_RETRY_SEED", str(random.randrange(10**6))))


def test_every_text_retried_from_two_processes_is_stored_and_answered_once(opener: Opener) -> None:
    print(f"\nseed {SEED}")
    tally = retry_trials(opener, TRIALS, SEED)
    print(tally)
    assert tally.errors == [], f"seed {SEED}: {tally.errors}"
    assert tally.attempts == TRIALS * SENDERS * TEXTS * ATTEMPTS
    assert (tally.stored, tally.answered, tally.extra_answers) == (TRIALS * TEXTS, TRIALS * TEXTS, 0), f"seed {SEED}"
