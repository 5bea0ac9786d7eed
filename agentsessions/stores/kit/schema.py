"""Schema versions: what a store checks about its database, and what ``agentsessions migrate`` drives.

Every persistent store records the version of its schema in its database: one row per
version applied (``version``, ``applied_at``, ``applied_by``) in the table
:data:`VERSION_TABLE` (a collection of that name in MongoDB, a hash ``<prefix>schema`` in
Redis). The version is the highest row. A database holding the store's tables but no
version row is version 1, the schema of the releases before versions were recorded.

The rules every store follows, through :func:`check_version`:

- A migration only adds (tables, nullable or defaulted columns, indexes); a removal waits
  two versions. So a store accepts its own version and the next one: after
  ``agentsessions migrate`` ran, a replica not yet upgraded keeps working. Migrate first,
  then roll the replicas.
- An older version is a :class:`~agentsessions.errors.SchemaMissingError` naming the version
  found, the version wanted and the command that migrates; two or more versions newer is a
  :class:`~agentsessions.errors.SchemaTooNewError`.
- A store checks once per store object, lazily at its first call (no I/O in ``__init__``),
  with one small query, and caches what it found; never a query per call.

Each persistent store module exports ``SCHEMA_VERSION`` (an ``int``), ``MIGRATIONS`` (from a
version to the steps that bring it to the next; like ``SCHEMA`` never run by the library on
its own, except that SQLite migrates its own file on open) and ``migrator(...)``, which takes
what the store takes and returns a :class:`Migrator`: the object ``agentsessions migrate``
drives. Every step is idempotent, so a migration that was interrupted is simply run again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

import attrs

from agentsessions.errors import SchemaMissingError, SchemaTooNewError, StoreError

__all__ = [
    "VERSION_TABLE",
    "Applied",
    "LeaseLock",
    "MigratingStore",
    "Migrator",
    "Step",
    "StepsMigrator",
    "VersionedStore",
    "check_version",
    "migrate_command",
    "plan",
    "sql_statements",
    "terminated",
]

VERSION_TABLE = "agentsessions_schema"
"""Where a store records the versions applied: a table (a collection in MongoDB)."""


def migrate_command(url: str = "URL") -> str:
    """The command that migrates the store at ``url`` (a placeholder when the store cannot know its URL)."""
    return f"agentsessions migrate --store {url}"


def check_version(
    found: int | None, wanted: int, *, store: str, create: str, url: str = "URL", missing: BaseException | None = None
) -> int:
    """``found`` if this release can use a database at that version; otherwise the error saying what to do.

    ``found`` is the version the database records (``None``: none of the store's tables
    exist); ``wanted`` is the store's ``SCHEMA_VERSION``; ``store`` names the store in the
    message (``"PostgreSQL store"``); ``create`` says what creates the schema from nothing
    (``"run agentsessions.stores.postgres.SCHEMA once in this database"``); ``url`` is shown
    in the migrate command; ``missing``, the driver's error that said a table is missing,
    is what the error for no tables is chained from. Accepted: ``wanted`` and ``wanted + 1``.
    """
    if found is None:
        error = SchemaMissingError(f"{store}: its tables are missing; {create} (or: {migrate_command(url)})")
        raise error from missing
    if found < wanted:
        raise SchemaMissingError(
            f"{store}: the database's schema is version {found} and this release needs version {wanted}; "
            f"run: {migrate_command(url)} (--plan shows the steps, --sql prints the statements), then start "
            "this release"
        )
    if found > wanted + 1:
        raise SchemaTooNewError(
            f"{store}: the database's schema is version {found}, made by a newer agentsessions; this release "
            f"works with versions {wanted} and {wanted + 1}: upgrade agentsessions"
        )
    return found


@attrs.frozen
class Step:
    """One step of a migration: what brings a database to ``version``.

    ``statements`` are in the database's own language (SQL; for MongoDB and Redis the
    commands as their shells write them), each idempotent; ``agentsessions migrate --sql``
    prints them and ``Migrator.apply`` runs them. ``summary`` says in words what the step does.
    """

    version: int
    summary: str
    statements: tuple[str, ...]


@attrs.frozen
class Applied:
    """What :meth:`Migrator.apply` did: the version it found under the lock, and the steps it ran."""

    found: int | None
    steps: tuple[Step, ...]

    @property
    def version(self) -> int | None:
        """The version the database is at now."""
        return self.steps[-1].version if self.steps else self.found


def plan(
    found: int | None,
    wanted: int,
    *,
    create: Step,
    migrations: Mapping[int, Sequence[str]],
    summaries: Mapping[int, str],
) -> list[Step]:
    """The steps from ``found`` to ``wanted``: ``create`` from nothing, else one step per version.

    ``migrations[v]`` and ``summaries[v]`` are the statements and the words that bring
    version ``v`` to ``v + 1``; each statement is given a ``;`` if it has none. Nothing when
    ``found`` is ``wanted`` or newer.
    """
    if found is None:
        return [create]
    return [Step(v + 1, summaries[v], terminated(migrations[v])) for v in range(found, wanted)]


def sql_statements(script: str, complete: Callable[[str], bool]) -> list[str]:
    """A script of SQL statements split into statements, ``complete`` telling where one ends.

    ``complete`` is ``sqlite3.complete_statement`` for SQLite; comments and blank lines
    between statements are dropped.
    """
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        if not pending and (not line.strip() or line.lstrip().startswith("--")):
            continue
        pending += line
        if complete(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        statements.append(pending.strip())
    return statements


def terminated(statements: Sequence[str], terminator: str = ";") -> tuple[str, ...]:
    """``statements`` each ending with ``terminator``, as a script prints them."""
    return tuple(s if s.rstrip().endswith(terminator) else s.rstrip() + terminator for s in statements)


@runtime_checkable
class VersionedStore(Protocol):
    """A store that records its schema version in its database."""

    def schema_version(self) -> int:
        """The version of the schema its database holds, one this store accepts; checked once and cached.

        Raises :class:`~agentsessions.errors.SchemaMissingError` or
        :class:`~agentsessions.errors.SchemaTooNewError` as any first call would.
        """
        ...


class Migrator(Protocol):
    """What ``agentsessions migrate`` drives: a store module's ``migrator(...)`` returns one.

    ``store`` names the store in messages, ``version`` is the module's ``SCHEMA_VERSION``,
    ``language`` names the language of the steps' statements (``"SQL"``, ``"mongosh"``,
    ``"redis-cli"``), and ``comment`` starts a comment in it (``--`` in SQL).
    """

    store: str
    version: int
    language: str
    comment: str

    def found(self) -> int | None:
        """The version the database records, read without the lock; ``None`` when it has none of the tables."""
        ...

    def plan(self, found: int | None) -> list[Step]:
        """The steps from ``found`` to this release's version (nothing when up to date or newer)."""
        ...

    def apply(self, *, wait: float, ran: Callable[[Step, int], None] | None = None) -> Applied:
        """Take the lock, read the version again, run the steps still missing, release the lock.

        Waits up to ``wait`` seconds for another migration's lock, then raises
        :class:`~agentsessions.errors.StoreError`. ``ran(step, i)`` is called after the
        step's ``i``-th statement ran (0-based). Raises
        :class:`~agentsessions.errors.SchemaTooNewError` when the version found under the
        lock is newer than this release's. Every statement is idempotent: run again, a
        migration that was interrupted finishes.
        """
        ...


