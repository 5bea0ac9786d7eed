"""``rekey``: every session re-encrypted with the keyring's current key, so older keys can be retired.

It goes through the store's listing in batches. A session whose rows and steers all name
the current key is left alone, so a rekey that was stopped (or killed) is simply run
again. Any other session is re-encrypted, then written under a claim, like a run: a
session a live run holds is never touched (it is reported busy, for a later pass), and a
run that starts meanwhile waits only for one read and one write. The claim's release puts
the session back in the state it ended in (an idle one becomes finished).

Steers waiting in a session are re-encrypted by adding each one's copy under the same
steer id, then deleting the original with the save: killed in between, both stay, and the
wrapper shows only one of them (see :class:`~agentsessions.crypto.EncryptedStore`). A
steer sent while rekey held a session was told ``RUNNING``; rekey keeps that promise the
way a run does: it does not release the session, so the lease lapses and a resumer
answers the steer.
"""

from __future__ import annotations

import enum
import itertools
import os
import socket
import time
from collections.abc import Callable, Sequence

import attrs

from agentsessions.crypto._keyring import Keyring
from agentsessions.crypto._sealing import Sealer
from agentsessions.crypto._store import EncryptedStore
from agentsessions.errors import ConflictError, DecryptionError, SessionBusyError
from agentsessions.messages import Message
from agentsessions.runs import ENDINGS, RunState, SessionInfo, Steer, utcnow
from agentsessions.session import RunStore

REPLICA = "agentsessions-rekey"
"""How the holder of a session ``rekey`` holds begins; the rest is ``:host:pid``."""

_CLAIMABLE = frozenset({RunState.IDLE, *ENDINGS})


class _Outcome(enum.Enum):
    REKEYED = "rekeyed"
    CURRENT = "current"
    BUSY = "busy"


@attrs.frozen
class RekeyProgress:
    """How far a :func:`rekey` has got: given to its ``progress`` callback after each batch, and returned.

    ``seen``: sessions listed so far. ``rekeyed``: re-encrypted by this pass. ``current``:
    already wholly under the current key. ``busy``: ids held by a run (live, or stalled and
    left for a resumer) and left alone: run ``rekey`` again later. ``failed``: id to
    error, for sessions that did not decrypt (their key is missing, or a row is not theirs).
    """

    seen: int = 0
    rekeyed: int = 0
    current: int = 0
    busy: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0

    @property
    def done(self) -> bool:
        """Whether every session listed is now under the current key."""
        return not self.busy and not self.failed

    def __str__(self) -> str:
        rate = f", {self.seen / self.seconds:.0f} sessions/s" if self.seconds > 0 else ""
        return (
            f"{self.seen} sessions seen: {self.rekeyed} re-encrypted, {self.current} already current, "
            f"{len(self.busy)} busy, {len(self.failed)} failed ({self.seconds:.1f} s{rate})"
        )


def rekey(
    store: RunStore,
    keyring: Keyring,
    *,
    allow_plaintext: bool = False,
    batch: int = 100,
    lease: float = 10.0,
    progress: Callable[[RekeyProgress], None] | None = None,
) -> RekeyProgress:
    """Re-encrypt every session of ``store`` with ``keyring.current``; returns what it did.

    ``store`` is the store itself (an :func:`encrypted` one is unwrapped). Sessions are
    listed ``batch`` at a time and ``progress`` is called after each batch. Each session is
    written under a claim of ``lease`` seconds. ``allow_plaintext``: rows written before the
    store was encrypted are encrypted too (else they fail, named). Sessions left held by a
    rekey that was killed are waited for (their lease) and done; sessions held by runs are
    reported in ``busy``. Raises :class:`~agentsessions.StoreError` when the store fails.
    """
    inner = store.inner if isinstance(store, EncryptedStore) else store
    if not isinstance(inner, RunStore):
        raise TypeError(f"rekey needs a store that keeps runs (a RunStore), to claim each session: {store!r:.80}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a whole number of sessions, at least 1, got {batch!r:.40}")
    pass_ = _Pass(inner, Sealer(keyring, allow_plaintext=allow_plaintext), lease, progress)
    listing = inner.sessions()
    while chunk := list(itertools.islice(listing, batch)):
        pass_.sessions(chunk)
    pass_.retry_own_leftovers()
    return pass_.report(final=True)


