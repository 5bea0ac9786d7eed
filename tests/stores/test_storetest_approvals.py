"""storetest's approval properties fail stores that break an approval rule, naming the property."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Mapping, Sequence

import attrs
import pytest

from agentsessions.approvals import Approval, Decision, decided
from agentsessions.runs import Claim, RunState
from agentsessions.stores.kit.approvals import Rewrite
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing import storetest
from agentsessions.testing._storetest_approvals import DECIDE, EDIT, RACE, WAIT

pytestmark = pytest.mark.slow  # conformance properties


class ClaimsWhileUndecided(MemoryStore):
    """Lets a run claim a waiting session before every call is decided."""

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        entry = self._sessions.get(session_id)
        if entry is not None and entry.run_state is RunState.WAITING:
            entry.approvals = tuple(
                a if a.decision else Approval(a.call_id, a.tool, a.input, a.requested_at, "approved")
                for a in entry.approvals
            )
        return super().claim(session_id, replica=replica, lease=lease)


class DecidesOverDecisions(MemoryStore):
    """Records any decision, replacing the one before: a yes becomes a no."""

    def decide(self, session_id: str, decisions: Mapping[str, Decision], *, rewrite: Rewrite | None = None) -> RunState:
        entry = self._sessions[session_id]
        now = datetime.datetime.now(datetime.UTC)
        undecided = [Approval(a.call_id, a.tool, a.input, a.requested_at) for a in entry.approvals]
        after = decided(session_id, entry.run_state is RunState.WAITING, undecided, decisions, now)
        kept = {a.call_id: a for a in entry.approvals}
        kept.update({a.call_id: a for a in after or () if a.decision})
        entry.approvals = tuple(kept[a.call_id] for a in entry.approvals)
        return RunState.WAITING


class ReadsThenWrites(MemoryStore):
    """Decides from a read, then writes without checking that nothing changed in between."""

    def decide(self, session_id: str, decisions: Mapping[str, Decision], *, rewrite: Rewrite | None = None) -> RunState:
        entry = self._sessions[session_id]
        seen: Sequence[Approval] = entry.approvals
        waiting = entry.run_state is RunState.WAITING
        threading.Event().wait(0.01)  # the window another decider comes through
        after = decided(session_id, waiting, seen, decisions, datetime.datetime.now(datetime.UTC))
        if after is not None:
            entry.approvals = tuple(after)
        return RunState.WAITING


class LeavesTheTranscript(MemoryStore):
    """Records an edited input in the approval but leaves the transcript's call as the model wrote it."""

    def decide(self, session_id: str, decisions: Mapping[str, Decision], *, rewrite: Rewrite | None = None) -> RunState:
        return super().decide(session_id, decisions, rewrite=lambda position, message, inputs: message)


class DropsTheModelsInput(MemoryStore):
    """Rewrites the call but forgets what the model asked for."""

    def decide(self, session_id: str, decisions: Mapping[str, Decision], *, rewrite: Rewrite | None = None) -> RunState:
        state = super().decide(session_id, decisions, rewrite=rewrite)
        entry = self._sessions[session_id]
        entry.approvals = tuple(attrs.evolve(a, original_input=None) for a in entry.approvals)
        return state


@pytest.mark.parametrize(
    ("prop", "factory"),
    [
        pytest.param(EDIT, LeavesTheTranscript, id="leaves-the-transcript"),
        pytest.param(EDIT, DropsTheModelsInput, id="drops-the-models-input"),
        pytest.param(WAIT, ClaimsWhileUndecided, id="claims-while-undecided"),
        pytest.param(DECIDE, DecidesOverDecisions, id="decides-twice"),
        pytest.param(RACE, ReadsThenWrites, id="reads-then-writes"),
    ],
)
def test_a_store_breaking_an_approval_rule_fails_naming_it(prop: str, factory: Callable[[], MemoryStore]) -> None:
    store = factory()
    with pytest.raises(AssertionError, match=f"^storetest property {prop!r}: ") as caught:
        storetest.check(prop, lambda: store, max_examples=20)
    assert caught.value.__cause__ is not None


def test_the_approval_properties_are_skipped_for_a_store_without_approvals() -> None:
    class NoApprovals(MemoryStore):
        wait = approvals = decide = None  # type: ignore[assignment]

    report = storetest.check(WAIT, NoApprovals)
    assert report.skipped == (WAIT,) and WAIT in storetest.APPROVAL_PROPERTIES