@runtime_checkable
class MigratingStore(Protocol):
    """A store whose database a :class:`Migrator` brings forward: every server store of this package."""

    def migrator(self) -> Migrator:
        """The migrator over the connections this store was given."""
        ...


class LeaseLock:
    """A migration lock that lapses: taken with a lease that a thread renews while it is held.

    For a database with no lock that ends with its connection (a lock document in MongoDB,
    a ``SET NX PX`` key in Redis): a migrator killed while holding it blocks the others for
    one ``lease`` at most. ``take()`` tries once and says whether it got the lock,
    ``renew()`` extends it (``False``: it was lost), ``release()`` gives it back; each is
    one small write that checks this holder's token.
    """

    def __init__(
        self,
        *,
        take: Callable[[], bool],
        renew: Callable[[], bool],
        release: Callable[[], object],
        lease: float,
        store: str,
    ) -> None:
        self._take, self._renew, self._release = take, renew, release
        self.lease, self.store = lease, store

    @contextmanager
    def held(self, wait: float) -> Iterator[None]:
        """Hold the lock, waiting up to ``wait`` seconds for it; a :class:`StoreError` if it stayed taken."""
        deadline = time.monotonic() + wait
        while not self._take():
            if time.monotonic() >= deadline:
                raise StoreError(f"{self.store}: another migration held the lock for {wait:g} s")
            time.sleep(min(0.1, self.lease / 10))  # polled: the lock's holder may be dead, so nothing will wake us
        done = threading.Event()
        renewer = threading.Thread(target=self._renewing, args=(done,), name="agentsessions migrate lock", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            done.set()
            renewer.join()
            self._release()

    def _renewing(self, done: threading.Event) -> None:
        # A third of the lease apart, so two late renewals still leave it held; a failed one
        # leaves the steps to finish (each is idempotent) and the lock to lapse.
        while not done.wait(self.lease / 3):
            try:
                if not self._renew():
                    return
            except Exception:  # the step's own call will fail and say why
                return


class StepsMigrator:
    """A :class:`Migrator` whose statements are shown as shell commands and run as driver calls.

    For MongoDB and Redis, which have no SQL: a subclass gives ``found()``, ``_lock`` and
    ``_actions(found)``: each step with, for each of its statements, the call that runs it.
    """

    store: str
    version: int
    language: str
    comment: str
    _lock: LeaseLock

    def found(self) -> int | None:  # pragma: no cover - every subclass has its own
        """The version the database records; ``None`` when it has none of the store's data."""
        raise NotImplementedError

    def _actions(self, found: int | None) -> list[tuple[Step, list[Callable[[], object]]]]:  # pragma: no cover
        raise NotImplementedError

    def plan(self, found: int | None) -> list[Step]:
        """The steps from ``found`` to this release's version."""
        return [step for step, _ in self._actions(found)]

    def apply(self, *, wait: float, ran: Callable[[Step, int], None] | None = None) -> Applied:
        """Under the lease lock: read the version again and run each call of the missing steps."""
        with self._lock.held(wait):
            found = self.found()
            steps = self._actions(found)
            for step, calls in steps:
                for index, call in enumerate(calls):
                    call()
                    if ran is not None:
                        ran(step, index)
            return Applied(found, tuple(step for step, _ in steps))
