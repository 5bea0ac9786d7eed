"""The ``agentsessions`` command: look at, steer, stop, fork, delete, export and import sessions in a store.

    agentsessions [--store URL] [--keys FILE] COMMAND ...        (or: python -m agentsessions ...)

    list [--state STATE]... [--metadata K=V]... [--older-than 7d] [--limit N] [--json]
    show ID [--json]               the record, the steers waiting, the transcript
    steer ID TEXT [--key K]        prints the state the steer met: running, or what waits for a run;
                                   with --key, run again it stores nothing more (a retry)
    cancel ID                      asks the run holding ID to stop, or ends its wait for approval
    approvals ID [--json]          the tool calls ID waits for, decided or not
    approve ID CALL_ID [--by WHO] [--input JSON]
                                   lets a waiting call run (the run after the decision runs it);
                                   with --input, with that input instead (checked against the
                                   tool's schema; the transcript's call shows it)
    reject ID CALL_ID [--reason TEXT] [--by WHO]
                                   refuses a waiting call: the model reads the reason
    fork ID NEW [--at N]           NEW gets ID's first N messages (all without --at)
    delete ID...                   transcript, steers and record, for each ID
    export ID                      the transcript in the agentsessions.dumps form, on stdout
    import ID FILE [--replace]     a transcript in that form from FILE (- for stdin)
    console [--bind HOST:PORT]     a web console over the store (default 127.0.0.1:8700); prints
                                   the address to open, carrying a one-time token
    migrate [--plan] [--sql] [--wait SECONDS]
                                   brings the store's schema to this release's version, under a
                                   lock; --plan prints the steps, --sql only their statements
    rekey --keys FILE [--allow-plaintext] [--batch N] [--lease SECONDS]
                                   re-encrypt every session with the keyring's current key,
                                   each under a claim, in batches, printing progress; run it
                                   again after an interruption, or when sessions were busy

``list --json`` writes JSON Lines: one object per session, newest update first, with
``id``, ``state``, ``length``, ``updated_at``, ``holder``, ``lease_expires_at`` (ISO 8601,
UTC, or null), ``pending_steers``, ``cancel_requested``, ``metadata`` and
``pending_approvals``. ``show --json`` writes one object: the same fields, ``steers``
(``seq`` and ``text`` of each one waiting) and ``transcript`` (the ``dumps`` form, parsed).

Store URLs (--store, else the AGENTSESSIONS_STORE environment variable):
  sqlite:///absolute/path.db  sqlite:relative/path.db
      the file must exist, except for import (which creates it, with its tables)
  postgresql://user:password@host:5432/db   (or postgres://; any libpq URI parameter,
      e.g. ?options=-csearch_path%3Dmyschema)          needs: pip install agentsessions[postgres]
  mysql://user:password@host:3306/db                   needs: pip install agentsessions[mysql]
  mongodb://user:password@host:27017/db (or mongodb+srv://; the database is the path)
                                                       needs: pip install agentsessions[mongodb]
  redis://user:password@host:6379/0 (or rediss://; ?prefix=myapp: for the key prefix,
      default agentsessions:)                          needs: pip install agentsessions[redis]
  The command opens its own connections and closes them before it exits. A password in
  the URL never appears in any output: URLs are shown as postgresql://user:***@host/db.

Encrypted stores (agentsessions.crypto): --keys FILE (else the AGENTSESSIONS_KEYS_FILE
  environment variable) names a keyring file, {"current": ID, "keys": {ID: BASE64, ...}};
  every command then reads and writes the store through it. --unwrap MODULE:FUNCTION (after
  the command) names a function (key_id, stored_bytes) -> key unwrapping each key (a KMS).
  Needs: pip install agentsessions[crypto]

Exit codes:
  0  done
  1  not found: no such session (show, export, steer, fork's source, cancel, delete: any
     ID missing, after deleting the others); for cancel also: no live run holds it
  2  bad input or usage: arguments, session ids, a transcript that is not the dumps form,
     approve --input that is not a JSON object or does not fit the tool's schema,
     fork --at outside 0..length, fork on a store that cannot fork; a keys file that cannot
     be read; a row that does not decrypt (rekey: sessions that did not, each named)
  3  busy or conflict: import over an existing session without --replace, or over one a
     run holds; fork into an existing id; another run holds the session; rekey left
     sessions that runs held (run it again); steer --key K where the session holds K for
     another text (nothing stored); approve or reject of a call decided the other way (or
     approved with another --input), or not waiting
  4  store error: no driver, unreachable, refused, tables missing, file missing
  5  an unexpected error (a bug): a traceback follows, with passwords masked
migrate has its own: 0 up to date or migrated, 1 failed, 2 bad usage, 3 the schema is newer
than this release's.
Errors are one line on stderr, starting with "agentsessions: ".
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import enum
import functools
import importlib
import itertools
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

import attrs

from agentsessions import _format as fmt
from agentsessions import _migrate
from agentsessions.approvals import Decision
from agentsessions.codec import dumps, loads
from agentsessions.errors import AgentSessionsError, ConflictError, StoreError
from agentsessions.runs import RunState, SessionInfo, exists, utcnow
from agentsessions.session import ForkStore, MetadataStore, RunStore
from agentsessions.session import open as open_session
from agentsessions.stores.urls import StoreURL, mask_urls, open_url, parse_url

if TYPE_CHECKING:
    from agentsessions.crypto import Keyring

PROG = "agentsessions"
ENVIRONMENT = "AGENTSESSIONS_STORE"
KEYS_ENVIRONMENT = "AGENTSESSIONS_KEYS_FILE"


class Exit(enum.IntEnum):
    """The command's exit codes (the module docstring says when each is used)."""

    OK = 0
    NOT_FOUND = 1
    USAGE = 2
    CONFLICT = 3
    STORE = 4
    BUG = 5


