"""The console served by waitress on a free port of 127.0.0.1, for the HTTP and the browser tests."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from waitress.server import create_server

import agentsessions as agent
from agentsessions import console
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.messages import Content, Message, Role
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


class Waiting:
    """A session its run left ``WAITING`` on two calls of ``delete``, a tool that needs approval.

    The model called ``delete`` on ``first`` (call ``c1``) and on ``second`` (``c2``);
    ``ran`` lists the paths the tool deleted since, and :meth:`resume` goes on from the wait.
    """

    def __init__(self, store: RunStore, session_id: str, first: str = "a.txt", second: str = "b.txt") -> None:
        self.ran: list[str] = []

        @agent.tool(needs_approval=True)
        def delete(path: str) -> str:
            """Delete a file."""
            self.ran.append(path)
            return f"deleted {path}"

        self.spec = agent.Spec(session=agent.open(session_id, store), tools=[delete])
        asked = Message(
            Role.ASSISTANT,
            [Content.tool_use(f"c{i}", "delete", json.dumps({"path": p})) for i, p in enumerate((first, second), 1)],
        )
        result = agent.Runner().run(self.spec, [Message.user("tidy up")], ScriptedEndpoint([asked]))
        assert result.stop_reason == agent.StopReason.APPROVAL_REQUIRED, result.stop_reason

    def resume(self) -> list[agent.ModelRequest]:
        """Run on from the decided wait; the requests the model read (it answers ``done``)."""
        read: list[agent.ModelRequest] = []

        def answer(request: agent.ModelRequest) -> Message:
            read.append(request)
            return Message.assistant("done")

        result = agent.Runner().run(self.spec, agent.Resume(), ScriptedEndpoint([answer]))
        assert result.stop_reason == "end_turn", result.stop_reason
        return read
