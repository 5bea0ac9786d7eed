"""storetest's property for what a session's record says of its transcript: usage and preview.

For a store that keeps usage (:func:`~agentsessions.session.keeps_usage`): a session's usage
is, at every moment, the sum over its runs of the last figures each run saved (a save
repeated, a save without ``usage`` and a plain ``save`` change nothing; a superseded claim's
save is refused and changes nothing); its preview is that of the transcript saved last
(:func:`agentsessions.stores.kit.summary.preview`; empty for a wrapper that never sees
message text, which says so with ``previews_text = False``); ``info()`` and ``sessions()`` report the
same; a fork starts with no usage and its own preview; bad usage is refused before any
write. And both are written in the save's own step: a reader never sees a record whose
length and preview belong to different saves.
"""

from __future__ import annotations

import functools
import itertools
import threading

from hypothesis import given
from hypothesis import strategies as st

from agentsessions.errors import ConflictError
from agentsessions.messages import Message
from agentsessions.metadata import check_metadata
from agentsessions.runs import Claim, RunState, SessionInfo
from agentsessions.session import ForkStore, MetadataStore, RunStore
from agentsessions.testing._storetest_runmachine import LONG_LEASE
from agentsessions.testing._storetest_support import (
    Context,
    check_equal,
    check_raises,
    next_transcript,
    run_threads,
    show_id,
    shown_preview,
)
from agentsessions.usage import Usage

SUMMARY = "the record keeps the runs' usage and the last text, in the save's own write"

_COUNT = st.one_of(st.integers(0, 1_000), st.integers(0, 2**40))
_USAGE = st.builds(Usage, _COUNT, _COUNT, _COUNT, _COUNT)
_HOW = ("usage", "usage twice", "no usage", "plain save")
_LONG = "a long last word " * 20  # longer than the preview keeps


def check_summary(context: Context) -> None:
    """:data:`SUMMARY`."""
    _check_runs(context)
    _check_refused(context)
    _check_readers(context)


class _Session:
    """One session of an example, with what its record should say."""

    def __init__(self, context: Context, session_id: str) -> None:
        self.store, self.replica = context.runs
        self.context = context
        self.id = session_id
        self.before = Usage()  # the runs that ended: the last figures each saved
        self.recorded = Usage()  # the live run's last saved figures
        self.transcript: list[Message] = []

    def check(self, what: str) -> SessionInfo:
        info = self.replica.info(self.id)
        want = (self.before + self.recorded, shown_preview(self.replica, self.transcript))
        check_equal((info.usage, info.preview), want, f"usage and preview of {show_id(self.id)} {what}")
        return info

    def save(self, claim: Claim, transcript: list[Message], used: Usage, how: str) -> None:
        self.transcript = transcript
        if how == "plain save":
            self.store.save(self.id, transcript)
            return
        usage = None if how == "no usage" else used
        for _ in range(2 if how == "usage twice" else 1):  # a save repeated after an unknown outcome
            self.store.save_run(claim, transcript, usage=usage)  # type: ignore[call-arg]
        if usage is not None:
            self.recorded = usage

    def end(self, claim: Claim, used: Usage) -> None:
        self.store.save_run(claim, self.transcript, end=RunState.FINISHED, usage=used)  # type: ignore[call-arg]
        self.before, self.recorded = self.before + used, Usage()


def _check_runs(context: Context) -> None:
    store, _ = context.runs

    @context.fewer(5)
    @given(data=st.data())
    def runs(data: st.DataObject) -> None:
        context.examples += 1
        session = _Session(context, context.new_id("summary"))
        saved: list[list[Message]] = []
        tags = itertools.count()
        try:
            for run in range(data.draw(st.integers(1, 3), label="runs")):
                claim = store.claim(session.id, replica="storetest", lease=LONG_LEASE)
                used = Usage()
                for _ in range(data.draw(st.integers(1, 3), label="saves")):
                    transcript = data.draw(next_transcript(saved, tags))
                    if data.draw(st.booleans(), label="long last text"):
                        transcript = [*transcript, Message.assistant(_LONG + str(next(tags)))]
                    saved.append(transcript)
                    used = used + data.draw(_USAGE, label="used")
                    how = data.draw(st.sampled_from(_HOW), label="how")
                    session.save(claim, transcript, used, how)
                    session.check(f"after a save ({how}) in run {run + 1}")
                session.end(claim, used)
                session.check(f"after run {run + 1} ended")
                check_raises(ConflictError, functools.partial(_stale_save, store, claim), "a save by an ended run")
                session.check("after an ended run's save was refused")
            _check_listed(context, session)
            _check_fork(context, session, data.draw(st.integers(0, len(session.transcript)), label="fork at"))
        finally:
            store.delete(session.id)

    runs()


