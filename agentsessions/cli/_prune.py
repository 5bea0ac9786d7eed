"""``agentsessions prune``: delete old sessions in batches, with progress, or count them (``--dry-run``).

``store.prune`` says how many went only once it is done, so the command hands it the work a
batch at a time: one pass over the listing (newest first) notes the ``updated_at`` of every
``batch``-th session, and each ``store.prune`` call takes the next of those as its
``updated_before``, oldest first, the last call the cutoff itself. Each call deletes about
one batch (more when sessions share an ``updated_at``), and the running count is printed
after it. The store still decides each session in the step that deletes it: a session a
run claimed, or saved, meanwhile is kept.
"""

from __future__ import annotations

import argparse

from agentsessions import _format as fmt
from agentsessions.cli._base import PROG, CliError, Exit, Streams
from agentsessions.cli._sessions import listed
from agentsessions.runs import utcnow
from agentsessions.session import PruneStore, RunStore
from agentsessions.stores.kit.prune import check_prune


def prune(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    if not isinstance(store, PruneStore):
        raise CliError(Exit.USAGE, f"{type(store).__name__} cannot prune: it has no prune method")
    try:
        wanted = check_prune(utcnow() - args.older_than, args.state, dict(args.metadata or ()) or None, args.batch)
    except (TypeError, ValueError) as error:  # --state running; metadata past the limits
        raise CliError(Exit.USAGE, str(error)) from None
    matching = listed(store, sorted(wanted.states), wanted.before, dict(wanted.pairs or {}))
    before = f"last updated before {fmt.utc(wanted.before)} UTC"
    if args.dry_run:
        io.print(f"would prune {_sessions(sum(1 for _ in matching))} {before}")
        return Exit.OK
    cutoffs, total = [wanted.before], 0
    for total, info in enumerate(matching, 1):
        if total % wanted.batch == 0 and info.updated_at is not None and info.updated_at < cutoffs[-1]:
            cutoffs.append(info.updated_at)
    _progress(io, f"{_sessions(total)} to delete, in batches of {wanted.batch}")
    deleted = 0
    for cutoff in reversed(cutoffs):  # oldest first: each call deletes about one batch
        deleted += store.prune(updated_before=cutoff, state=args.state, metadata=wanted.pairs, batch=wanted.batch)
        _progress(io, f"{deleted} of {total} deleted")
    io.print(f"pruned {_sessions(deleted)} {before}")
    return Exit.OK


def _progress(io: Streams, text: str) -> None:
    io.err.write(f"{PROG}: prune: {text}\n")
    io.err.flush()


def _sessions(count: int) -> str:
    return f"{count} session" if count == 1 else f"{count} sessions"
