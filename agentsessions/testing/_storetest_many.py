"""The property that saves stay right with more sessions than a store remembers; private to storetest.

A store that writes only what is new has to know what is stored already, and a store
object can remember that for only so many sessions. This property grows, changes and
shortens the transcripts of more sessions, through one store object, than any such
memory should hold (more than the 256 the library's own stores keep for plain saves),
so that every save of a session meets it forgotten, and reads every one back. With a
:class:`~agentsessions.session.RunStore` a third of the sessions are held by runs and
saved under their claims, some through the replica, which never saw them.
"""

from __future__ import annotations

import contextlib
import random

from hypothesis import given
from hypothesis import strategies as st

from agentsessions.messages import Content, Message
from agentsessions.runs import Claim, RunState
from agentsessions.session import RunStore, Store
from agentsessions.testing._storetest_runmachine import LONG_LEASE
from agentsessions.testing._storetest_support import Context, check_equal, show_id

MANY = "saves stay right past any cache"

SESSIONS = 300
"""How many sessions one example saves, round-robin: more than the stores' memory of 256."""

_EDITS = ("extend", "extend", "extend", "change one", "shorten", "replace", "via the replica")


def check_many(context: Context) -> None:
    """:data:`MANY`: every session reads back as saved last, whatever was forgotten between its saves."""

    @context.fewer(50)
    @given(seed=st.integers(0, 2**32 - 1))
    def many(seed: int) -> None:
        context.examples += 1
        _Sessions(context, random.Random(seed)).check()

    many()


class _Sessions:
    """One example: :data:`SESSIONS` sessions, the transcripts they should hold, the claims of those run."""

    def __init__(self, context: Context, rng: random.Random) -> None:
        self.store, self.replica = context.both
        self.rng = rng
        self.ids = [context.new_id(f"many {i}") for i in range(SESSIONS)]
        self.model: dict[str, list[Message]] = {session_id: [] for session_id in self.ids}
        self.claims: dict[str, Claim] = {}
        self.serial = 0

    def check(self) -> None:
        if isinstance(self.store, RunStore):
            self.claims = {sid: self.store.claim(sid, replica="storetest", lease=LONG_LEASE) for sid in self.ids[::3]}
        try:
            for _ in range(3):
                self._round("extend")
            self._round(None)  # a random edit for each session
            self._read_back("after a round of edits")
            self._round("extend")
            self._read_back("after growing again")
        finally:
            self._clean_up()

    def _round(self, edit: str | None) -> None:
        for session_id in self.ids:
            self._edit(session_id, edit or self.rng.choice(_EDITS))

    def _edit(self, session_id: str, edit: str) -> None:
        old, fresh = self.model[session_id], self._message(session_id)
        via = self.store
        if edit == "extend" or not old:
            new = [*old, fresh]
        elif edit == "change one":
            at = self.rng.randrange(len(old))
            new = [*old[:at], fresh, *old[at + 1 :]]
        elif edit == "shorten":
            new = old[: self.rng.randrange(len(old))]
        elif edit == "replace":
            new = [fresh]
        else:  # through the replica: the store object's memory of the session is now stale
            new, via = [*old[:-1], fresh], self.replica
        self._save(via, session_id, new, edit)
        self.model[session_id] = new

    def _save(self, via: Store, session_id: str, messages: list[Message], edit: str) -> None:
        claim = self.claims.get(session_id)
        if claim is None:
            via.save(session_id, messages)
            return
        runs = via if isinstance(via, RunStore) else self.store
        assert isinstance(runs, RunStore)
        try:
            runs.save_run(claim, messages)
        except Exception as error:
            raise AssertionError(f"save_run of session {show_id(session_id)} ({edit}) failed: {error!r}") from error

    def _message(self, session_id: str) -> Message:
        # Every message is told from every other, so a store keeping the wrong row shows it.
        self.serial += 1
        role = self.rng.choice((Message.user, Message.assistant))
        text = f"{session_id} message {self.serial}"
        if self.rng.random() < 0.3:
            return Message.user(text, Content.tool_result(f"call {self.serial}", text))
        return role(text)

    def _read_back(self, when: str) -> None:
        for index, session_id in enumerate(self.ids):
            via, whose = (self.replica, "the replica") if index % 7 == 0 else (self.store, "the store")
            what = f"messages() through {whose} of session {index} of {SESSIONS} ({show_id(session_id)}) {when}"
            check_equal(via.messages(session_id), self.model[session_id], what)

    def _clean_up(self) -> None:
        if not isinstance(self.store, RunStore):
            return
        for session_id, claim in self.claims.items():
            # A failure here follows the check's own, which says more; the deletes still run.
            with contextlib.suppress(Exception):
                self.store.save_run(claim, self.model[session_id], end=RunState.FINISHED)
        for session_id in self.ids:
            self.store.delete(session_id)