def _stale_save(store: RunStore, claim: Claim) -> None:
    store.save_run(claim, [Message.user("never kept")], usage=Usage(10**6, 10**6))  # type: ignore[call-arg]


def _bad_save(store: RunStore, claim: Claim, usage: object) -> None:
    store.save_run(claim, [Message.user("not kept")], usage=usage)  # type: ignore[call-arg]


def _check_listed(context: Context, session: _Session) -> None:
    """``sessions()`` reports what ``info()`` does (through a metadata pair, where the store keeps metadata)."""
    if not isinstance(session.store, MetadataStore) or not isinstance(session.replica, MetadataStore):
        return
    pair = check_metadata({"storetest": f"summary {context.token} {show_id(session.id)}"[:200]})
    session.store.set_metadata(session.id, pair)
    info = session.check("before listing it")
    listed = list(session.replica.sessions(metadata=pair))
    check_equal(
        [(i.id, i.usage, i.preview) for i in listed], [(session.id, info.usage, info.preview)], "the listing's record"
    )


def _check_fork(context: Context, session: _Session, at: int) -> None:
    """A fork has no runs yet, so no usage; its preview is that of the messages it holds."""
    if not isinstance(session.store, ForkStore):
        return
    fork_id = context.new_id("summary fork")
    session.store.fork(session.id, fork_id, at=at)
    try:
        info = session.replica.info(fork_id)
        want = (Usage(), shown_preview(session.replica, session.transcript[:at]))
        check_equal((info.usage, info.preview), want, f"usage and preview of a fork at {at}")
    finally:
        session.store.delete(fork_id)


def _check_refused(context: Context) -> None:
    """Usage that is not an ``agentsessions.Usage`` of counts from 0 to 2**53 - 1 is refused before any write."""
    store, _ = context.runs
    session = _Session(context, context.new_id("summary refused"))
    claim = store.claim(session.id, replica="storetest", lease=LONG_LEASE)
    try:
        session.save(claim, [Message.user("kept")], Usage(1, 2, 3, 4), "usage")
        for bad in ("12", Usage(-1), Usage(2**53), Usage(True), (1, 2, 3, 4)):
            kind = ValueError if isinstance(bad, Usage) and not isinstance(bad.input_tokens, bool) else TypeError
            check_raises(kind, functools.partial(_bad_save, store, claim, bad), f"save_run(usage={bad!r})")
            check_equal(store.messages(session.id), [Message.user("kept")], f"the transcript after usage={bad!r}")
            session.check(f"after usage={bad!r} was refused")
        context.examples += 1
    finally:
        store.delete(session.id)


def _check_readers(context: Context) -> None:
    """While a run saves transcripts of every length, readers only see a length with its own preview."""
    store, replica = context.runs
    session_id = context.new_id("summary readers")
    transcripts = [[Message.user(f"transcript {n}: " + "x" * (n * 30))] * n for n in range(1, 13)]
    pairs = {(0, "")} | {(len(t), shown_preview(replica, t)) for t in transcripts}
    claim = store.claim(session_id, replica="storetest", lease=LONG_LEASE)
    done = threading.Event()
    seen: list[tuple[int, str]] = []

    def write() -> None:
        try:
            for round_ in range(4):
                for n, transcript in enumerate(transcripts if round_ % 2 == 0 else transcripts[::-1]):
                    store.save_run(claim, transcript, usage=Usage(round_, n))  # type: ignore[call-arg]
        finally:
            done.set()

    def read() -> None:
        while not done.wait(0):
            info = replica.info(session_id)
            seen.append((info.length, info.preview))

    try:
        run_threads([write, read, read])
        strays = [pair for pair in seen if pair not in pairs]
        check_equal(strays[:1], [], f"a reader's record of {show_id(session_id)} (length, preview) during saves")
        context.examples += 1
    finally:
        store.delete(session_id)
