"""The Redis store's schema version, its migrations, and the migrator ``agentsessions migrate`` drives.

Redis has no schema to create: its "schema" is the layout of the keys under the store's
prefix (see ``_scripts``). The version is recorded in the hash ``<prefix>schema``, one field
per version applied (the version, in decimal) whose value says when and by what. A store
records its version on its first call (:data:`VERSION`, one script) when the prefix holds no
session yet; a prefix holding sessions and no version is version 1, the layout of the
releases before versions were recorded, and the store refuses it by name until
``agentsessions migrate`` ran.

Version 2 (steer keys) adds the hash ``<prefix>k:<id>`` per session, written by the steer's
own script beside the steers it guards; version 3 (approvals) fields of the record; version 4
(session metadata) a sorted set per metadata pair, kept by the scripts that write a
session; version 5 (steers queued for the next run) fields ``a<seq>`` of the record; version 6
(usage and preview) fields ``us`` and ``pv`` of the record, set by the scripts that save. A
session without them simply holds none, so each step only records its version (a session saved
before version 6 lists an empty preview and no usage until its next save).
A migration runs under a lock that lapses
(``SET <prefix>migrate <token> NX PX``, renewed while held), so replicas starting
``agentsessions migrate`` at once apply each step once, and one killed while holding it
blocks the others for one lease at most.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any

import redis

from agentsessions.codec import encode_text
from agentsessions.stores.kit.schema import LeaseLock, Step, StepsMigrator, check_version

__all__ = [
    "LOCK_LEASE",
    "MIGRATIONS",
    "RECORD",
    "SCHEMA_VERSION",
    "VERSION",
    "RedisMigrator",
    "checked_version",
    "migrator",
]

SCHEMA_VERSION = 6
"""The version of the key layout this release writes and needs (2: steer keys; 3: approvals; 4: session
metadata; 5: steers queued for the next run; 6: usage and preview)."""

LOCK_LEASE = 10.0
"""Seconds a migration's lock lasts unless renewed (a third of it apart while held)."""

# KEYS[1] the version hash, KEYS[2] the session index; ARGV[1] this release's version, or ''
# to only read; ARGV[2] what records it. Returns the highest version recorded; else 1 when
# the prefix holds sessions; else records ARGV[1] (a new store) and returns it, or 0 to only read.
VERSION = """
local best = nil
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  local v = tonumber(field)
  if v and (best == nil or v > best) then best = v end
end
if best then return best end
if redis.call('EXISTS', KEYS[2]) == 1 then return 1 end
if ARGV[1] == '' then return 0 end
local t = redis.call('TIME')
redis.call('HSETNX', KEYS[1], ARGV[1], t[1] .. ' ' .. ARGV[2])
return tonumber(ARGV[1])
"""

RECORD = "HSETNX {schema} {version} {applied}"
"""The one command of every step so far: it records ``{version}`` in the version hash ``{schema}`` unless
recorded (``{applied}`` says when and by what)."""

MIGRATIONS: dict[int, list[str]] = {1: [RECORD], 2: [RECORD], 3: [RECORD], 4: [RECORD], 5: [RECORD]}
"""From a version to the ``redis-cli`` commands that bring it to the next, each idempotent; never run by
the library on its own. Steer keys, approvals and metadata live in keys a session without them has not:
nothing changes but the version recorded."""

_SUMMARIES = {
    1: "steer keys (a hash <prefix>k:<id> per session, made by the steer that keeps one): records version 2",
    2: "approvals (fields of the session's record): records version 3",
    3: "session metadata (a sorted set per pair, made by the scripts that set it): records version 4",
    4: "steers queued for the next run (fields a<seq> of the session's record, made by add_steer): records version 5",
    5: "each session's preview and usage (fields pv and us of the session's record, made by the save scripts): "
    "records version 6",
}
_CREATE = "a new store: records this version"

# Releases the lock only if this holder still has it; renews it likewise.
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
_RENEW = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"


def checked_version(found: int, what: str) -> int:
    """``found`` (what :data:`VERSION` returned) if this release works with it; else the error saying what to run."""
    return check_version(found, SCHEMA_VERSION, store=what, create="", url="redis://...?prefix=...")


class RedisMigrator(StepsMigrator):
    """What ``agentsessions migrate`` drives for the keys under one prefix of a Redis database."""

    store = "Redis store"
    version = SCHEMA_VERSION
    language = "redis-cli"
    comment = "#"

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client, self.prefix = client, prefix
        self._schema = encode_text(prefix) + b"schema"
        self._index = encode_text(prefix) + b"sessions"
        self._version = client.register_script(VERSION)
        lock, token = encode_text(prefix) + b"migrate", secrets.token_hex(16)
        release, renew = client.register_script(_RELEASE), client.register_script(_RENEW)
        self._lock = LeaseLock(
            take=lambda: bool(client.set(lock, token, nx=True, px=round(LOCK_LEASE * 1000))),
            renew=lambda: bool(renew([lock], [token, round(LOCK_LEASE * 1000)])),
            release=lambda: release([lock], [token]),
            lease=LOCK_LEASE,
            store=self.store,
        )

    def found(self) -> int | None:
        """The version recorded; 1 when the prefix holds sessions and none; ``None`` when it holds neither."""
        return int(self._version([self._schema, self._index], ["", ""])) or None

    def _actions(self, found: int | None) -> list[tuple[Step, list[Callable[[], object]]]]:
        if found is not None and found >= SCHEMA_VERSION:
            return []
        # Each step records its version only if missing (HSETNX): run twice, it keeps the first.
        applied = f"{int(time.time())} agentsessions migrate"
        shown = {"schema": json.dumps(self.prefix + "schema"), "applied": json.dumps(applied)}  # as redis-cli quotes
        if found is None:
            steps = [(SCHEMA_VERSION, _CREATE, [RECORD])]
        else:
            steps = [(v + 1, _SUMMARIES[v], MIGRATIONS[v]) for v in range(found, SCHEMA_VERSION)]
        actions: list[tuple[Step, list[Callable[[], object]]]] = []
        for version, summary, commands in steps:
            assert commands == [RECORD], "a step that changes keys needs its calls here"
            step = Step(version, summary, tuple(c.format(version=version, **shown) for c in commands))
            actions.append((step, [_recording(self.client, self._schema, version, applied)]))
        return actions


def _recording(client: redis.Redis, schema: bytes, version: int, applied: str) -> Callable[[], Any]:
    return lambda: client.hsetnx(schema, str(version), applied)


def migrator(client: redis.Redis, prefix: str = "agentsessions:") -> RedisMigrator:
    """The :class:`~agentsessions.stores.kit.schema.Migrator` of the store under ``prefix`` in ``client``'s database."""
    return RedisMigrator(client, prefix)
