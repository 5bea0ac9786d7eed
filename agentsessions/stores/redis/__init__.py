"""A store in Redis through a ``redis.Redis`` client that the caller owns (redis-py).

Every step is one Lua script, or one MULTI/EXEC for reads, so Redis runs it whole with no
other client's command in between; nothing is read into Python and written back. The keys
and scripts are described in ``_scripts``; all keys live under ``prefix``, so one
Redis database can hold several stores, and ``SCAN MATCH <prefix>*`` finds a store's keys.

It needs Redis 6.2 or later (``ZRANGE ... BYLEX REV``) on one server or a primary with
replicas (Sentinel); not Redis Cluster, since a step touches a session's keys together
with the store's counters and index. Times (``updated_at``, leases) come from the server's
clock, so replicas' clocks need not agree.

What a restart or a failover can lose depends on how Redis persists; see the README's
"Redis" section. A save costs what is new: the store object remembers the revision it last
saw, and a save sends only the messages after the shared prefix, which the script appends
after trimming the stored list, if that revision is still stored (else it sends them all).
"""

from __future__ import annotations

import datetime
import functools
import itertools
import secrets
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

try:
    import redis
except ImportError as error:  # pragma: no cover - depends on what is installed
    raise ImportError("agentsessions.stores.redis needs redis (redis-py): pip install agentsessions[redis]") from error

from agentsessions.approvals import Approval, Decision, deadline, pending_error
from agentsessions.codec import decode_text, dump_message, encode_text, load_message
from agentsessions.errors import ConflictError, FormatError, StoreError
from agentsessions.messages import Message
from agentsessions.metadata import check_metadata, from_pair_texts, metadata_filter, pair_texts
from agentsessions.runs import (
    Claim,
    Progress,
    Renewal,
    RunState,
    SessionInfo,
    Steer,
    busy,
    check_updated_before,
    derive_state,
    state_filter,
    superseded,
    unknown_state,
)
from agentsessions.session import check_fork_at, check_session_id
from agentsessions.stores.kit import approvals as kit_approvals
from agentsessions.stores.kit import arguments, steerkeys, values
from agentsessions.stores.kit import busy as policies
from agentsessions.stores.kit.approvals import check_wait, decode, encode, pending_count
from agentsessions.stores.kit.failures import could_not, translated
from agentsessions.stores.kit.incremental import KnownSessions, SavePlan, new_revision, plan_save
from agentsessions.stores.kit.listing import Page, pages
from agentsessions.stores.kit.prune import PruneFilter, check_prune, prune_listed
from agentsessions.stores.kit.summary import preview, stored_usage
from agentsessions.stores.redis import _scripts as scripts
from agentsessions.stores.redis._schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    VERSION,
    RedisMigrator,
    checked_version,
    migrator,
)
from agentsessions.usage import Usage

__all__ = ["MIGRATIONS", "PAGE_SIZE", "SCHEMA_VERSION", "RedisMigrator", "RedisStore", "migrator"]

PAGE_SIZE = 500
"""How many sessions :meth:`RedisStore.sessions` fetches per script call."""

_NEVER = b"0" * 16  # the index stamp of a record never saved
_STAMP = 16  # digits of a stamp, and of a steer's seq
_NONCE = 8  # bytes of a call's nonce (a steer's sits between its seq and its text)
_WINDOW = 8  # messages a fork reads back at a time for its preview: mostly the last has text
_FORK_TRIES = 100  # a fork's preview read, then the copy, while saves of the source change it