class _Pass:
    """One run of :func:`rekey`: the counts, and the sessions to come back to."""

    def __init__(
        self, store: RunStore, sealer: Sealer, lease: float, progress: Callable[[RekeyProgress], None] | None
    ) -> None:
        self.store, self.sealer, self.lease, self.progress = store, sealer, lease, progress
        self.replica = f"{REPLICA}:{socket.gethostname()}:{os.getpid()}"
        self.started = time.monotonic()
        self.seen = self.rekeyed = self.current = 0
        self.busy: dict[str, SessionInfo] = {}
        self.failed: dict[str, str] = {}

    def sessions(self, infos: Sequence[SessionInfo], *, count: bool = True) -> None:
        """Rekey ``infos``, counting each; report afterwards."""
        for info in infos:
            self.seen += count
            try:
                outcome = self.session(info)
            except (DecryptionError, ConflictError) as error:  # a row not this session's; a lease lost
                self.failed[info.id] = str(error)
                continue
            self.busy.pop(info.id, None)
            if outcome is _Outcome.BUSY:
                self.busy[info.id] = info
            elif outcome is _Outcome.REKEYED:
                self.rekeyed += 1
            else:
                self.current += 1
        self.report()

    def retry_own_leftovers(self) -> None:
        """Sessions a killed rekey still holds: wait for their leases to lapse, then do them."""
        own = [info for info in self.busy.values() if (info.holder or "").startswith(REPLICA)]
        if not own:
            return
        last = max((info.lease_expires_at for info in own if info.lease_expires_at), default=None)
        if last is not None:
            time.sleep(max(0.0, (last - utcnow()).total_seconds()) + 0.05)
        self.sessions([self.store.info(info.id) for info in own], count=False)

    def report(self, *, final: bool = False) -> RekeyProgress:
        """Where the pass stands, given to the callback."""
        done = RekeyProgress(
            self.seen,
            self.rekeyed,
            self.current,
            tuple(self.busy),
            tuple(self.failed.items()),
            time.monotonic() - self.started,
        )
        if self.progress is not None and not final:
            self.progress(done)
        return done

    # --- One session ---------------------------------------------------------------------

    def session(self, info: SessionInfo) -> _Outcome:
        """Rekey one session: left alone if current, re-encrypted under a claim otherwise."""
        if not self.claimable(info):
            return _Outcome.BUSY
        session_id = info.id
        rows, steers = self.store.messages(session_id), self.store.peek_steers(session_id)
        if self.is_current(rows, steers):
            return _Outcome.CURRENT
        resealed = self.reseal(session_id, rows)  # before the claim: a run waits for one read and one write
        try:
            claim = self.store.claim(session_id, replica=self.replica, lease=self.lease)
        except SessionBusyError:
            return _Outcome.BUSY
        held, held_steers = self.store.messages(session_id), self.store.peek_steers(session_id)
        end = info.state if info.state in ENDINGS else RunState.FINISHED
        try:
            if held != rows:
                resealed = self.reseal(session_id, held)
            copies, taken = self.reseal_steers(session_id, held_steers)
        except DecryptionError:
            self.store.save_run(claim, held, end=end)  # let go, changing nothing
            raise
        for copy in copies:
            self.store.add_steer(session_id, copy)
        before = {steer.seq for steer in steers}
        if any(steer.seq not in before for steer in held_steers):
            # Sent after the claim, so told RUNNING: as a run would, keep the session held,
            # so that its lease lapses and a resumer answers the steer.
            self.store.save_run(claim, resealed, taken=taken)
        else:
            self.store.save_run(claim, resealed, taken=taken, end=end, unless_steered=not held_steers)
        return _Outcome.REKEYED

    def claimable(self, info: SessionInfo) -> bool:
        """Whether rekey may claim the session: nobody's run holds it, nor waits for a resumer."""
        if info.state in _CLAIMABLE:
            return True
        return info.state is RunState.STALLED and (info.holder or "").startswith(REPLICA)

    def is_current(self, rows: Sequence[Message], steers: Sequence[Steer]) -> bool:
        """Whether every row and steer names the current key (read from the envelopes, not decrypted)."""
        current = self.sealer.keyring.current
        return all(self.sealer.message_key(row) == current for row in rows) and all(
            self.sealer.steer_key(steer.text) == current for steer in steers
        )

    def reseal(self, session_id: str, rows: Sequence[Message]) -> list[Message]:
        """Every row decrypted (so each is checked) and those under other keys encrypted with the current one."""
        current, sealer = self.sealer.keyring.current, self.sealer
        resealed = []
        for position, row in enumerate(rows):
            message = sealer.open_message(session_id, position, row)
            keep = sealer.message_key(row) == current
            resealed.append(row if keep else sealer.seal_message(session_id, position, message))
        return resealed

    def reseal_steers(self, session_id: str, steers: Sequence[Steer]) -> tuple[list[str], list[int]]:
        """The copies to add under the current key, and the seqs to delete with the save.

        A steer whose copy a killed rekey already added is deleted without another copy.
        """
        current, sealer = self.sealer.keyring.current, self.sealer
        opened = [(steer, *sealer.open_steer(session_id, steer.text)) for steer in steers]
        copied = {steer_id for steer, steer_id, _ in opened if steer_id and sealer.steer_key(steer.text) == current}
        copies, taken = [], []
        for steer, steer_id, text in opened:
            if sealer.steer_key(steer.text) == current:
                continue
            taken.append(steer.seq)
            if not steer_id or steer_id not in copied:  # a plaintext steer has no id: a new one
                copies.append(sealer.seal_steer(session_id, text, steer_id or None))
                copied.add(steer_id)
        return copies, taken
