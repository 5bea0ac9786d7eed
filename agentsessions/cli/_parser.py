"""The command's argument parser."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import NoReturn

from agentsessions.cli import _admin as admin
from agentsessions.cli import _approvals as approvals_
from agentsessions.cli import _prune as prune_
from agentsessions.cli import _sessions as sessions
from agentsessions.cli._args import count, duration, pair, seconds, state
from agentsessions.cli._base import ENVIRONMENT, KEYS_ENVIRONMENT, PROG, Exit
from agentsessions.stores.urls import mask_urls


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that a URL's password in its error messages is masked."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(Exit.USAGE, f"{self.prog}: error: {mask_urls(message)}\n")


def parser() -> argparse.ArgumentParser:
    """The command's argument parser, subcommands included."""
    from agentsessions import cli  # the package's docstring is the help text's source

    doc = cli.__doc__ or ""
    top = _Parser(
        prog=PROG,
        description="Look at, steer, stop, fork, delete, prune, export and import agentsessions sessions in a store, "
        "and migrate its schema.",
        epilog=doc[doc.index("Store URLs") :],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # --store before or after the command; SUPPRESS, so a subcommand without it keeps the first.
    store = _Parser(add_help=False)
    store.add_argument("--store", metavar="URL", default=argparse.SUPPRESS, help=f"the store (default: ${ENVIRONMENT})")
    top.add_argument("--store", metavar="URL", help=f"the store (default: ${ENVIRONMENT})")
    keys_help = f"a keyring file: the store is encrypted (default: ${KEYS_ENVIRONMENT})"
    unwrap_help = "MODULE:FUNCTION unwrapping each key of the keys file (a KMS call)"
    store.add_argument("--keys", metavar="FILE", default=argparse.SUPPRESS, help=keys_help)
    top.add_argument("--keys", metavar="FILE", help=keys_help)
    top.set_defaults(unwrap=None)  # after the command only: the top usage line stays one line
    store.add_argument("--unwrap", metavar="MODULE:FUNCTION", default=argparse.SUPPRESS, help=unwrap_help)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Callable[..., Exit], text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=text, description=text, parents=[store])
        sub.set_defaults(run=run)
        return sub

    listing = command("list", sessions.list_, "Sessions, newest update first: a table, or JSON Lines with --json.")
    listing.add_argument("--state", type=state, action="append", help="only this state (repeat for several)")
    listing.add_argument("--metadata", type=pair, action="append", metavar="K=V", help="holding this pair (repeat)")
    listing.add_argument("--older-than", type=duration, metavar="DURATION", help="last saved before this long ago")
    listing.add_argument("--limit", type=functools.partial(count, least=1), metavar="N", help="at most N sessions")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    show = command("show", sessions.show, "A session: its state, holder, lease, steers waiting and transcript.")
    show.add_argument("id")
    show.add_argument("--json", action="store_true", help="one JSON object, the transcript in the dumps form")
    steer = command("steer", sessions.steer, "Leave a steer; prints the state it met (running: the live run takes it).")
    steer.add_argument("id")
    steer.add_argument("text")
    steer.add_argument("--key", metavar="K", help="a key for this steer: run again with it, nothing more is stored")
    cancel = command(
        "cancel", sessions.cancel, "Ask the run holding a session to stop, or end its wait; exit 1 when neither."
    )
    cancel.add_argument("id")
    approvals = command("approvals", approvals_.approvals, "The tool calls a session waits for: decided or not.")
    approvals.add_argument("id")
    approvals.add_argument("--json", action="store_true", help="one JSON object per call")
    approve = command(
        "approve", approvals_.decide, "Let a waiting call run; prints the state (waiting until a run goes on)."
    )
    reject = command(
        "reject", approvals_.decide, "Refuse a waiting call; the model reads the reason. Prints the state."
    )
    for decide in (approve, reject):
        decide.add_argument("id")
        decide.add_argument("call_id", metavar="CALL_ID")
        decide.add_argument("--by", default="", metavar="WHO", help="who decides (kept with the decision)")
    reject.add_argument("--reason", default="", metavar="TEXT", help="why: the model reads it")
    approve.add_argument("--input", metavar="JSON", help="run the call with this input (a JSON object) instead")
    fork = command("fork", sessions.fork, "Copy a session's first N messages (all without --at) into a new one.")
    fork.add_argument("id")
    fork.add_argument("new")
    fork.add_argument("--at", type=functools.partial(count, least=0), metavar="N")
    delete = command(
        "delete", sessions.delete, "Delete sessions; exit 1 if any did not exist (the others are deleted)."
    )
    delete.add_argument("ids", nargs="+", metavar="ID")
    export = command(
        "export", sessions.export, "Write a session's transcript in the agentsessions.dumps form to stdout."
    )
    export.add_argument("id")
    imports = command("import", sessions.import_, "Store a transcript in the dumps form from FILE (- for stdin) as ID.")
    imports.add_argument("id")
    imports.add_argument("file", metavar="FILE")
    imports.add_argument("--replace", action="store_true", help="overwrite an existing session's transcript")
    prunes = command("prune", prune_.prune, "Delete the sessions last saved before --older-than, in batches.")
    prunes.add_argument(
        "--older-than", type=duration, required=True, metavar="DURATION", help="last saved before this long ago (30d)"
    )
    prunes.add_argument(
        "--state", type=state, action="append", help="only this state (repeat; default: the ended states)"
    )
    prunes.add_argument("--metadata", type=pair, action="append", metavar="K=V", help="holding this pair (repeat)")
    prunes.add_argument("--dry-run", action="store_true", help="print how many would go; delete nothing")
    prunes.add_argument(
        "--batch", type=functools.partial(count, least=1), default=500, metavar="N", help="sessions per step (500)"
    )
    migrate = command("migrate", admin.no_store, "Bring the store's schema to this release's version, under a lock.")
    migrate.add_argument("--plan", action="store_true", help="print the version found and the steps; apply nothing")
    migrate.add_argument("--sql", action="store_true", help="print only the steps' statements (for your own tool)")
    migrate.add_argument(
        "--wait", type=seconds, default=60.0, metavar="SECONDS", help="for another migration's lock (default 60)"
    )
    console = command("console", admin.console, "Serve a web console over the store; prints the address to open.")
    console.add_argument(
        "--bind", default="127.0.0.1:8700", metavar="HOST:PORT", help="default 127.0.0.1:8700 (this machine only)"
    )
    rekeys = command("rekey", admin.rekey_, "Re-encrypt every session with the current key of the --keys keyring.")
    rekeys.add_argument("--allow-plaintext", action="store_true", help="encrypt rows written before encryption too")
    rekeys.add_argument(
        "--batch", type=functools.partial(count, least=1), default=100, metavar="N", help="sessions per batch"
    )
    rekeys.add_argument(
        "--lease", type=seconds, default=10.0, metavar="SECONDS", help="each session's claim (default 10)"
    )
    return top
