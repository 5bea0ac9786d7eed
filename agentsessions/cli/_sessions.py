"""The commands on sessions: list, show, steer, cancel, fork, delete, export, import."""

from __future__ import annotations

import argparse
import datetime
import itertools
from collections.abc import Iterator

from agentsessions import _format as fmt
from agentsessions.cli._base import PROG, CliError, Exit, Streams, known
from agentsessions.codec import dumps
from agentsessions.runs import RunState, SessionInfo, exists, utcnow
from agentsessions.session import ForkStore, MetadataStore, RunStore
from agentsessions.session import open as open_session


def list_(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    now = utcnow()
    before = now - args.older_than if args.older_than is not None else None
    infos = listed(store, args.state, before, dict(args.metadata or ()))
    if args.limit is not None:
        infos = itertools.islice(infos, args.limit)
    if args.json:
        for info in infos:
            io.print(fmt.dump_json(fmt.info_json(info)))
    else:
        for line in fmt.table(infos, now):
            io.print(line)
    return Exit.OK


def listed(
    store: RunStore, state: list[RunState] | None, before: datetime.datetime | None, pairs: dict[str, str]
) -> Iterator[SessionInfo]:
    if not pairs:
        return store.sessions(state=state, updated_before=before)
    if not isinstance(store, MetadataStore):
        raise CliError(Exit.USAGE, f"{type(store).__name__} keeps no session metadata: --metadata cannot filter it")
    try:
        return store.sessions(state=state, updated_before=before, metadata=pairs)
    except (TypeError, ValueError) as error:  # a key or value past the limits
        raise CliError(Exit.USAGE, str(error)) from None


def show(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    info = known(store, args.id)
    steers = store.peek_steers(args.id)
    messages = store.messages(args.id)
    if args.json:
        io.print(fmt.dump_json(fmt.show_json(info, steers, dumps(messages))))
        return Exit.OK
    for line in [*fmt.header(info, steers, utcnow()), "", *fmt.transcript(messages)]:
        io.print(line)
    return Exit.OK


def steer(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    known(store, args.id)  # a steer for a mistyped id would wait forever for a run nobody starts
    io.print(store.add_steer(args.id, args.text, key=args.key).value)
    return Exit.OK


def cancel(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    waiting = known(store, args.id).state is RunState.WAITING
    if open_session(args.id, store).cancel():
        if waiting:
            io.print(f"the wait for approval of {args.id!r:.300} ended: its calls are answered as cancelled")
        else:
            io.print(f"cancel requested: the run holding {args.id!r:.300} stops before its next step")
        return Exit.OK
    state = store.info(args.id).state.value
    raise CliError(Exit.NOT_FOUND, f"no live run holds session {args.id!r:.300} (it is {state}): nothing to cancel")


def fork(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    info = known(store, args.id)
    if not isinstance(store, ForkStore):
        raise CliError(Exit.USAGE, f"this store ({type(store).__name__}) cannot fork sessions")
    store.fork(args.id, args.new, at=args.at)
    copied = info.length if args.at is None else args.at
    io.print(f"forked {args.id!r:.300} into {args.new!r:.300} ({fmt.messages(copied)})")
    return Exit.OK


def delete(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    missing = []
    for session_id in args.ids:
        if store.delete(session_id):
            io.print(f"deleted {session_id!r:.300}")
        else:
            missing.append(session_id)
    for session_id in missing:
        io.err.write(f"{PROG}: no session {session_id!r:.300}\n")
    return Exit.NOT_FOUND if missing else Exit.OK


def export(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    known(store, args.id)
    fmt.write_utf8(io.out, dumps(store.messages(args.id)) + "\n")
    return Exit.OK


def import_(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    messages = args.transcript  # read by _run before the store was opened
    info = store.info(args.id)
    if exists(info) and not args.replace:
        raise CliError(Exit.CONFLICT, f"session {args.id!r:.300} exists; pass --replace to overwrite its transcript")
    if info.state is RunState.RUNNING:
        raise CliError(Exit.CONFLICT, f"session {args.id!r:.300} is held by a live run ({info.holder}); not replaced")
    store.save(args.id, messages)
    io.print(f"imported {fmt.messages(len(messages))} into {args.id!r:.300}")
    return Exit.OK
