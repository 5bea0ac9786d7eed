"""Running the command: opening the store, running the subcommand, turning errors into exit codes."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import IO

from agentsessions import _format as fmt
from agentsessions import _migrate
from agentsessions.cli._base import (
    ENVIRONMENT,
    PROG,
    CliError,
    Exit,
    Streams,
    keyring,
    open_store,
    parse_store_url,
    read_input,
)
from agentsessions.cli._parser import parser
from agentsessions.codec import loads
from agentsessions.errors import AgentSessionsError, ConflictError, StoreError
from agentsessions.stores.urls import StoreURL, mask_urls


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
    args.keyring = keyring(args)
    try:
        if args.command == "import":  # first: a file that is no transcript must not create a SQLite file
            args.transcript = loads(read_input(args.file))
        with _driver_logs(io.err, url), open_store(url, create=args.command == "import") as store:
            # rekey reads the rows themselves; prune reads only records, which are kept in clear.
            if args.keyring is not None and args.command not in ("rekey", "prune"):
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