class CliError(Exception):
    """An expected failure: its message is printed as one line, and ``code`` is the exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# --- Store URLs (the parser and the openers are agentsessions.stores.urls) -------------------


def parse_store_url(raw: str) -> StoreURL:
    """Read a store URL; a URL that cannot be read is a :class:`CliError` that shows only its scheme."""
    try:
        return parse_url(raw)
    except ValueError as error:
        raise CliError(Exit.USAGE, str(error)) from None


@contextlib.contextmanager
def open_store(url: StoreURL, *, create: bool = False) -> Iterator[RunStore]:
    """The store ``url`` names, over connections this command opens and closes.

    ``create``: a SQLite file that does not exist is made (only ``import`` asks for it).
    What fails while opening is the command's error, with the exit code it calls for.
    """
    with contextlib.ExitStack() as stack:
        try:
            store = stack.enter_context(open_url(url, create=create))
        except ValueError as error:
            raise CliError(Exit.USAGE, str(error)) from None
        except (StoreError, ImportError) as error:  # unreachable, no file, no driver
            if isinstance(error.__cause__, FileNotFoundError):  # no SQLite file: said in the command's words
                missing = error.__cause__.filename
                raise CliError(Exit.STORE, f"no SQLite file at {missing!r} (only import creates one)") from None
            raise CliError(Exit.STORE, str(error)) from None
        yield store


# --- The commands ----------------------------------------------------------------------------


@attrs.frozen
class Streams:
    """Where a command writes: ``out`` for results, ``err`` for one-line errors and notes."""

    out: IO[str]
    err: IO[str]

    def print(self, line: str = "") -> None:
        """One line of results."""
        self.out.write(line + "\n")


def _known(store: RunStore, session_id: str) -> SessionInfo:
    info = store.info(session_id)
    if not exists(info):
        raise CliError(Exit.NOT_FOUND, f"no session {session_id!r:.300}")
    return info


def _list(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    now = utcnow()
    before = now - args.older_than if args.older_than is not None else None
    infos = _listed(store, args.state, before, dict(args.metadata or ()))
    if args.limit is not None:
        infos = itertools.islice(infos, args.limit)
    if args.json:
        for info in infos:
            io.print(fmt.dump_json(fmt.info_json(info)))
    else:
        for line in fmt.table(infos, now):
            io.print(line)
    return Exit.OK


def _listed(
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


def _show(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    info = _known(store, args.id)
    steers = store.peek_steers(args.id)
    messages = store.messages(args.id)
    if args.json:
        io.print(fmt.dump_json(fmt.show_json(info, steers, dumps(messages))))
        return Exit.OK
    for line in [*fmt.header(info, steers, utcnow()), "", *fmt.transcript(messages)]:
        io.print(line)
    return Exit.OK


def _steer(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    _known(store, args.id)  # a steer for a mistyped id would wait forever for a run nobody starts
    io.print(store.add_steer(args.id, args.text, key=args.key).value)
    return Exit.OK


def _cancel(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    waiting = _known(store, args.id).state is RunState.WAITING
    if open_session(args.id, store).cancel():
        if waiting:
            io.print(f"the wait for approval of {args.id!r:.300} ended: its calls are answered as cancelled")
        else:
            io.print(f"cancel requested: the run holding {args.id!r:.300} stops before its next step")
        return Exit.OK
    state = store.info(args.id).state.value
    raise CliError(Exit.NOT_FOUND, f"no live run holds session {args.id!r:.300} (it is {state}): nothing to cancel")


def _approvals(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    _known(store, args.id)
    calls = open_session(args.id, store).approvals()
    lines = [fmt.dump_json(fmt.approval_json(call)) for call in calls] if args.json else fmt.approvals(calls)
    for line in lines:
        io.print(line)
    if not calls and not args.json:
        io.err.write(f"{PROG}: session {args.id!r:.300} waits for no approval\n")
    return Exit.OK


def _decide(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    _known(store, args.id)
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


def _fork(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    info = _known(store, args.id)
    if not isinstance(store, ForkStore):
        raise CliError(Exit.USAGE, f"this store ({type(store).__name__}) cannot fork sessions")
    store.fork(args.id, args.new, at=args.at)
    copied = info.length if args.at is None else args.at
    io.print(f"forked {args.id!r:.300} into {args.new!r:.300} ({fmt.messages(copied)})")
    return Exit.OK


def _delete(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    missing = []
    for session_id in args.ids:
        if store.delete(session_id):
            io.print(f"deleted {session_id!r:.300}")
        else:
            missing.append(session_id)
    for session_id in missing:
        io.err.write(f"{PROG}: no session {session_id!r:.300}\n")
    return Exit.NOT_FOUND if missing else Exit.OK


def _export(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    _known(store, args.id)
    fmt.write_utf8(io.out, dumps(store.messages(args.id)) + "\n")
    return Exit.OK


def _import(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    messages = args.transcript  # read by _run before the store was opened
    info = store.info(args.id)
    if exists(info) and not args.replace:
        raise CliError(Exit.CONFLICT, f"session {args.id!r:.300} exists; pass --replace to overwrite its transcript")
    if info.state is RunState.RUNNING:
        raise CliError(Exit.CONFLICT, f"session {args.id!r:.300} is held by a live run ({info.holder}); not replaced")
    store.save(args.id, messages)
    io.print(f"imported {fmt.messages(len(messages))} into {args.id!r:.300}")
    return Exit.OK


def _console(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    from agentsessions.console import _serve

    try:
        bind = _serve.parse_bind(args.bind)
    except ValueError as error:
        raise CliError(Exit.USAGE, str(error)) from None
    try:
        _serve.serve(store, bind, shown_store=_shown_store(args), out=io.out, err=io.err)
    except ImportError as error:
        raise CliError(Exit.STORE, str(error)) from None
    except OSError as error:  # the address is taken, or not this machine's
        raise CliError(Exit.USAGE, f"cannot listen on {args.bind}: {error.strerror or error}") from None
    return Exit.OK


def _no_store(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
    raise AssertionError(f"{args.command} opens no store")  # _run runs migrate itself


def _rekey(args: argparse.Namespace, store: RunStore, io: Streams) -> Exit:
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


def _keyring(args: argparse.Namespace) -> Keyring | None:
    """The keyring ``--keys`` (or the environment) names, or ``None``; read before the store is opened."""
    path = args.keys or os.environ.get(KEYS_ENVIRONMENT)
    if not path:
        return None
    try:
        from agentsessions.crypto import Keyring
    except ImportError as error:
        raise CliError(Exit.STORE, str(error)) from None
    unwrap = _function(args.unwrap) if args.unwrap else None
    try:
        return Keyring.from_file(path, unwrap=unwrap)
    except OSError as error:
        raise CliError(Exit.USAGE, f"cannot read the keys file {path!r}: {error.strerror or error}") from None
    except Exception as error:  # a malformed file, or the unwrap function failed
        raise CliError(Exit.USAGE, f"the keys file {path!r}: {type(error).__name__}: {error}") from None


def _function(spec: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module), name) if module and name else None
    except (ImportError, AttributeError) as error:
        raise CliError(Exit.USAGE, f"--unwrap {spec!r}: {error}") from None
    if not callable(found):
        raise CliError(Exit.USAGE, f"--unwrap takes MODULE:FUNCTION, a function (key_id, stored) -> key; got {spec!r}")
    function: Callable[..., Any] = found
    return function


def _shown_store(args: argparse.Namespace) -> str:
    """The store URL as it may be shown (its password masked)."""
    return parse_store_url(args.store or os.environ.get(ENVIRONMENT, "")).shown


def _read(name: str) -> bytes:
    if name == "-":
        stdin = sys.stdin
        return stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode("utf-8", "surrogatepass")
    try:
        return Path(name).read_bytes()
    except OSError as error:
        raise CliError(Exit.USAGE, f"cannot read {name!r}: {error.strerror or error}") from None


# --- Arguments ------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+)([wdhms])")
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def duration(text: str) -> datetime.timedelta:
    """``7d``, ``12h``, ``30m``, ``45s``, ``2w`` or a sum of them (``1h30m``) as a timedelta."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"a duration is like 7d, 12h, 30m, 45s, 2w or 1h30m, got {text!r}")
    return datetime.timedelta(seconds=sum(int(n) * _UNITS[u] for n, u in parts))


