"""What :mod:`agentsessions.stores.storetest` draws, compares and races with; private to it.

The strategies build transcripts the way runs and models produce them (tool arguments as
raw JSON with repeated keys, every field of every block filled); the settings suit a test
whose every example does I/O; the comparison points at the first character of the first
field that a store changed; the races start store calls on many threads at one moment,
each bounded in time, and give up on a deadlock instead of hanging the test.
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

import attrs
import hypothesis
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from agentsessions.errors import SessionBusyError
from agentsessions.messages import Content, ContentType, Message, Role
from agentsessions.runs import Claim, RunState, Steer, preview
from agentsessions.session import RunStore, Store

PREFIX_LEN = len(f"storetest-{'0' * 32}-{0:08d}-")
JOIN_SECONDS = 30.0  # a thread still running after this is taken for a deadlock
THREAD_SECONDS = 5.0  # each race stops by itself after this long
ADDERS = TAKERS = 4
STEADY_STEERS = 200  # the most steers each thread adds in a race of steady steering
READERS = 3

# --- Strategies -----------------------------------------------------------------------

# st.text() never draws a surrogate, and a store that turns two adjacent ones into one astral
# character (as JSON's "\ud83d\ude00" escapes do) would pass unseen: draw them, lone and in
# high-low pairs, between ordinary text.
_SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
_SURROGATE_PAIR = st.tuples(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDBFF), st.characters(min_codepoint=0xDC00, max_codepoint=0xDFFF)
).map("".join)
TEXT = st.lists(st.one_of(st.text(), _SURROGATE, _SURROGATE_PAIR), max_size=4).map("".join)
_JSON_SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8)
)


@st.composite
def raw_json(draw: st.DrawFn) -> str:
    """Tool arguments as a model writes them: keys unsorted and repeated, spacing of its own."""
    space = draw(st.sampled_from(["", " ", "\n  ", "\t"]))
    ascii_only = draw(st.booleans())
    pairs = draw(st.lists(st.tuples(st.text(max_size=6), _JSON_SCALAR), max_size=5))
    items = (
        f"{json.dumps(k, ensure_ascii=ascii_only)}:{space}{json.dumps(v, ensure_ascii=ascii_only)}" for k, v in pairs
    )
    return "{" + space + f",{space}".join(items) + "}"


TOOL_INPUT = st.one_of(raw_json(), TEXT)
_SOME_TEXT = TEXT.filter(bool)


@st.composite
def _raw_block(draw: st.DrawFn) -> Content:
    # A provider's JSON as it may come: spacing, key order and escapes of its own, kept byte for byte.
    pairs = draw(raw_json())[1:-1]
    value = json.dumps(draw(TEXT), ensure_ascii=draw(st.booleans()))  # surrogates too, raw or escaped
    data = '{"type":' + value + ("," + pairs if pairs.strip() else "") + "}"
    return Content.raw(draw(st.sampled_from(["anthropic", "openai"]) | _SOME_TEXT), data, text=draw(TEXT))


@st.composite
def _media(draw: st.DrawFn, kind: ContentType) -> Content:
    data, url = (draw(_SOME_TEXT), "") if draw(st.booleans()) else ("", draw(_SOME_TEXT))
    name = draw(TEXT) if kind is ContentType.DOCUMENT else ""
    media_type = draw(_SOME_TEXT) if data else draw(TEXT)
    return Content(kind, name=name, tool_use_id=draw(TEXT), data=data, media_type=media_type, url=url)


# Every block type, each with every field its type uses: a store must keep them all.
CONTENT = st.one_of(
    st.builds(Content.of_text, TEXT),
    st.builds(Content.tool_use, TEXT, TEXT, TOOL_INPUT),
    st.builds(Content.tool_result, TEXT, TEXT, is_error=st.booleans()),
    st.builds(Content.thinking, TEXT, TEXT),
    st.builds(Content.redacted_thinking, TEXT),
    _media(ContentType.IMAGE),
    _media(ContentType.DOCUMENT),
    _raw_block(),
    st.builds(Content.compaction, TEXT, covers=st.integers(1, 2**53)),
)
MESSAGE = st.builds(Message, st.sampled_from(Role), st.lists(CONTENT, max_size=3))


def transcripts(min_size: int = 0, max_size: int = 5) -> st.SearchStrategy[list[Message]]:
    """Lists of arbitrary messages."""
    return st.lists(MESSAGE, min_size=min_size, max_size=max_size)


@st.composite
def next_transcript(draw: st.DrawFn, saved: list[list[Message]], tags: Iterator[int]) -> list[Message]:
    """The next list to save, given the lists saved so far (the stored one last).

    Mostly the stored one extended, cut, changed, the same, or replaced; sometimes one of
    the earlier ones so changed, as a replica that missed the latest saves would write.
    New messages open with a text block numbered from ``tags``: Hypothesis draws many equal
    messages, and a store that keeps the wrong rows would go unseen when they are equal.
    """
    back = draw(st.integers(0, len(saved) - 1)) if saved else 0
    current = saved[-1 - back] if saved else []
    kind = draw(st.sampled_from(["extend", "truncate", "replace tail", "change one", "same", "empty", "new"]))
    cut = draw(st.integers(0, len(current)))
    fresh = [_tagged(m, next(tags)) for m in draw(transcripts(1, 3))]
    if kind == "extend":
        return current + fresh
    if kind == "truncate":
        return current[:cut]
    if kind == "replace tail":
        return current[:cut] + fresh
    if kind == "change one" and current:
        index = min(cut, len(current) - 1)
        return [*current[:index], fresh[0], *current[index + 1 :]]
    if kind == "same":
        return list(current)
    if kind == "empty":
        return []
    return fresh


def tagged(messages: list[Message], name: str) -> list[Message]:
    """``messages``, each with a text block in front that tells it from any other message."""
    return [_tagged(m, f"{name} {i}") for i, m in enumerate(messages)]


def _tagged(message: Message, tag: object) -> Message:
    return Message(message.role, (Content.of_text(f"message {tag}"), *message.content))


@st.composite
def id_family(draw: st.DrawFn) -> list[str]:
    """A random id suffix and the variants a store could fold into it, all distinct."""
    base = draw(st.text(min_size=1, max_size=20))
    variants = [base, base.upper(), base.lower(), base.casefold(), base + " ", " " + base, base + "%", base + "\x00"]
    variants += [unicodedata.normalize(form, base) for form in ("NFC", "NFD", "NFKC")]
    variants += draw(st.lists(st.text(min_size=1, max_size=20), max_size=3))
    return list(dict.fromkeys(variants))


# --- Running --------------------------------------------------------------------------


@attrs.define
class Context:
    """What one property's checks share: its stores, Hypothesis settings and fresh ids."""

    store: Store
    settings: hypothesis.settings
    threaded: hypothesis.settings
    token: str
    serial: Iterator[int]
    replica: Store = attrs.field(default=attrs.Factory(lambda self: self.store, takes_self=True))
    examples: int = 0
    listing_sessions: int = 1100

    def new_id(self, suffix: str = "") -> str:
        """A session id no other example, property or run uses: a fresh prefix, then ``suffix``."""
        prefix = f"storetest-{self.token}-{next(self.serial):08d}-"
        assert len(prefix) == PREFIX_LEN
        return prefix + suffix

    def find_replica(self, candidate: Store) -> None:
        """Use ``candidate`` as the replica if it reads what ``store`` writes."""
        if candidate is not self.store:
            probe = self.new_id("replica probe")
            self.store.save(probe, [Message.user(probe)])
            if candidate.messages(probe) == [Message.user(probe)]:
                self.replica = candidate
            if isinstance(self.store, RunStore):
                self.store.delete(probe)

    @property
    def both(self) -> tuple[Store, Store]:
        """The store and its replica (the store twice when there is none)."""
        return self.store, self.replica

    @property
    def runs(self) -> tuple[RunStore, RunStore]:
        """The store and its replica as run stores; only for stores that are one."""
        store, replica = self.both
        assert isinstance(store, RunStore)
        return store, replica if isinstance(replica, RunStore) else store

    def fewer(self, divisor: int = 5) -> hypothesis.settings:
        """The settings with a ``divisor``-th of the examples, for properties of many calls each."""
        return hypothesis.settings(self.settings, max_examples=max(1, self.settings.max_examples // divisor))


def wait_until(what: str, probe: Callable[[], bool], seconds: float) -> None:
    """Poll ``probe`` until it is true; ``AssertionError`` naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} had not happened after {seconds:.1f} s")
        time.sleep(0.01)


def hypothesis_settings(max_examples: int, *, stateful_steps: int) -> hypothesis.settings:
    """Settings for tests whose every example does I/O, and whose first failure is shown shrunk."""
    return hypothesis.settings(
        max_examples=max_examples,
        stateful_step_count=stateful_steps,
        deadline=None,  # stores do I/O: a slow call is not a failure
        database=None,  # examples saved by one store's run mean nothing to the next
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        report_multiple_bugs=False,
        print_blob=False,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.filter_too_much,
        ],
    )


def describe(error: Exception) -> str:
    """``error`` as a store author wants it told: the message, then Hypothesis's notes."""
    if isinstance(error, Flaky):
        inner = error.exceptions[0] if isinstance(error, BaseExceptionGroup) else error.__context__
        if isinstance(inner, Exception):
            # Hypothesis's own wording blames the test; the cause is a store that remembers
            # earlier examples (ids leaking into each other) or depends on timing.
            return f"failed, then passed when replayed; first failure: {describe(inner)}"
    text = str(error) if isinstance(error, AssertionError) else f"{type(error).__name__}: {error}"
    notes = "\n".join(getattr(error, "__notes__", ()))
    return f"{text}\n{notes}" if notes else text


# --- Comparing ------------------------------------------------------------------------


def short(value: object, limit: int = 300) -> str:
    """``repr(value)``, cut to ``limit`` characters (a transcript can hold megabytes)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters of repr)"


def show_id(session_id: str) -> str:
    """An id short enough to read, keeping its end, where ids at the length limit differ."""
    if len(session_id) <= 100:
        return repr(session_id)
    return f"{session_id[:40]!r}...{session_id[-20:]!r} ({len(session_id)} characters)"


def check_equal(got: object, want: object, what: str) -> None:
    """Raise ``AssertionError`` saying where ``got`` first differs from ``want``."""
    if got != want:
        raise AssertionError(f"{what}: {difference(want, got)}")


def _first_difference(want: Sequence[object], got: Sequence[object]) -> int:
    pairs = enumerate(zip(want, got, strict=False))
    return next((i for i, (w, g) in pairs if w != g), min(len(want), len(got)))


def difference(want: object, got: object) -> str:
    """Where ``got`` departs from ``want``, down to the character of the field of the block."""
    if isinstance(want, list) and isinstance(got, list):
        at = _first_difference(want, got)
        if at < min(len(want), len(got)):
            return f"item {at} of {len(want)}: {difference(want[at], got[at])}"
        return f"expected {len(want)} items, got {len(got)}; item {at} is {short((want if want[at:] else got)[at])}"
    if isinstance(want, str) and isinstance(got, str):
        at = _first_difference(want, got)
        return (
            f"strings of {len(want)} and {len(got)} characters differ at character {at}: "
            f"expected {short(want[at : at + 40])}, got {short(got[at : at + 40])}"
        )
    if isinstance(want, Message) and isinstance(got, Message):
        if want.role != got.role or len(want.content) != len(got.content):
            return f"expected {short(want)}, got {short(got)}"
        at = _first_difference(want.content, got.content)
        wanted, found = attrs.asdict(want.content[at]), attrs.asdict(got.content[at])
        field = next(name for name in wanted if wanted[name] != found[name])
        return f"content block {at}, field {field!r}: {difference(wanted[field], found[field])}"
    return f"expected {short(want)}, got {short(got)}"


def check_raises(kind: type[Exception], call: Callable[[], object], what: str) -> None:
    """Raise ``AssertionError`` unless ``call()`` raises ``kind``."""
    try:
        call()
    except kind:
        return
    except Exception as error:
        raise AssertionError(f"{what} raised {type(error).__name__}, not {kind.__name__}: {error}") from error
    raise AssertionError(f"{what} did not raise {kind.__name__}")


# --- Races ----------------------------------------------------------------------------


def run_threads(targets: Sequence[Callable[[], None]]) -> None:
    """Start ``targets`` at the same moment, wait for all, and re-raise the first error."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets))

    def go(target: Callable[[], None]) -> None:
        try:
            barrier.wait(JOIN_SECONDS)
            target()
        except BaseException as error:  # reported in the calling thread, where the test runs
            errors.append(error)

    threads = [
        threading.Thread(target=go, args=(t,), name=f"storetest-{i}", daemon=True) for i, t in enumerate(targets)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + JOIN_SECONDS
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    if any(thread.is_alive() for thread in threads):
        raise AssertionError(f"store calls on {len(threads)} threads had not returned after {JOIN_SECONDS} s")
    if errors:
        raise errors[0]


def race_readers(stores: tuple[Store, Store], session_id: str, candidates: list[list[Message]]) -> None:
    """One thread saves ``candidates`` in turn while readers check each read is one of them, whole."""
    store, replica = stores
    allowed = {tuple(candidate) for candidate in candidates}
    store.save(session_id, candidates[0])
    writing = threading.Event()
    writing.set()

    def writer() -> None:
        try:
            deadline = time.monotonic() + THREAD_SECONDS
            for transcript in itertools.islice(itertools.cycle(candidates), 50):
                store.save(session_id, transcript)
                if time.monotonic() > deadline:
                    break
        finally:
            writing.clear()

    def reader(via: Store) -> None:
        while True:
            still_writing = writing.is_set()
            got = via.messages(session_id)
            if tuple(got) not in allowed:
                lengths = sorted(len(c) for c in candidates)
                raise AssertionError(
                    f"a reader saw a transcript of {len(got)} messages that was never saved "
                    f"(saved lengths: {lengths}): {short(got)}"
                )
            if not still_writing:
                return

    readers = [functools.partial(reader, (replica, store)[i % 2]) for i in range(READERS)]
    run_threads([writer, *readers])


def race_steers(stores: tuple[Store, Store], session_id: str, per_adder: int, payload: str) -> None:
    """Threads add tagged steers while others take them; each must be taken once, in order per adder."""
    added = [f"{a}:{n}:{payload}" for a in range(ADDERS) for n in range(per_adder)]
    takes: list[list[str]] = [[] for _ in range(TAKERS)]
    lock, adding, all_added = threading.Lock(), [ADDERS], threading.Event()

    def adder(a: int) -> None:
        try:
            for n in range(per_adder):
                stores[a % 2].add_steer(session_id, f"{a}:{n}:{payload}")
        finally:
            with lock:
                adding[0] -= 1
                if not adding[0]:
                    all_added.set()

    def taker(t: int) -> None:
        deadline = time.monotonic() + THREAD_SECONDS
        while time.monotonic() < deadline:
            finished = all_added.is_set()
            got = stores[t % 2].take_steers(session_id)
            takes[t] += got
            if finished and not got:
                return  # every adder had returned before this take found nothing

    adders = [functools.partial(adder, a) for a in range(ADDERS)]
    takers = [functools.partial(taker, t) for t in range(TAKERS)]
    run_threads([*adders, *takers])
    takes.append(stores[0].take_steers(session_id))
    _check_taken_once(added, takes)


def _check_taken_once(added: list[str], takes: list[list[str]]) -> None:
    counts = Counter(text for take in takes for text in take)
    lost = [text for text in added if text not in counts]
    twice = [text for text, count in counts.items() if count > 1]
    foreign = sorted(set(counts) - set(added))
    if lost or twice or foreign:
        raise AssertionError(
            f"of {len(added)} steers added by {ADDERS} threads while {TAKERS} threads took: "
            f"{len(lost)} never taken {short(lost[:5])}, {len(twice)} taken more than once {short(twice[:5])}, "
            f"{len(foreign)} taken that nobody added {short(foreign[:5])}"
        )
    for t, take in enumerate(takes):
        last: dict[str, int] = {}
        for text in take:
            adder, n, _ = text.split(":", 2)
            if int(n) < last.get(adder, -1):
                raise AssertionError(f"taker {t} got adder {adder}'s steer {n} after its steer {last[adder]}")
            last[adder] = int(n)


def race_release(stores: tuple[RunStore, RunStore], claim: Claim, per_adder: int, rounds: int) -> None:
    """A run saves ``rounds`` times, then releases unless steered, while threads add steers.

    Every steer whose ``add_steer`` said ``RUNNING`` must reach the run's transcript; every
    other must stay pending for the next run; none may be both, or neither.
    """
    session_id, lock = claim.session_id, threading.Lock()
    states: dict[str, RunState] = {}
    taken: list[str] = []

    def adder(a: int) -> None:
        for n in range(per_adder):
            text = f"{a}:{n}"
            state = stores[a % 2].add_steer(session_id, text)
            with lock:
                states[text] = state

    def run() -> None:
        pending: Sequence[Steer] = ()
        for step in itertools.count():
            got = list(pending) or stores[0].peek_steers(session_id)
            taken.extend(steer.text for steer in got)
            end = RunState.FINISHED if step >= rounds else None
            transcript = [Message.user(text) for text in taken]
            progress = stores[0].save_run(claim, transcript, taken=[s.seq for s in got], end=end, unless_steered=True)
            if end is not None and not progress.pending:
                return
            pending = progress.pending

    run_threads([run, *(functools.partial(adder, a) for a in range(ADDERS))])
    left = [steer.text for steer in stores[1].peek_steers(session_id)]
    _check_released(states, taken, left)
    want = [Message.user(text) for text in taken]
    check_equal(stores[1].messages(session_id), want, "messages() after the run released, unless steered")


def race_takeover(stores: tuple[RunStore, RunStore], session_id: str, takers: int, lease: float) -> Claim:
    """``takers`` threads claim one STALLED session at once: exactly one wins, and its claim says it took over."""
    won: list[Claim] = []
    lock = threading.Lock()

    def take(t: int) -> None:
        try:
            claim = stores[t % 2].claim(session_id, replica=f"taker-{t}", lease=lease)
        except SessionBusyError:
            return
        with lock:
            won.append(claim)

    run_threads([functools.partial(take, t) for t in range(takers)])
    if len(won) != 1:
        raise AssertionError(f"{len(won)} of {takers} claims racing for a STALLED session won, not one")
    check_equal(won[0].took_over, True, "Claim.took_over of the claim that won a race for a STALLED session")
    return won[0]


def race_steady_release(stores: tuple[RunStore, RunStore], claim: Claim, releases: int) -> None:
    """A run asks to release ``releases`` times while threads keep steering, and again until it is released.

    Under steady steering each ask finds steers waiting: it must report them at once (the
    session stays held), never fail or wait for the steering to stop, whatever the store's
    concurrency. The steers are then accounted for as :func:`race_release` does.
    """
    session_id, lock, steering = claim.session_id, threading.Lock(), threading.Event()
    states: dict[str, RunState] = {}
    taken: list[str] = []
    steering.set()

    def adder(a: int) -> None:
        for n in range(STEADY_STEERS):
            if not steering.is_set():
                return
            text = f"{a}:{n}"
            state = stores[a % 2].add_steer(session_id, text)
            with lock:
                states[text] = state

    def run() -> None:
        try:
            wait_until("the first steer", lambda: bool(stores[0].peek_steers(session_id)), THREAD_SECONDS)
            pending: Sequence[Steer] = ()
            for attempt in itertools.count(1):
                got = list(pending) or stores[0].peek_steers(session_id)
                taken.extend(steer.text for steer in got)
                transcript, seqs = [Message.user(text) for text in taken], [steer.seq for steer in got]
                progress = stores[0].save_run(claim, transcript, taken=seqs, end=RunState.FINISHED, unless_steered=True)
                if attempt >= releases:
                    steering.clear()
                if not progress.pending:
                    return
                pending = progress.pending
        finally:
            steering.clear()

    run_threads([run, *(functools.partial(adder, a) for a in range(ADDERS))])
    left = [steer.text for steer in stores[1].peek_steers(session_id)]
    _check_released(states, taken, left)
    want = [Message.user(text) for text in taken]
    check_equal(stores[1].messages(session_id), want, "messages() after the run released under steady steering")


def _check_released(states: dict[str, RunState], taken: list[str], left: list[str]) -> None:
    odd = {text: state for text, state in states.items() if state not in (RunState.RUNNING, RunState.FINISHED)}
    if odd:
        raise AssertionError(f"add_steer() during a run and its release returned {short(odd)}")
    live = [text for text, state in states.items() if state is RunState.RUNNING]
    later = [text for text, state in states.items() if state is RunState.FINISHED]
    orphans = sorted(set(live) - set(taken))
    stolen = sorted(set(later) - set(left))
    twice = sorted((Counter(taken) + Counter(left)) - Counter(states.keys()))
    if orphans or stolen or twice:
        raise AssertionError(
            f"of {len(states)} steers added while a run released its session: {len(orphans)} added while it "
            f"was RUNNING never reached the run {short(orphans[:5])}, {len(stolen)} added after it finished "
            f"are not pending {short(stolen[:5])}, {len(twice)} both taken and pending or taken twice "
            f"{short(twice[:5])}"
        )
    for where, texts in (("the run's transcript", taken), ("the pending steers", left)):
        last: dict[str, int] = {}
        for text in texts:
            adder, n = text.split(":")
            if int(n) < last.get(adder, -1):
                raise AssertionError(f"{where}: adder {adder}'s steer {n} came after its steer {last[adder]}")
            last[adder] = int(n)


def shown_preview(store: Store, messages: Sequence[Message]) -> str:
    """The preview ``store`` should report for ``messages``: empty for one that never sees message text.

    A wrapper that hands its store only ciphertext (``crypto.encrypted``) says so with a
    false ``previews_text`` attribute; its records keep no text to show.
    """
    return preview(messages) if getattr(store, "previews_text", True) is not False else ""
