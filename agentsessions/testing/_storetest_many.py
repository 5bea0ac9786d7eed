"""The property that saves stay right with more sessions than a store remembers; private to storetest.

A store that writes only what is new has to know what is stored already, and a store
object can remember that for only so many sessions. This property grows, changes and
shortens the transcripts of more sessions, through one store object, than any such
memory should hold (more than the 256 the library's own stores keep for plain saves),
so that every save of a session meets it forgotten, and reads every one back. With a
:class:`~agentsessions.session.RunStore` a third of the sessions are held by runs and
saved under their claims, some through the replica, which never saw them. Half of the
others are saved through session handles (:func:`~agentsessions.session.open`) kept for
the whole example, one on the store and one on the replica, each saving several times:
a store whose ``save`` takes ``holder`` remembers each handle's save beside it, and must
still notice what the other handle, or a plain save, wrote since. The rest are plain saves.
"""

from __future__ import annotations

import contextlib
import random

from hypothesis import given
from hypothesis import strategies as st

from agentsessions.messages import Content, Message
from agentsessions.runs import Claim, RunState
from agentsessions.session import RunStore, StoreSession, open
from agentsessions.testing._storetest_runmachine import LONG_LEASE
from agentsessions.testing._storetest_support import Context, check_equal, show_id

MANY = "saves stay right past any cache"

SESSIONS = 300
"""How many sessions one example saves, round-robin: more than the stores' memory of 256."""

_EDITS = ("extend", "extend", "extend", "change one", "shorten", "replace", "via the replica", "overwrite")
"""The edits of a round of random ones; "overwrite" is a save through the replica, then one
through the store of the transcript it had before that, grown: the last writer wins, so what
the store (or its handle) remembers of its own last save is stale."""


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
        # Kept for the whole example: (on the store, on the replica), saving alternately.
        self.handles: dict[str, tuple[StoreSession, StoreSession]] = {}
        self.serial = 0

    def check(self) -> None:
        if isinstance(self.store, RunStore):
            self.claims = {sid: self.store.claim(sid, replica="storetest", lease=LONG_LEASE) for sid in self.ids[::3]}
        unclaimed = [session_id for session_id in self.ids if session_id not in self.claims]
        self.handles = {sid: (open(sid, self.store), open(sid, self.replica)) for sid in unclaimed[::2]}
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
        replica = False
        if edit == "extend" or not old:
            new = [*old, fresh]
        elif edit == "change one":
            at = self.rng.randrange(len(old))
            new = [*old[:at], fresh, *old[at + 1 :]]
        elif edit == "shorten":
            new = old[: self.rng.randrange(len(old))]
        elif edit == "replace":
            new = [fresh]
        elif edit == "via the replica":  # the store object's memory of the session is now stale
            new, replica = [*old[:-1], fresh], True
        else:  # overwrite: the replica's save is lost, though the stored rows hold it
            self._save(session_id, [*old[:-1], self._message(session_id)], edit, replica=True)
            new = [*old, fresh]
        self._save(session_id, new, edit, replica=replica)
        self.model[session_id] = new

    def _save(self, session_id: str, messages: list[Message], edit: str, *, replica: bool) -> None:
        """Save through the session's kept handle on the store or the replica, its claim, or plainly."""
        via, whose = (self.replica, "the replica") if replica else (self.store, "the store")
        claim, handles = self.claims.get(session_id), self.handles.get(session_id)
        if handles is not None:
            try:
                handles[1 if replica else 0].save(messages)
            except Exception as error:
                what = f"save through a kept handle on {whose} of session {show_id(session_id)} ({edit})"
                raise AssertionError(f"{what} failed: {error!r}") from error
            return
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
            how = self._how(session_id)
            what = f"messages() through {whose} of session {index} of {SESSIONS}, {how} ({show_id(session_id)}) {when}"
            check_equal(via.messages(session_id), self.model[session_id], what)

    def _how(self, session_id: str) -> str:
        if session_id in self.handles:
            return "saved through kept handles"
        return "saved under a claim" if session_id in self.claims else "saved plainly"

    def _clean_up(self) -> None:
        if not isinstance(self.store, RunStore):
            return
        for session_id, claim in self.claims.items():
            # A failure here follows the check's own, which says more; the deletes still run.
            with contextlib.suppress(Exception):
                self.store.save_run(claim, self.model[session_id], end=RunState.FINISHED)
        for session_id in self.ids:
            self.store.delete(session_id)