def _state(text: str) -> RunState:
    try:
        return RunState(text.lower())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of: {', '.join(s.value for s in RunState)}") from None


def _pair(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return name, value


def _count(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least {least}, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that a URL's password in its error messages is masked."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(Exit.USAGE, f"{self.prog}: error: {mask_urls(message)}\n")


def parser() -> argparse.ArgumentParser:
    """The command's argument parser, subcommands included."""
    doc = __doc__ or ""
    top = _Parser(
        prog=PROG,
        description="Look at, steer, stop, fork, delete, export and import agentsessions sessions in a store, "
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

    listing = command("list", _list, "Sessions, newest update first: a table, or JSON Lines with --json.")
    listing.add_argument("--state", type=_state, action="append", help="only this state (repeat for several)")
    listing.add_argument("--metadata", type=_pair, action="append", metavar="K=V", help="holding this pair (repeat)")
    listing.add_argument("--older-than", type=duration, metavar="DURATION", help="last saved before this long ago")
    listing.add_argument("--limit", type=functools.partial(_count, least=1), metavar="N", help="at most N sessions")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    show = command("show", _show, "A session: its state, holder, lease, steers waiting and transcript.")
    show.add_argument("id")
    show.add_argument("--json", action="store_true", help="one JSON object, the transcript in the dumps form")
    steer = command("steer", _steer, "Leave a steer; prints the state it met (running: the live run takes it).")
    steer.add_argument("id")
    steer.add_argument("text")
    steer.add_argument("--key", metavar="K", help="a key for this steer: run again with it, nothing more is stored")
    cancel = command("cancel", _cancel, "Ask the run holding a session to stop, or end its wait; exit 1 when neither.")
    cancel.add_argument("id")
    approvals = command("approvals", _approvals, "The tool calls a session waits for: decided or not.")
    approvals.add_argument("id")
    approvals.add_argument("--json", action="store_true", help="one JSON object per call")
    approve = command("approve", _decide, "Let a waiting call run; prints the state (waiting until a run goes on).")
    reject = command("reject", _decide, "Refuse a waiting call; the model reads the reason. Prints the state.")
    for decide in (approve, reject):
        decide.add_argument("id")
        decide.add_argument("call_id", metavar="CALL_ID")
        decide.add_argument("--by", default="", metavar="WHO", help="who decides (kept with the decision)")
    reject.add_argument("--reason", default="", metavar="TEXT", help="why: the model reads it")
    approve.add_argument("--input", metavar="JSON", help="run the call with this input (a JSON object) instead")
    fork = command("fork", _fork, "Copy a session's first N messages (all without --at) into a new one.")
    fork.add_argument("id")
    fork.add_argument("new")
    fork.add_argument("--at", type=functools.partial(_count, least=0), metavar="N")
    delete = command("delete", _delete, "Delete sessions; exit 1 if any did not exist (the others are deleted).")
    delete.add_argument("ids", nargs="+", metavar="ID")
    export = command("export", _export, "Write a session's transcript in the agentsessions.dumps form to stdout.")
    export.add_argument("id")
    imports = command("import", _import, "Store a transcript in the dumps form from FILE (- for stdin) as ID.")
    imports.add_argument("id")
    imports.add_argument("file", metavar="FILE")
    imports.add_argument("--replace", action="store_true", help="overwrite an existing session's transcript")
    migrate = command("migrate", _no_store, "Bring the store's schema to this release's version, under a lock.")
    migrate.add_argument("--plan", action="store_true", help="print the version found and the steps; apply nothing")
    migrate.add_argument("--sql", action="store_true", help="print only the steps' statements (for your own tool)")
    migrate.add_argument(
        "--wait", type=_seconds, default=60.0, metavar="SECONDS", help="for another migration's lock (default 60)"
    )
    console = command("console", _console, "Serve a web console over the store; prints the address to open.")
    console.add_argument(
        "--bind", default="127.0.0.1:8700", metavar="HOST:PORT", help="default 127.0.0.1:8700 (this machine only)"
    )
    rekeys = command("rekey", _rekey, "Re-encrypt every session with the current key of the --keys keyring.")
    rekeys.add_argument("--allow-plaintext", action="store_true", help="encrypt rows written before encryption too")
    rekeys.add_argument(
        "--batch", type=functools.partial(_count, least=1), default=100, metavar="N", help="sessions per batch"
    )
    rekeys.add_argument(
        "--lease", type=_seconds, default=10.0, metavar="SECONDS", help="each session's claim (default 10)"
    )
    return top


# --- Running it -----------------------------------------------------------------------------


class _MaskedLog(logging.Handler):
    """Pools' warnings as one masked line each on stderr; psycopg's own (such as "error ignored
    terminating <Pipeline>") only repeat, and only sometimes, an error the store reports."""

    def __init__(self, err: IO[str], url: StoreURL) -> None:
        super().__init__(logging.WARNING)
        self.err, self.url = err, url

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(("psycopg.pool", "pymongo")):
            self.err.write(f"{PROG}: {record.name}: {fmt.one_line(self.url.mask(record.getMessage()))}\n")


@contextlib.contextmanager
def _driver_logs(err: IO[str], url: StoreURL) -> Iterator[None]:
    handler = _MaskedLog(err, url)
    loggers = [logging.getLogger(name) for name in ("psycopg", "pymongo")]
    before = [logger.propagate for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, propagate in zip(loggers, before, strict=True):
            logger.removeHandler(handler)
            logger.propagate = propagate


class _Bug(Exception):
    """An unexpected error; ``text`` is its traceback, masked."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _code(error: BaseException) -> int:
    if isinstance(error, CliError):
        return error.code
    if isinstance(error, ConflictError):  # SessionBusyError too
        return Exit.CONFLICT
    if isinstance(error, StoreError):  # SchemaMissingError too
        return Exit.STORE
    if isinstance(error, ValueError):  # bad ids, FormatError, fork --at past the end
        return Exit.USAGE
    return Exit.STORE  # another AgentSessionsError


def _run(args: argparse.Namespace, io: Streams) -> int:
    raw = args.store or os.environ.get(ENVIRONMENT)
    if not raw:
        raise CliError(Exit.USAGE, f"no store: pass --store URL or set {ENVIRONMENT}")
    url = parse_store_url(raw)
    if args.command == "migrate":  # no store is opened: opening a SQLite store would migrate it
        try:
            return _migrate.migrate(args, url, io.out)
        except _migrate.MigrateError as error:
            raise CliError(error.code, url.mask(str(error))) from None
    args.keyring = _keyring(args)
    try:
        if args.command == "import":  # first: a file that is no transcript must not create a SQLite file
            args.transcript = loads(_read(args.file))
        with _driver_logs(io.err, url), open_store(url, create=args.command == "import") as store:
            if args.keyring is not None and args.command != "rekey":  # rekey reads the rows themselves
                from agentsessions.crypto import encrypted

                store = encrypted(store, args.keyring)
            result: int = args.run(args, store, io)
            return result
    except CliError as error:
        raise CliError(error.code, url.mask(str(error))) from None
    except (AgentSessionsError, ValueError) as error:
        where = f"{url.shown}: " if _code(error) == Exit.STORE else ""
        raise CliError(_code(error), url.mask(where + str(error))) from None
    except BrokenPipeError:
        raise
    except Exception:
        # A bug: the traceback helps, but a driver's text in it may echo the URL.
        raise _Bug(url.mask(traceback.format_exc())) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    io = Streams(sys.stdout, sys.stderr)
    try:
        args = parser().parse_args(argv)
    except SystemExit as done:  # --help, or a usage error argparse has printed
        return done.code if isinstance(done.code, int) else Exit.USAGE
    try:
        return int(_run(args, io))
    except CliError as error:
        io.err.write(f"{PROG}: {fmt.one_line(mask_urls(str(error)))}\n")
        return int(error.code)
    except BrokenPipeError:
        # `agentsessions list | head`: the reader left; what it wanted it got.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(Exit.OK)
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        io.err.write(error.text if isinstance(error, _Bug) else mask_urls(traceback.format_exc()))
        io.err.write(f"{PROG}: unexpected error (a bug; please report it with the traceback above)\n")
        return int(Exit.BUG)


if __name__ == "__main__":
    sys.exit(main())
