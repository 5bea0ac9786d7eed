"""The README's pictures of the console: ``docs/console-list.png`` and ``docs/console-session.png``.

    python -m benchmarks.console_screenshots [--out docs]

Fills a SQLite store by real runs of a scripted model (one still live, waiting in its
model call, with a steer queued), serves the console with waitress on a free port, and
photographs two pages in headless chromium (Debian's ``chromium`` and ``chromium-driver``).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from waitress.server import create_server

import agentsessions as agent
from agentsessions import console
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.messages import Content, Message, Role
from agentsessions.stores import sqlite

TOKEN = "screenshot-token-0123456789"


@agent.tool
def look_up(order: str) -> str:
    """Look an order up.

    Args:
        order: the order number.
    """
    return json.dumps({"order": order, "status": "shipped", "carrier": "DHL", "eta": "2026-12-06"})


def _call(call_id: str, order: str) -> Message:
    return Message(Role.ASSISTANT, (Content.tool_use(call_id, "look_up", json.dumps({"order": order})),))


def _png() -> str:
    """A small picture (a 48x32 gradient) as base64 PNG, made here rather than shipped."""
    rows = b"".join(b"\x00" + bytes(v for x in range(48) for v in (x * 5, y * 7, 200)) for y in range(32))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    header = (48).to_bytes(4, "big") + (32).to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


def fill(store: sqlite.SQLiteStore, gate: threading.Event) -> agent.Run:
    """Sessions in several states; returns the live run, which waits on ``gate``."""
    runner = agent.Runner(replica="web-2")
    for n in range(8):
        spec = agent.Spec(session=agent.open(f"order-{4700 + n}", store), tools=[look_up])
        replies = [_call("c1", f"A-{4700 + n}"), Message.assistant(f"Order A-{4700 + n} has shipped.")]
        runner.run(spec, [Message.user(f"Where is my order A-{4700 + n}?")], ScriptedEndpoint(replies))
    failing = agent.Spec(session=agent.open("order-4690", store), tools=[look_up])
    # The model "fails": the session is left FAILED, as a provider's outage would leave it.
    with contextlib.suppress(agent.AgentSessionsError):
        runner.run(failing, [Message.user("Cancel order A-4690")], ScriptedEndpoint([]))
    thought = Message(
        Role.ASSISTANT,
        (
            Content.thinking("The customer sent a photo of the label; the order number is on it.", "sig"),
            Content.tool_use("c1", "look_up", '{"order": "A-4711"}'),
        ),
    )

    def waits(_: agent.ModelRequest) -> Message:
        gate.wait(120)
        return Message.assistant("It arrives on Saturday.")

    live = agent.Spec(session=agent.open("order-4711", store), tools=[look_up], lease=60)
    first = Message.user(
        "Where is this parcel? <script>alert('hi')</script>", Content.image(media_type="image/png", data=_png())
    )
    return agent.Runner(replica="web-1").start(
        live, [first], ScriptedEndpoint([thought, waits, Message.assistant("DHL.")])
    )


def _until(probe: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError("the live run did not save its first step")
        time.sleep(0.02)


def chromium() -> Any:
    """Headless chromium through Debian's chromedriver."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,860"):
        options.add_argument(argument)
    return webdriver.Chrome(service=webdriver.ChromeService("/usr/bin/chromedriver"), options=options)


def main() -> None:
    """Write the two screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"))
    out = parser.parse_args().out
    gate = threading.Event()
    with tempfile.TemporaryDirectory() as folder:
        store = sqlite.open(Path(folder) / "console.db")
        run = fill(store, gate)
        _until(lambda: store.info("order-4711").length >= 3)  # the live run's tool call is saved
        store.add_steer("order-4711", "Also tell them the carrier.")
        server: Any = create_server(console.app(store, token=TOKEN), host="127.0.0.1", port=0)
        threading.Thread(target=server.run, daemon=True).start()
        base = f"http://127.0.0.1:{server.effective_port}"
        browser = chromium()
        try:
            browser.get(f"{base}/?token={TOKEN}")
            WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.CSS_SELECTOR, "table.sessions tbody tr"))
            browser.save_screenshot(str(out / "console-list.png"))
            browser.get(f"{base}/session?id=order-4711")
            WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.ID, "m2"))
            browser.find_element(By.CSS_SELECTOR, "details.thinking").click()  # unfolded, for the picture
            browser.save_screenshot(str(out / "console-session.png"))
        finally:
            browser.quit()
            gate.set()
            run.wait(30)
            server.task_dispatcher.shutdown()
            server.close()
            store.close()
    print(f"wrote {out / 'console-list.png'} and {out / 'console-session.png'}")


if __name__ == "__main__":
    main()
