"""The commands on the whole store: console, rekey (and migrate's placeholder: it opens no store)."""

from __future__ import annotations

import argparse

from agentsessions import _format as fmt
from agentsessions.cli._base import KEYS_ENVIRONMENT, PROG, CliError, Exit, Streams, shown_store
from agentsessions.session import RunStore


def console(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    from agentsessions.console import _serve

    try:
        bind = _serve.parse_bind(args.bind)
    except ValueError as error:
        raise CliError(Exit.USAGE, str(error)) from None
    try:
        _serve.serve(store, bind, shown_store=shown_store(args), out=io.out, err=io.err)
    except ImportError as error:
        raise CliError(Exit.STORE, str(error)) from None
    except OSError as error:  # the address is taken, or not this machine's
        raise CliError(Exit.USAGE, f"cannot listen on {args.bind}: {error.strerror or error}") from None
    return Exit.OK


def no_store(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    raise AssertionError(f"{args.command} opens no store")  # _run runs migrate itself


def rekey_(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    from agentsessions.crypto import RekeyProgress, rekey

    if args.keyring is None:
        raise CliError(Exit.USAGE, f"rekey needs the keyring: pass --keys FILE or set {KEYS_ENVIRONMENT}")

    def show(progress: RekeyProgress) -> None:
        io.err.write(f"{PROG}: rekey: {progress}\n")
        io.err.flush()

    plaintext, batch, lease = args.allow_plaintext, args.batch, args.lease
    done = rekey(store, args.keyring, allow_plaintext=plaintext, batch=batch, lease=lease, progress=show)
    for _, error in done.failed:
        io.err.write(f"{PROG}: {fmt.one_line(error)}\n")
    for session_id in done.busy:
        io.err.write(f"{PROG}: busy: a run holds {session_id!r:.300}; it was left as it is (run rekey again)\n")
    io.print(f"rekey to key {args.keyring.current!r}: {done}")
    if done.failed:
        return Exit.USAGE
    return Exit.CONFLICT if done.busy else Exit.OK