class RedisStore:
    """Sessions and their runs in Redis, under keys that start with ``prefix``.

    ``client`` is a ``redis.Redis`` made by the caller, who chooses its pool, timeouts and
    retries; the store never closes it. It must return bytes (``decode_responses=False``,
    the default): ids and texts are stored as bytes that round-trip any ``str``. Safe to
    share between threads, as the client is.

    Every call must end: the client needs a ``socket_timeout``, which bounds each call,
    and must not retry a command that timed out (``redis.Redis(host=..., port=...)`` does,
    10 times, so a server that stops answering would hold each call for 11 timeouts and
    backoffs). Such a client is refused here with a ``ValueError`` that says what to pass:
    a retry of dropped connections only, which every step is safe to run twice after. A
    ``BlockingConnectionPool`` must have a ``timeout``. See the docs for sizing the pool.

    Stores in one Redis database need prefixes of which none starts with another
    (``app:`` and ``app:s:`` would share keys); ``app:a:`` and ``app:b:`` are fine.
    """

    def __init__(self, client: redis.Redis, *, prefix: str = "agentsessions:") -> None:
        if not isinstance(client, redis.Redis):
            raise TypeError(f"RedisStore takes a redis.Redis client, got {type(client).__name__}: {client!r:.80}")
        if client.get_encoder().decode_responses:
            raise ValueError("RedisStore needs a client with decode_responses=False: it stores ids and texts as bytes")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {type(prefix).__name__}: {prefix!r:.80}")
        _check_bounded(client.connection_pool)
        self.client = client
        self.prefix = prefix
        self._prefix = encode_text(prefix)
        self._index = self._prefix + b"sessions"
        self._counters = self._prefix + b"counters"
        self._known = KnownSessions()
        register = client.register_script
        self._save, self._save_run = register(scripts.SAVE), register(scripts.SAVE_RUN)
        self._add_steer, self._take_steers = register(scripts.ADD_STEER), register(scripts.TAKE_STEERS)
        self._peek_steers = register(scripts.PEEK_STEERS)
        self._page, self._delete, self._cancel = (
            register(scripts.PAGE),
            register(scripts.DELETE),
            register(scripts.CANCEL),
        )
        self._fork, self._claim, self._renew = register(scripts.FORK), register(scripts.CLAIM), register(scripts.RENEW)
        self._read_version = register(VERSION)
        self._version: int | None = None  # read (or, for a new prefix, recorded) at the first call
        self._wait, self._decide = register(scripts.WAIT), register(scripts.DECIDE)
        self._decide_edit = register(scripts.DECIDE_EDIT)
        self._set_metadata = register(scripts.SET_METADATA)

    def __repr__(self) -> str:
        # Host, port and db only: the connection's keyword arguments also hold the password.
        kwargs = self.client.connection_pool.connection_kwargs
        host = kwargs.get("host")
        where = f"{host}:{kwargs.get('port') or 6379}" if host else kwargs.get("path", "?")
        where = f"{where}/{kwargs.get('db', 0)}"
        return f"RedisStore({where!r}, prefix={self.prefix!r})"

    def migrator(self) -> RedisMigrator:
        """What migrates this store's keys (``agentsessions migrate`` drives it); see :func:`migrator`."""
        return migrator(self.client, self.prefix)

    def schema_version(self) -> int:
        """The version of the key layout under the prefix, read (or recorded, for a new one) at the first call."""
        if self._version is None:
            with self._errors("read the schema version"):
                pass
        assert self._version is not None  # the first call reads it, or raises
        return self._version

    # --- Keys ------------------------------------------------------------------------------

    def _record(self, key: bytes) -> bytes:
        return self._prefix + b"s:" + key

    def _messages(self, key: bytes) -> bytes:
        return self._prefix + b"m:" + key

    def _steers(self, key: bytes) -> bytes:
        return self._prefix + b"q:" + key

    def _steer_keys(self, key: bytes) -> bytes:
        return self._prefix + b"k:" + key

    # --- Transcripts and steers (the seed's four) ------------------------------------------

    def save(self, session_id: str, messages: Sequence[Message], *, holder: object | None = None) -> None:
        """Make ``messages`` the transcript; sends only what is new since this store last saw it.

        What is saved is remembered beside ``holder`` (a session handle), for as long as it lives.
        """
        plan = plan_save(self._known, session_id, messages, holder)
        key, revision = encode_text(session_id), new_revision()
        keys = [self._record(key), self._messages(key), self._index]
        with self._errors("save the transcript", session_id):
            for base, keep in self._bases(key, plan):
                if self._save(keys, [key, _preview(plan.messages), *_tail(plan, base, keep, revision)]):
                    break
        self._known.remember(session_id, revision, plan.messages, holder)

    def messages(self, session_id: str) -> list[Message]:
        """The session's transcript, empty if it has none: one MULTI/EXEC."""
        key = encode_text(check_session_id(session_id))
        with self._errors("read the transcript", session_id):
            stored, bodies = self._stored(key)
        return self._known.read(session_id, stored, bodies)

    def add_steer(self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer") -> RunState:
        """Leave a steer for the session's run; returns the session's state as it was stored.

        A ``key`` the session holds stores nothing: the state for the same text, a
        :class:`ConflictError` for another. The script checks the key, decides ``if_busy``
        (:mod:`agentsessions.stores.kit.busy`) and adds the steer, in one step.
        """
        session_id, text, steer_key = arguments.add_steer(session_id, text, key)
        if_busy, sid = policies.check(if_busy), encode_text(session_id)
        keys = [self._record(sid), self._steers(sid), self._counters, self._index, self._steer_keys(sid)]
        keyed = [b"", b""] if steer_key is None else [encode_text(steer_key), steerkeys.digest(text)]
        with self._errors("add a steer", session_id):
            stored, expires, now, outcome, holder = self._add_steer(
                keys, [sid, encode_text(text), _nonce(), *keyed, if_busy]
            )
        if outcome == 1 and steer_key is not None:
            raise steerkeys.conflict(session_id, steer_key)
        if outcome == 2:
            raise busy(session_id, _text(holder) or None, _time(expires))
        return derive_state(_text(stored) or None, _time(expires), values.moment(now))

    def take_steers(self, session_id: str) -> list[str]:
        """Remove and return the waiting steers, oldest first; each goes to exactly one caller."""
        key = encode_text(check_session_id(session_id))
        with self._errors("take steers", session_id):
            taken = self._take_steers([self._steers(key), self._prefix + b"t:" + _nonce()])
        return [_steer(member).text for member in taken]

    # --- Records: info, listing, delete, cancel ---------------------------------------------

    def info(self, session_id: str) -> SessionInfo:
        """The session's record, in one MULTI/EXEC; an unknown id is ``IDLE`` with length 0."""
        key = encode_text(check_session_id(session_id))
        with self._errors("read the record", session_id):
            pipe = self.client.pipeline(transaction=True)
            pipe.hmget(self._record(key), ["u", "st", "h", "x", "c", "pa", "md", "ad", "us", "pv"])
            pipe.llen(self._messages(key))
            pipe.zcard(self._steers(key))
            pipe.time()
            (stamp, *fields), length, pending, (seconds, micros) = pipe.execute()
        if stamp is None:
            return SessionInfo(session_id)
        return _info(
            session_id, stamp, [b"" if f is None else f for f in fields], length, pending, seconds * 10**6 + micros
        )

    def set_metadata(self, session_id: str, metadata: Mapping[str, str]) -> None:
        """Make ``metadata`` the session's whole metadata, and move it between pairs' indexes, in one script."""
        key = encode_text(check_session_id(session_id))
        pairs = _pairs(check_metadata(metadata))
        with self._errors("set the metadata", session_id):
            self._set_metadata([self._record(key), self._index], [key, b"\n".join(pairs)])

    def sessions(
        self,
        *,
        state: RunState | Collection[RunState] | None = None,
        updated_before: datetime.datetime | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Iterator[SessionInfo]:
        """Every session (holding each pair of ``metadata``), newest update first (never saved last), in pages."""
        states, before, pairs = state_filter(state), check_updated_before(updated_before), metadata_filter(metadata)
        # One pair's index holds its sessions alone; the other pairs are checked on what it lists.
        index = self._index if not pairs else self._prefix + b"p:" + _pairs(pairs)[0]
        if before is None:
            return self._listing(index, states, pairs, b"+", b"-")
        # Exclusive of the stamp itself: a member stamped `before` sorts after it. The lower
        # bound leaves out the never-saved records, which updated_before excludes.
        return self._listing(index, states, pairs, b"(" + _stamp(before), b"[" + b"0" * 15 + b"1")

    def _listing(
        self, index: bytes, states: frozenset[RunState] | None, pairs: dict[str, str] | None, high: bytes, low: bytes
    ) -> Iterator[SessionInfo]:
        infos = pages(functools.partial(self._read_page, index, high, low), _after, "Redis store", PAGE_SIZE)
        for info in infos:
            if (states is None or info.state in states) and (pairs is None or pairs.items() <= info.metadata.items()):
                yield info

    def _read_page(self, index: bytes, high: bytes, low: bytes, bound: bytes | None) -> Page[Any]:
        with self._errors("list the sessions"):
            now, *rows = self._page([index], [bound or high, low, PAGE_SIZE, self._prefix])
        return rows, functools.partial(_listed_info, now=int(now))

    def delete(self, session_id: str) -> bool:
        """Remove transcript, steers and record in one script; ``True`` if the session existed."""
        key = encode_text(check_session_id(session_id))
        keys = [self._record(key), self._messages(key), self._steers(key), self._index, self._steer_keys(key)]
        with self._errors("delete", session_id):
            removed = self._delete(keys, [key])
        self._known.forget(session_id)
        return bool(removed)

    def prune(
        self,
        *,
        updated_before: datetime.datetime,
        state: RunState | Collection[RunState] | None = None,
        metadata: Mapping[str, str] | None = None,
        batch: int = 500,
    ) -> int:
        """Delete the sessions last updated before ``updated_before`` (ended ones by default), one MULTI/EXEC each."""
        wanted = check_prune(updated_before, state, metadata, batch)
        return prune_listed(self.sessions, wanted, lambda ids: sum(self._prune_one(i, wanted) for i in ids))

    def _prune_one(self, session_id: str, wanted: PruneFilter) -> bool:
        # Every write of a session writes its record: a claim, save or decision between the read
        # and the delete fails the EXEC (WATCH), and the session stays.
        key = encode_text(session_id)
        keys = [self._record(key), self._messages(key), self._steers(key), self._index, self._steer_keys(key)]
        with self._errors("prune the sessions", session_id), self.client.pipeline(transaction=True) as pipe:
            pipe.watch(keys[0])  # type: ignore[no-untyped-call]  # redis-py leaves watch untyped
            if not wanted.matches(self.info(session_id)):
                return False
            pipe.multi()
            self._delete(keys, [key], client=pipe)
            try:
                pipe.execute()
            except redis.WatchError:
                return False
        self._known.forget(session_id)
        return True

    def cancel(self, session_id: str) -> bool:
        """Ask the live run holding the session to stop; ``False``, writing nothing, when none holds it."""
        key = encode_text(check_session_id(session_id))
        with self._errors("cancel the run", session_id):
            return bool(self._cancel([self._record(key)]))

    def fork(self, session_id: str, new_id: str, *, at: int | None = None) -> None:
        """Copy the first ``at`` messages into a new, idle session with no steers, in one script.

        The messages are copied by the server. Those the new session's preview comes from
        (the last, mostly) are read first with the source's revision, and the script copies
        only if that revision is still stored, so the preview is that of what it copied.
        """
        key, new_key = encode_text(check_session_id(session_id)), encode_text(check_session_id(new_id))
        if isinstance(at, bool) or not isinstance(at, int | None):
            check_fork_at(at, 0)  # raises on its type; its range needs the length, which the script reads
        keys = [self._messages(key), self._record(new_key), self._messages(new_key), self._index, self._record(key)]
        with self._errors("fork", session_id):
            for _ in range(_FORK_TRIES):
                revision, shown = self._fork_preview(key, at)
                outcome = self._fork(keys, [new_key, "" if at is None else at, new_revision(), revision, shown])
                if outcome[0] != -3:
                    break
            else:
                raise StoreError(f"{could_not('Redis store', 'fork', session_id)}: saves kept changing it")
        if outcome[0] == -1:
            raise ConflictError(f"cannot fork into session {new_id!r:.80}: it exists")
        if outcome[0] == -2:
            check_fork_at(at, outcome[1])

    def _fork_preview(self, key: bytes, at: int | None) -> tuple[bytes, bytes]:
        """The source's revision (empty for none) and the preview of its first ``at`` messages (all for ``None``).

        Read from the last message back, a window at a time; the first window in one
        MULTI/EXEC with the revision, which the fork script checks again.
        """
        windows = _windows(at)
        pipe = self.client.pipeline(transaction=True)
        pipe.hget(self._record(key), "rev")
        pipe.lrange(self._messages(key), *next(windows))
        revision, bodies = pipe.execute()
        while bodies:
            found = preview([load_message(body) for body in bodies])
            if found:
                return revision or b"", encode_text(found)
            window = next(windows, None)
            bodies = [] if window is None else self.client.lrange(self._messages(key), *window)
        return revision or b"", b""

    # --- Holding a run ---------------------------------------------------------------------

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        """Hold the session for a run, taking over a stalled one; busy while another lease is live."""
        session_id, replica, lease = arguments.claim(session_id, replica, lease)
        key = encode_text(session_id)
        keys = [self._record(key), self._counters, self._index]
        with self._errors("claim", session_id):
            outcome = self._claim(keys, [key, encode_text(replica), values.span(lease), _nonce()])
        if outcome[0] == -1:  # a newer version's state: never taken over
            raise unknown_state(_text(outcome[1]) or "", session_id)
        if outcome[0] == 0:
            raise busy(session_id, _text(outcome[1]), _time(outcome[2]))
        if outcome[0] == -2:
            raise pending_error(session_id, int(outcome[1]))
        return Claim(session_id, int(outcome[0]), replica, lease, took_over=outcome[1] == 1)

    # --- Approvals --------------------------------------------------------------------------

    def wait(self, claim: Claim, approvals: Sequence[Approval]) -> None:
        """Release the session held by ``claim`` as ``WAITING`` for ``approvals``, in one script."""
        calls = check_wait(claim, approvals)
        key = encode_text(claim.session_id)
        with self._errors("wait for approval", claim.session_id):
            due = _due(deadline(calls))
            waited = self._wait([self._record(key)], [claim.token, encode(calls), pending_count(calls), due])
        if not waited:
            raise superseded(claim)

    def approvals(self, session_id: str) -> list[Approval]:
        """The calls of the session's latest wait, decided or not."""
        key = encode_text(check_session_id(session_id))
        with self._errors("read the approvals", session_id):
            text = self.client.hget(self._record(key), "ap")
        return decode(None if text is None else bytes(text).decode("utf-8"), session_id)  # type: ignore[arg-type]

    def decide(
        self, session_id: str, decisions: Mapping[str, Decision], *, rewrite: kit_approvals.Rewrite | None = None
    ) -> RunState:
        """Record ``decisions`` on the waiting calls, all or none, in one conditional script; the state after.

        An edited input rewrites the wait's ``tool_use`` block (the last message) in the same
        script, conditional on that message being the one read.
        """
        key = encode_text(check_session_id(session_id))
        record, transcript = self._record(key), self._messages(key)

        def read() -> tuple[str | None, datetime.datetime | None, str | None, datetime.datetime]:
            pipe = self.client.pipeline(transaction=True)
            pipe.hmget(record, ["st", "x", "ap"])
            pipe.time()
            (stored, expires, text), (seconds, micros) = pipe.execute()
            body = None if text is None else bytes(text).decode("utf-8")
            return _text(stored) or None, _time(expires), body, values.moment(seconds * 10**6 + micros)

        def swap(old: str | None, new: str, pending: int) -> bool:
            due = _due(kit_approvals.deadline_of(new, True, session_id))
            return bool(self._decide([record], [old or "", new, pending, due]))

        def edit(old: str | None, new: str, pending: int, inputs: Mapping[str, str]) -> bool:
            pipe = self.client.pipeline(transaction=True)
            pipe.llen(transcript)
            pipe.lindex(transcript, -1)
            length, body = pipe.execute()
            if body is None:
                raise ConflictError(f"session {session_id!r:.80} has no transcript holding its wait")
            message = kit_approvals.rewritten(rewrite, length - 1, load_message(body), inputs)
            due = _due(kit_approvals.deadline_of(new, True, session_id))
            args = [old or "", new, pending, body, dump_message(message), new_revision(), due]
            return int(self._decide_edit([record, transcript], args)) == 1

        with self._errors("record the decisions", session_id):
            return kit_approvals.decide(session_id, decisions, read=read, swap=swap, edit=edit)

    def peek_steers(self, session_id: str) -> list[Steer]:
        """The waiting steers, oldest first, left in place."""
        key = encode_text(check_session_id(session_id))
        with self._errors("read the steers", session_id):
            members: list[bytes] = self._peek_steers([self._steers(key), self._record(key)])
        return _steers(members)

    def save_run(
        self,
        claim: Claim,
        messages: Sequence[Message],
        *,
        taken: Sequence[int] = (),
        end: RunState | None = None,
        unless_steered: bool = False,
        usage: Usage | None = None,
    ) -> Progress:
        """Save as the holder of ``claim``, deleting the ``taken`` steers; release with ``end``.

        One script: the fencing check, the steers' deletion, the messages, the preview, the
        usage (``usage``, the run's tokens so far, folded into the stored text by the script),
        the lease and the release happen together or not at all.
        """
        call = arguments.save_run(claim, taken, end, unless_steered, usage)
        plan = plan_save(self._known, claim.session_id, messages, claim)
        ending, seqs = call.end, call.taken
        key, revision = encode_text(claim.session_id), new_revision()
        keys = [self._record(key), self._messages(key), self._index, self._steers(key)]
        head: list[Any] = [key, claim.token, ending.value if ending else "", int(call.unless_steered)]
        head += [_preview(plan.messages), *_counts(call.usage), len(seqs), *seqs]
        with self._errors("save the run", claim.session_id):
            for base, keep in self._bases(key, plan):
                outcome = self._save_run(keys, [*head, *_tail(plan, base, keep, revision)])
                if outcome[0] != 0:
                    break
        if outcome[0] == -2:
            stored_usage(outcome[1].decode("utf-8", "replace"))  # raises the FormatError that names it
            raise FormatError(f"session {claim.session_id!r:.80}'s stored usage is not one this version reads")
        if outcome[0] == -1:
            self._known.forget(claim.session_id)
            raise superseded(claim)
        released = ending is not None and outcome[0] == 1
        self._known.remember(claim.session_id, revision, plan.messages, None if released else claim)
        return Progress(outcome[1] == b"1", tuple(_steers(outcome[2:])))

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        """Extend each claim's lease, all in one script call; report the claims lost and those asked to cancel."""
        claims = arguments.renew(claims)
        if not claims:
            return Renewal()
        keys = [self._record(encode_text(claim.session_id)) for claim in claims]
        with self._errors("renew the leases"):
            outcomes = self._renew(keys, [claim.token for claim in claims])
        lost = frozenset(claim for claim, outcome in zip(claims, outcomes, strict=True) if outcome == 0)
        cancelling = frozenset(claim for claim, outcome in zip(claims, outcomes, strict=True) if outcome == 2)
        return Renewal(lost, cancelling)

    def _stored(self, key: bytes) -> tuple[int | None, list[bytes]]:
        """The stored revision (``None`` when no transcript was saved) and message bodies, in one MULTI/EXEC."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hget(self._record(key), "rev")
        pipe.lrange(self._messages(key), 0, -1)
        revision, bodies = pipe.execute()
        return (None if revision is None or revision == b"-" else int(revision)), bodies

    def _bases(self, key: bytes, plan: SavePlan) -> Iterator[tuple[int | None, int]]:
        """What a save tries to build on, as (revision, messages kept), until the script finds that revision stored.

        First the revision this store object saw; then the one stored now, read with its
        messages (so that those the new transcript repeats stay); last none, sending every message.
        """
        if plan.known is not None:
            yield plan.known.revision, plan.shared
        revision, bodies = self._stored(key)
        if revision is not None:
            yield revision, plan.matching(bodies)
        yield None, 0

    @contextmanager
    def _errors(self, action: str, session_id: str = "") -> Iterator[None]:
        # redis-py's messages name the host and port, never the password.
        with translated(redis.RedisError, "Redis store", action, session_id, known=self._known):
            if self._version is None:  # once per store object; a race only reads it twice
                keys, args = [self._prefix + b"schema", self._index], [str(SCHEMA_VERSION), "first use of a new prefix"]
                found = int(self._read_version(keys, args))
                self._version = checked_version(found, could_not("Redis store", action, session_id or None))
            yield


_RETRY_DROPS = (
    "retry=Retry(ExponentialWithJitterBackoff(), 3, supported_errors=(redis.ConnectionError,)) "
    "(from redis.retry and redis.backoff), which retries only after a dropped connection"
)


def _check_bounded(pool: Any) -> None:
    """Refuse a client whose calls may not end in about its ``socket_timeout``: none set, or retried after one."""
    kwargs = pool.connection_kwargs
    if kwargs.get("socket_timeout") is None:
        raise ValueError(
            "RedisStore needs a client whose calls end: this one has no socket_timeout, so a server that stops "
            "answering would hold a call forever; make it with socket_timeout=10 (seconds: it bounds every call)"
        )
    retry = _retry_of(pool)
    retries = retry.get_retries() if retry is not None else 0
    retried = getattr(retry, "_supported_errors", ())  # what redis-py's Retry retries, which it does not expose
    if retries and any(issubclass(kind, (TimeoutError, redis.TimeoutError)) for kind in retried):
        times = "without end" if retries < 0 else "once" if retries == 1 else f"up to {retries} times"
        raise ValueError(
            f"RedisStore needs a client that does not retry a command that timed out: this one retries {times} "
            "after a timeout (redis.Redis(host=..., port=...) does by default), so a server that stops answering "
            "would hold each call for that many socket timeouts more. Make the client with "
            f"{_RETRY_DROPS}, or with Redis.from_url(...), which does not retry"
        )
    if isinstance(pool, redis.BlockingConnectionPool) and pool.timeout is None:
        raise ValueError(
            "RedisStore needs a pool that waits for a free connection for a bounded time: this "
            "BlockingConnectionPool has timeout=None; give it timeout=10 (seconds)"
        )


def _retry_of(pool: Any) -> Any:
    """The retry policy the pool's connections get, as a connection works it out from the pool's settings."""
    try:
        return pool.connection_class(**pool.connection_kwargs).retry  # made, never connected: no I/O
    except Exception:  # a connection class that needs more: the retry the pool was given, if any
        return pool.connection_kwargs.get("retry")


def _tail(plan: SavePlan, base: int | None, keep: int, revision: int) -> list[Any]:
    """A save's last arguments: the revision it builds on, how many messages it keeps, the new revision, the bodies."""
    bodies = [dump_message(message) for message in plan.messages[keep:]]
    return ["" if base is None else base, keep, revision, *bodies]


def _windows(at: int | None) -> Iterator[tuple[int, int]]:
    """``LRANGE`` bounds from the end of a list's first ``at`` items (all for ``None``) back, a window each."""
    if at is None:  # from the end, whatever the length: negative bounds
        yield from ((stop - _WINDOW + 1, stop) for stop in itertools.count(-1, -_WINDOW))
    else:
        yield from ((max(stop - _WINDOW + 1, 0), stop) for stop in range(at - 1, -1, -_WINDOW))
    yield (1, 0)  # an empty range: nothing before the first item


def _preview(messages: Sequence[Message]) -> bytes:
    """The transcript's preview as the record keeps it (``pv``)."""
    return encode_text(preview(messages))


def _counts(usage: Usage | None) -> list[int | str]:
    """``SAVE_RUN``'s usage arguments: a flag, then the run's four counts (empty to leave the usage)."""
    if usage is None:
        return [0, "", "", "", ""]
    return [1, usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens]


def _pairs(metadata: Mapping[str, str]) -> list[bytes]:
    """How the record and the pairs' indexes name each pair: its JSON text in UTF-8."""
    return [text.encode() for text in pair_texts(metadata)]


def _info(session_id: str, stamp: bytes, fields: Sequence[bytes], length: int, pending: int, now: int) -> SessionInfo:
    stored, holder, expires, cancel, undecided, md, due, usage, preview = fields
    state = derive_state(_text(stored) or None, _time(expires), values.moment(now), session_id)
    return SessionInfo(
        session_id,
        length,
        None if stamp == _NEVER else values.moment(stamp),
        state,
        _text(holder) if stored else None,
        _time(expires),
        pending,
        cancel == b"1",
        int(undecided or 0) if state is RunState.WAITING else 0,
        from_pair_texts(md.split(b"\n")) if md else {},
        _time(due) if state is RunState.WAITING else None,
        stored_usage(usage.decode("utf-8", "replace")),  # both empty until the session's first save under version 6
        _text(preview),
    )


def _due(moment: datetime.datetime | None) -> str:
    """A deadline as the record keeps it: microseconds, or empty for none."""
    return "" if moment is None else str(values.micros(moment))


def _after(row: Sequence[Any]) -> bytes:
    member: bytes = row[0]
    return b"(" + member  # the next page starts below the last member, excluding it


def _listed_info(row: Sequence[Any], now: int) -> SessionInfo:
    member, *fields, length, pending = row
    return _info(decode_text(member[_STAMP:]), member[:_STAMP], fields, length, pending, now)


def _steer(member: bytes, after: bytes = b"0") -> Steer:
    return Steer(int(member[:_STAMP]), decode_text(member[_STAMP + _NONCE :]), int(after))


def _steers(pairs: list[bytes]) -> list[Steer]:
    """Steers from a script's reply: each member followed by its after-token."""
    return [_steer(member, after) for member, after in zip(pairs[::2], pairs[1::2], strict=True)]


def _nonce() -> bytes:
    """What names one call across redis-py's retries of it."""
    return secrets.token_bytes(_NONCE)


def _text(data: bytes | None) -> str:
    return "" if data is None else decode_text(data)


def _time(micros: bytes | None) -> datetime.datetime | None:
    return None if not micros else values.moment(micros)


def _stamp(moment: datetime.datetime) -> bytes:
    return b"%016d" % values.micros(moment)
