"""The console served by waitress on a free port of 127.0.0.1, for the HTTP and the browser tests."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from waitress.server import create_server

from agentsessions import console
from agentsessions.session import RunStore
from agentsessions.stores import sqlite

TOKEN = "console-test-token-" + "x" * 24


@contextlib.contextmanager
def served(store: RunStore, *, token: str = TOKEN, prefix: str = "") -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT`` plus ``prefix``) of the console over ``store``, while inside."""
    options: dict[str, Any] = {"url_prefix": prefix} if prefix else {}
    server: Any = create_server(console.app(store, token=token), host="127.0.0.1", port=0, threads=4, **options)
    thread = threading.Thread(target=server.run, name="console-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}{prefix}"
    finally:
        # The workers first: one still answering would write to the closed loop's trigger.
        server.task_dispatcher.shutdown()
        # Sockets are closed by the loop's own thread (a thunk the trigger runs there): closed
        # from here, the loop could be inside select() on them and fail with EBADF.
        server.trigger.pull_trigger(lambda: server.asyncore.close_all(server._map))
        thread.join(10)
        assert not thread.is_alive(), "the console server did not stop"


@contextlib.contextmanager
def sqlite_store(folder: Path) -> Iterator[sqlite.SQLiteStore]:
    """A new SQLite store in ``folder``, closed on the way out."""
    opened = sqlite.open(folder / "console.db")
    try:
        yield opened
    finally:
        opened.close()
