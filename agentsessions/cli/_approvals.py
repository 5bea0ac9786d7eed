"""The commands on approvals: approvals, approve, reject."""

from __future__ import annotations

import argparse

from agentsessions import _format as fmt
from agentsessions.approvals import Decision
from agentsessions.cli._base import PROG, CliError, Exit, Streams, known
from agentsessions.session import RunStore
from agentsessions.session import open as open_session


def approvals(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    known(store, args.id)
    calls = open_session(args.id, store).approvals()
    lines = [fmt.dump_json(fmt.approval_json(call)) for call in calls] if args.json else fmt.approvals(calls)
    for line in lines:
        io.print(line)
    if not calls and not args.json:
        io.err.write(f"{PROG}: session {args.id!r:.300} waits for no approval\n")
    return Exit.OK


def decide(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    known(store, args.id)
    if args.command == "approve":
        decision = Decision.approve(by=args.by, input=args.input)
    else:
        decision = Decision.reject(reason=args.reason, by=args.by)
    try:
        state = open_session(args.id, store).decide({args.call_id: decision})
    except TypeError as error:  # a store that cannot yet take an edited input
        raise CliError(Exit.USAGE, str(error)) from None
    io.print(state.value)
    return Exit.OK
