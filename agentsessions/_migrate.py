"""``agentsessions migrate``: bring a store's schema to this release's version, or print how.

    agentsessions migrate --store URL [--plan] [--sql] [--wait SECONDS]

It prints the version found and the steps, then applies them under a lock that every
``migrate`` respects (a PostgreSQL advisory lock, MySQL ``GET_LOCK``, a lock document in
MongoDB, a ``SET NX`` key with an expiry in Redis, SQLite's write lock), reading the version
again once it holds the lock: of several replicas starting at once, one applies and the
others find the work done. Every step is idempotent, so an interrupted migration is simply
run again. ``--plan`` prints without applying; ``--sql`` prints only the statements, for a
team whose own tool (Alembic, Flyway) runs migrations (MongoDB and Redis have no SQL: it
prints their steps as ``mongosh`` and ``redis-cli`` commands).

Exit codes: 0 up to date or migrated; 1 failed (unreachable, refused, the lock held past
``--wait``, no driver); 2 bad usage; 3 the schema is newer than this release's.
"""

from __future__ import annotations

import argparse
import enum
from typing import IO

from agentsessions.errors import SchemaTooNewError, StoreError
from agentsessions.stores.kit.schema import Migrator, Step
from agentsessions.stores.urls import StoreURL, open_migrator

__all__ = ["MigrateExit", "migrate"]


class MigrateExit(enum.IntEnum):
    """The exit codes of ``agentsessions migrate``."""

    OK = 0
    FAILED = 1
    USAGE = 2
    NEWER = 3


class MigrateError(Exception):
    """A failure of the command: its message is one line for stderr, ``code`` the exit code."""

    def __init__(self, code: MigrateExit, message: str) -> None:
        super().__init__(message)
        self.code = code


def migrate(args: argparse.Namespace, url: StoreURL, out: IO[str]) -> MigrateExit:
    """Run the command for the parsed ``args`` against ``url``, writing results to ``out``.

    Raises :class:`MigrateError` for what goes on stderr; the caller masks the URL's secrets.
    """
    try:
        with open_migrator(url) as migrator:
            return _migrate(migrator, args, url, out)
    except MigrateError:
        raise
    except SchemaTooNewError as error:
        raise MigrateError(MigrateExit.NEWER, str(error)) from None
    except ValueError as error:
        raise MigrateError(MigrateExit.USAGE, str(error)) from None
    except (StoreError, ImportError) as error:
        raise MigrateError(MigrateExit.FAILED, f"{url.shown}: {error}") from None


def _migrate(migrator: Migrator, args: argparse.Namespace, url: StoreURL, out: IO[str]) -> MigrateExit:
    found = migrator.found()
    steps = migrator.plan(found)
    shown = "none (no tables)" if found is None else str(found)
    head = f"{migrator.store} at {url.shown}: schema version {shown}; this release uses version {migrator.version}"
    if args.sql:
        _print(out, f"{migrator.comment} {head}")
        if migrator.language != "SQL":  # MongoDB, Redis: the steps as their shell writes them
            said = f"the {migrator.store} has no SQL: its steps as {migrator.language} commands"
            _print(out, f"{migrator.comment} {said}")
        for step in steps:
            _print(out, f"{migrator.comment} to version {step.version}: {step.summary}")
            for statement in step.statements:
                _print(out, statement)
        _newer(migrator, found)
        return MigrateExit.OK
    _print(out, head)
    _newer(migrator, found)
    if not steps:
        _print(out, "up to date")
        return MigrateExit.OK
    _print(out, f"{len(steps)} step{'s' if len(steps) > 1 else ''}:")
    for step in steps:
        _print(out, f"  to version {step.version}: {step.summary} ({len(step.statements)} statements)")
        if args.plan:
            for statement in step.statements:
                _print(out, "    " + statement.replace("\n", "\n    "))
    if args.plan:
        return MigrateExit.OK
    _print(out, f"applying, under the migration lock (waiting for it up to {args.wait:g} s)")
    applied = migrator.apply(wait=args.wait, ran=lambda step, index: _ran(out, step, index))
    _newer(migrator, applied.found)
    if not applied.steps:
        _print(out, f"up to date: version {applied.version} (another migration applied it meanwhile)")
    else:
        _print(out, f"migrated to version {applied.version}")
    return MigrateExit.OK


def _newer(migrator: Migrator, found: int | None) -> None:
    if found is None or found <= migrator.version:
        return
    works = "still works with it" if found == migrator.version + 1 else "cannot use it"
    raise MigrateError(
        MigrateExit.NEWER,
        f"{migrator.store}: the schema is version {found}, newer than this release's {migrator.version} "
        f"(this release {works}): nothing to do; upgrade agentsessions to migrate it",
    )


def _ran(out: IO[str], step: Step, index: int) -> None:
    first = step.statements[index].strip().split("\n", 1)[0]
    _print(out, f"  version {step.version}: ran {index + 1}/{len(step.statements)}: {first}")


def _print(out: IO[str], line: str) -> None:
    out.write(line + "\n")
    out.flush()  # each line as it happens: a person watching, or a script waiting for a step
