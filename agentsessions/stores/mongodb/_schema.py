"""The MongoDB store's schema version, its migrations, and the migrator ``agentsessions migrate`` drives.

MongoDB's "schema" is the store's indexes (``INDEXES``) and the layout of its documents. The
version is recorded in the collection ``agentsessions_schema``, one document per version
applied (``{_id: version, version, applied_at, applied_by}``; ``_id`` makes a second record of
one version impossible). A store records its version at its first call when the database
holds no session yet (a new database needs only ``INDEXES``); a database holding sessions
and no version document is version 1, the layout of the releases before versions were
recorded, and the store refuses it by name until ``agentsessions migrate`` ran.

Version 2 (steer keys) keeps a session's keys in its own document (``steer_keys``), which
one update checks and extends with the steer it guards, and version 3 (approvals) a wait's
calls and decisions (``approvals``, ``pending_approvals``, run state ``waiting``): a document
without those fields holds none, so those steps only record the version. Version 4 (session
metadata) adds the multikey index ``agentsessions_sessions_metadata``, built by its step. Versions 5
(steers queued for the next run: a steer's ``after``) and 6 (a session's ``usage`` and ``preview``,
set by its saves) add fields a document without them reads as absent: they only record the version;
a session saved before version 6 lists an empty preview and no usage until its next save. A migration
runs under a lock document in the same collection, with an expiry that the migrator renews
while it holds it: replicas starting ``agentsessions migrate`` at once apply each step once,
and one killed while holding it blocks the others for one lease at most.

Each step is shown as ``db.runCommand(...)`` calls with the command as JSON, which
``mongosh`` runs as they are and the migrator sends as they are.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

import pymongo
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from agentsessions.stores.kit.schema import VERSION_TABLE, LeaseLock, Step, StepsMigrator, check_version

__all__ = [
    "LOCK_LEASE",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "MongoMigrator",
    "checked_version",
    "read_version",
    "record_new",
]

SCHEMA_VERSION = 6
"""The version of the indexes and document layout this release writes and needs (2: steer keys; 3: approvals;
4: session metadata; 5: steers queued for the next run; 6: usage and preview)."""

LOCK_LEASE = 10.0
"""Seconds a migration's lock document lasts unless renewed (a third of it apart while held)."""

_LOCK = "migrate lock"  # the lock document's _id; it has no `version`, so it is no version record


def _record(version: int, applied_by: str) -> dict[str, Any]:
    """The command recording ``version`` once, however often it runs (an upsert on its ``_id``)."""
    # Client-clock microseconds, as the store's other times: BSON dates keep milliseconds only.
    fields = {"version": version, "applied_at": int(time.time() * 1e6), "applied_by": applied_by}
    return {
        "update": VERSION_TABLE,
        "updates": [{"q": {"_id": version}, "u": {"$setOnInsert": fields}, "upsert": True}],
    }


MIGRATIONS: dict[int, list[dict[str, Any]]] = {
    1: [],
    2: [],
    3: [
        {
            "createIndexes": "agentsessions_sessions",
            "indexes": [
                {"key": {"metadata": 1, "updated_at": -1, "sort": -1}, "name": "agentsessions_sessions_metadata"}
            ],
        }
    ],
    4: [],
    5: [],
}
"""From a version to the commands (``db.runCommand`` documents) that bring it to the next, before the one
recording the version, each idempotent (creating an index that exists alike does nothing); never run by
the library on its own. Steer keys, approvals, queued steers, usage and preview live in the session document:
nothing to create."""

_SUMMARIES = {
    1: "steer keys (field steer_keys of the session document, no index): records version 2",
    2: "approvals (fields of the session document, no index): records version 3",
    3: "session metadata (index agentsessions_sessions_metadata)",
    4: "steers queued for the next run (field after of a steer in the session document, no index): records version 5",
    5: "each session's preview and usage (fields preview and usage of the session document, no index): "
    "records version 6",
}
_CREATE = "create the indexes (agentsessions.stores.mongodb.INDEXES) and record this version"


