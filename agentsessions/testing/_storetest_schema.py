"""storetest's property for a store that records its schema version in its database; private to storetest.

A persistent store reads the version its database records once, at its first call, and
refuses one it cannot use (``SchemaMissingError``, ``SchemaTooNewError``). What every such
store must then say is one version: a positive ``int``, the same before and after it
writes, the same from another store object over the same data, and the one its migrator
(``migrator().found()``, what ``agentsessions migrate`` reads) finds recorded. A store
without ``schema_version`` (one with no database, such as the memory store) skips it.
"""

from __future__ import annotations

from typing import Any

from agentsessions.messages import Message
from agentsessions.testing._storetest_support import Context, check_equal

SCHEMA = "a store reports the schema version its database records"


def versioned(store: object) -> bool:
    """Whether ``store`` records a schema version (has ``schema_version()``)."""
    return callable(getattr(store, "schema_version", None))


def check_schema(context: Context) -> None:
    """:data:`SCHEMA`: one positive version, stable across writes and store objects, and the migrator's."""
    store: Any = context.store
    version = store.schema_version()
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise AssertionError(f"schema_version() must be a positive int, got {version!r}")
    session_id = context.new_id("schema")
    store.save(session_id, [Message.user("a session written at this version")])
    check_equal(store.schema_version(), version, "schema_version() after a save")
    if versioned(context.replica):
        replica: Any = context.replica
        check_equal(replica.schema_version(), version, "schema_version() of another store object")
    migrator = getattr(store, "migrator", None)
    if callable(migrator):
        check_equal(migrator().found(), version, "the version migrator().found() reads from the database")
    if callable(getattr(store, "delete", None)):
        store.delete(session_id)
    context.examples += 1


SCHEMA_CHECKS = {SCHEMA: check_schema}
