"""How long the console takes to serve its two heavy pages, over HTTP from waitress, on SQLite.

    python -m benchmarks.console_pages [--rounds 20]

The list of 50 sessions (one page, with the counts) and one session of 2,000 messages
(tool calls, results, text), each fetched ``rounds`` times through a real socket; the
median and the slowest are printed against the goal of 0.1 s. Also the poll the page's
script makes every second when nothing changed, and the same two pages called in-process
(no HTTP), to show what the server and the socket add.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests
from waitress.server import create_server

from agentsessions import console
from agentsessions.messages import Content, Message, Role
from agentsessions.stores import sqlite

TOKEN = "benchmark-token-0123456789"
GOAL = 0.1


def transcript(n: int) -> list[Message]:
    """``n`` messages in the shape of a tool-using run: question, call, result, answer."""
    messages: list[Message] = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            messages.append(Message.user(f"question {i}: what is the status of order A-{i}?"))
        elif kind == 1:
            call = Content.tool_use(f"c{i}", "look_up", json.dumps({"order": f"A-{i}"}))
            messages.append(Message(Role.ASSISTANT, (Content.thinking(f"look up A-{i}"), call)))
        elif kind == 2:
            result = json.dumps({"order": f"A-{i}", "status": "shipped", "carrier": "DHL", "eta": "2026-12-06"})
            messages.append(Message(Role.USER, (Content.tool_result(f"c{i - 1}", result),)))
        else:
            messages.append(Message.assistant(f"Order A-{i} has shipped with DHL and arrives on 6 December. " * 2))
    return messages


def timed(fetch: Callable[[], int], rounds: int) -> tuple[float, float]:
    """The median and the slowest of ``rounds`` calls (after one warm-up)."""
    fetch()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        size = fetch()
        times.append(time.perf_counter() - start)
        assert size > 0
    return statistics.median(times), max(times)


def in_process(app: Any, path: str, query: str) -> Callable[[], int]:
    """A WSGI call of ``app``, with no server in between."""

    def call() -> int:
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SCRIPT_NAME": "",
            "HTTP_AUTHORIZATION": f"Bearer {TOKEN}",
            "wsgi.input": io.BytesIO(),
            "wsgi.url_scheme": "http",
        }

        def start_response(status: str, headers: list[tuple[str, str]]) -> None:
            assert status.startswith("200"), status  # a refusal would be quick, and measure nothing

        return sum(len(part) for part in app(environ, start_response))

    return call


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as folder:
        store = sqlite.open(Path(folder) / "console.db")
        for i in range(60):
            store.save(f"session-{i:03}", transcript(8))
        store.save("long", transcript(2000))
        app = console.app(store, token=TOKEN)
        server: Any = create_server(app, host="127.0.0.1", port=0, threads=4)
        threading.Thread(target=server.run, daemon=True).start()
        base = f"http://127.0.0.1:{server.effective_port}"
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {TOKEN}"

        def over_http(url: str) -> Callable[[], int]:
            def fetch() -> int:
                response = http.get(base + url, timeout=10)
                response.raise_for_status()
                return len(response.content)

            return fetch

        version = f"2000@{store.info('long').updated_at.isoformat()}"  # type: ignore[union-attr]
        cases = [
            ("list, 50 of 61 sessions, with counts", over_http("/"), in_process(app, "/", "")),
            ("session of 2,000 messages", over_http("/session?id=long"), in_process(app, "/session", "id=long")),
            (
                "poll, nothing new (each second)",
                over_http(f"/session/poll?id=long&from=2000&v={quote(version)}"),
                in_process(app, "/session/poll", f"id=long&from=2000&v={quote(version)}"),
            ),
        ]
        print(f"== console pages (SQLite, waitress; median and slowest of {rounds}; goal {GOAL * 1000:.0f} ms)")
        for name, served, direct in cases:
            median, slowest = timed(served, rounds)
            inside, _ = timed(direct, rounds)
            print(
                f"{name:<40} {median * 1000:7.1f} ms  (slowest {slowest * 1000:6.1f} ms, "
                f"in-process {inside * 1000:6.1f} ms)  {median / GOAL:.2f} of the goal"
            )
        size = len(http.get(base + "/session?id=long", timeout=10).content)
        print(f"the 2,000-message page is {size / 1024:.0f} KiB of HTML")
        server.task_dispatcher.shutdown()
        server.close()
        store.close()


if __name__ == "__main__":
    main()