def read_version(database: Database[Any], sessions: str) -> int | None:
    """The highest version recorded; else 1 when collection ``sessions`` holds a document; else ``None``."""
    recorded = database[VERSION_TABLE].find({"version": {"$exists": True}}, {"version": 1})
    found = max((int(doc["version"]) for doc in recorded), default=None)
    if found is None and database[sessions].find_one({}, {"_id": 1}) is not None:
        return 1
    return found


def checked_version(found: int, what: str) -> int:
    """``found`` (what :func:`read_version` read) if this release works with it; else the error saying what to run."""
    return check_version(found, SCHEMA_VERSION, store=what, create="", url="mongodb://.../database")


def record_new(database: Database[Any]) -> int:
    """Record this release's version in a database with no session yet (once: the upsert is on ``_id``)."""
    database.command(_record(SCHEMA_VERSION, "first use of a new database"))
    return SCHEMA_VERSION


def _shown(command: Mapping[str, Any]) -> str:
    return f"db.runCommand({json.dumps(command)})"


class MongoMigrator(StepsMigrator):
    """What ``agentsessions migrate`` drives for a MongoDB database."""

    store = "MongoDB store"
    version = SCHEMA_VERSION
    language = "mongosh"
    comment = "//"

    def __init__(self, database: Database[Any], indexes: Mapping[str, list[pymongo.IndexModel]], sessions: str) -> None:
        self.database, self.indexes, self.sessions = database, indexes, sessions
        token, schema = secrets.token_hex(16), database[VERSION_TABLE]

        def take() -> bool:
            now = _micros()
            try:  # an expired lock is taken over; a live one makes the upsert's insert a duplicate _id
                schema.update_one(
                    {"_id": _LOCK, "expires": {"$lt": now}},
                    {"$set": {"holder": token, "expires": now + round(LOCK_LEASE * 1e6)}},
                    upsert=True,
                )
            except DuplicateKeyError:
                return False
            return True

        def renew() -> bool:
            expires = _micros() + round(LOCK_LEASE * 1e6)
            return schema.update_one({"_id": _LOCK, "holder": token}, {"$set": {"expires": expires}}).matched_count == 1

        self._lock = LeaseLock(
            take=take,
            renew=renew,
            release=lambda: schema.delete_one({"_id": _LOCK, "holder": token}),
            lease=LOCK_LEASE,
            store=self.store,
        )

    def found(self) -> int | None:
        """The version recorded; 1 with sessions or the store's indexes and no record; ``None`` with neither."""
        found = read_version(self.database, self.sessions)
        if found is None and any(index["name"] != "_id_" for index in self.database[self.sessions].list_indexes()):
            return 1  # the indexes of a store that never held a session: the steps only record the version
        return found

    def _actions(self, found: int | None) -> list[tuple[Step, list[Callable[[], object]]]]:
        if found is not None and found >= SCHEMA_VERSION:
            return []
        applied_by = "agentsessions migrate"
        if found is None:
            commands = [_create_indexes(name, models) for name, models in self.indexes.items()]
            steps = [(SCHEMA_VERSION, _CREATE, [*commands, _record(SCHEMA_VERSION, applied_by)])]
        else:
            steps = [
                (v + 1, _SUMMARIES[v], [*MIGRATIONS[v], _record(v + 1, applied_by)])
                for v in range(found, SCHEMA_VERSION)
            ]
        return [
            (Step(version, summary, tuple(map(_shown, commands))), [self._command(c) for c in commands])
            for version, summary, commands in steps
        ]

    def _command(self, command: dict[str, Any]) -> Callable[[], object]:
        return lambda: self.database.command(command)


def _create_indexes(collection: str, models: list[pymongo.IndexModel]) -> dict[str, Any]:
    """The ``createIndexes`` command of ``models``: creating an index that exists alike does nothing."""
    indexes = [{**model.document, "key": dict(model.document["key"])} for model in models]
    return {"createIndexes": collection, "indexes": indexes}


def _micros() -> int:
    return int(time.time() * 1e6)
