"""The command's shared parts: exit codes, its error, where it writes, opening the store, reading the keyring."""

from __future__ import annotations

import argparse
import contextlib
import enum
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import attrs

from agentsessions.errors import StoreError
from agentsessions.runs import SessionInfo, exists
from agentsessions.session import RunStore
from agentsessions.stores.urls import StoreURL, open_url, parse_url

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


def known(store: RunStore, session_id: str) -> SessionInfo:
    info = store.info(session_id)
    if not exists(info):
        raise CliError(Exit.NOT_FOUND, f"no session {session_id!r:.300}")
    return info


def keyring(args: argparse.Namespace) -> Keyring | None:
    """The keyring ``--keys`` (or the environment) names, or ``None``; read before the store is opened."""
    path = args.keys or os.environ.get(KEYS_ENVIRONMENT)
    if not path:
        return None
    try:
        from agentsessions.crypto import Keyring
    except ImportError as error:
        raise CliError(Exit.STORE, str(error)) from None
    unwrap = function(args.unwrap) if args.unwrap else None
    try:
        return Keyring.from_file(path, unwrap=unwrap)
    except OSError as error:
        raise CliError(Exit.USAGE, f"cannot read the keys file {path!r}: {error.strerror or error}") from None
    except Exception as error:  # a malformed file, or the unwrap function failed
        raise CliError(Exit.USAGE, f"the keys file {path!r}: {type(error).__name__}: {error}") from None


def function(spec: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module), name) if module and name else None
    except (ImportError, AttributeError) as error:
        raise CliError(Exit.USAGE, f"--unwrap {spec!r}: {error}") from None
    if not callable(found):
        raise CliError(Exit.USAGE, f"--unwrap takes MODULE:FUNCTION, a function (key_id, stored) -> key; got {spec!r}")
    function: Callable[..., Any] = found
    return function


def shown_store(args: argparse.Namespace) -> str:
    """The store URL as it may be shown (its password masked)."""
    return parse_store_url(args.store or os.environ.get(ENVIRONMENT, "")).shown


def read_input(name: str) -> bytes:
    if name == "-":
        stdin = sys.stdin
        return stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode("utf-8", "surrogatepass")
    try:
        return Path(name).read_bytes()
    except OSError as error:
        raise CliError(Exit.USAGE, f"cannot read {name!r}: {error.strerror or error}") from None
