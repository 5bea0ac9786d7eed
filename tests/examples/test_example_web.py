"""examples/flask and examples/django: two real server processes over one PostgreSQL schema, and one conversation.

Each example runs the same story (the Django project is the Flask service as Django views,
its store from ``DATABASES`` through ``agentsessions.contrib.django.store()``, its tables
from ``manage.py migrate``):

Replica A runs the conversation; a steer posted to B (which holds no run) lands in A's
transcript; B cancels A's run; a second start on B while A runs is refused with 409; A is
killed with SIGKILL while it holds a run, and B takes the conversation over once the lease
lapses, with every steer answered; B stops gracefully on SIGTERM, releasing its run.

The model is the example's own offline one: its n-th reply waits for the file
``gates/<id>.<n>``, so the test says when the model answers and never sleeps on a guess.
``pytest -s`` prints the timeline: which replica did what, when.
"""

from __future__ import annotations

import json
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentsessions as agent
from tests.support.backends import open_postgres
from tests.support.paths import ROOT
from tests.support.servers import POSTGRES_DSN, require_server, skip_without
from tests.support.waiting import wait_for

pytestmark = pytest.mark.server  # PostgreSQL

APPS = {"flask": ROOT / "examples" / "flask" / "app.py", "django": ROOT / "examples" / "django" / "service.py"}
CONVERSATION = "support-1"
LEASE = 2.0  # short, so the takeover comes soon; three heartbeats long, so a busy CI machine keeps it
# No proxy: the servers are on loopback, whatever the environment says.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Timeline:
    """What each replica did, and when, in milliseconds since the test began."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.lines: list[str] = []

    def note(self, who: str, what: str) -> None:
        self.lines.append(f"{(time.monotonic() - self.start) * 1000:7.0f} ms  {who:<4} {what}")

    def show(self) -> str:
        return "\n".join(["timeline:", *self.lines])


class Replica:
    """One server process of the example, and what it answers over HTTP."""

    def __init__(
        self, app: Path, name: str, schema: str, gates: Path, logs: Path, timeline: Timeline, *options: str
    ) -> None:
        self.name, self.schema, self.timeline = name, schema, timeline
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/conversations/{CONVERSATION}"
        self.log = logs / f"replica-{name.lower()}.log"
        command = [sys.executable, str(app), "--dsn", POSTGRES_DSN, "--schema", schema, "--port", str(self.port)]
        command += ["--replica", self.replica, "--lease", str(LEASE), "--gates", str(gates), *options]
        with self.log.open("w") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)

    @property
    def replica(self) -> str:
        return f"replica-{self.name.lower()}"

    def call(
        self, method: str, path: str = "", body: dict[str, str] | None = None, key: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **({"Idempotency-Key": key} if key is not None else {})}
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with HTTP.open(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def post(self, path: str, text: str | None = None, key: str | None = None) -> tuple[int, dict[str, Any]]:
        status, answer = self.call("POST", path, None if text is None else {"text": text}, key)
        shown = ("" if text is None else f" {text!r}") + ("" if key is None else f" (Idempotency-Key {key})")
        self.timeline.note(self.name, f"POST {path}{shown} -> {status} {_summary(answer)}")
        return status, answer

    def get(self) -> dict[str, Any]:
        status, answer = self.call("GET")
        assert status == 200, answer
        return answer

    def answering(self) -> bool:
        try:
            self.get()
        except (urllib.error.URLError, ConnectionError):
            assert self.process.poll() is None, f"replica {self.name} exited:\n{self.log.read_text()}"
            return False
        return True

    def wait_state(self, state: str, holder: str, asked: str | None = None) -> dict[str, Any]:
        """Poll this replica's GET until the conversation is in ``state`` held (or last held) by ``holder``.

        With ``asked``, also until the newest user text is ``asked``: the run has saved the
        message, so its model is waiting for its gate.
        """
        found = wait_for(f"{state} held by {holder}", lambda: _matching(self.get(), state, holder, asked))
        waiting = f", its model asked {asked!r}" if asked else ""
        self.timeline.note(self.name, f"GET  sees {state}, holder {holder}, {len(found['messages'])} messages{waiting}")
        return dict(found)


def _matching(answer: dict[str, Any], state: str, holder: str, asked: str | None = None) -> dict[str, Any] | None:
    if (answer["state"], answer["holder"]) != (state, holder):
        return None
    return answer if asked is None or _user_texts(answer)[-1:] == [asked] else None


def _summary(answer: dict[str, Any]) -> str:
    keys = ("delivered", "state", "started", "cancelled", "holder", "error")
    return json.dumps({k: answer[k] for k in keys if k in answer})


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _user_texts(answer: dict[str, Any]) -> list[str]:
    return [b["text"] for m in answer["messages"] if m["role"] == "user" for b in m["content"] if b["type"] == "text"]


@pytest.fixture(params=sorted(APPS))
def example(request: pytest.FixtureRequest) -> str:
    """Which example serves: ``"flask"`` or ``"django"``."""
    skip_without("psycopg", request.param, extra="postgres")
    return str(request.param)


@pytest.fixture
def schema(example: str) -> Iterator[str]:
    """A fresh schema, dropped at the end; with the store's tables for Flask (Django's migrate makes its own)."""
    import psycopg

    from agentsessions.stores import postgres

    admin = require_server("PostgreSQL", lambda: psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5))
    name = f"agentsessions_{example}_{secrets.token_hex(4)}"
    with admin:
        admin.execute(f"CREATE SCHEMA {name}")
        try:
            if example == "flask":
                admin.execute(f"SET search_path = {name}")
                admin.execute(postgres.SCHEMA)
            yield name
        finally:
            admin.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture
def replicas(example: str, schema: str, tmp_path: Path) -> Iterator[tuple[Replica, Replica, Path, Timeline]]:
    """Replicas A and B serving, each answering HTTP; both are stopped at the end whatever happened.

    Django's A runs ``manage.py migrate`` first and answers before B starts, as a deploy migrates once.
    """
    gates = tmp_path / "gates"
    gates.mkdir()
    timeline = Timeline()
    started: list[Replica] = []
    try:
        for name in "AB":
            options = ("--migrate",) if example == "django" and name == "A" else ()
            replica = Replica(APPS[example], name, schema, gates, tmp_path, timeline, *options)
            started.append(replica)
            wait_for(f"replica {replica.name} to answer HTTP", replica.answering, seconds=30, every=0.05)
            timeline.note(replica.name, f"{example} answers HTTP on port {replica.port} (pid {replica.process.pid})")
        a, b = started
        yield a, b, gates, timeline
    finally:
        print(timeline.show())
        for replica in started:
            if replica.process.poll() is None:
                replica.process.kill()
                replica.process.wait(10)


class Gates:
    """The model's replies in the conversation, let through one at a time."""

    def __init__(self, directory: Path, timeline: Timeline) -> None:
        self.directory, self.timeline, self.opened = directory, timeline, 0

    def open_next(self, why: str) -> None:
        self.opened += 1
        (self.directory / f"{CONVERSATION}.{self.opened}").touch()
        self.timeline.note("test", f"model reply {self.opened} may come ({why})")


def test_two_replicas_steer_cancel_refuse_and_take_over(replicas: tuple[Replica, Replica, Path, Timeline]) -> None:
    a, b, directory, timeline = replicas
    gates = Gates(directory, timeline)
    steers = _steer_lands_across_replicas(a, b, gates)
    _cancel_from_the_other_replica(a, b, gates)
    steers += _takeover_after_sigkill(a, b, gates)
    steers += _steer_to_the_holder_too_late(b, gates)
    final = b.get()
    texts = _user_texts(final)
    assert all(texts.count(steer) == 1 for steer in steers), texts  # no steer lost, none doubled
    assert final["pending_steers"] == 0
    _graceful_stop(b, gates, timeline)


def _steer_lands_across_replicas(a: Replica, b: Replica, gates: Gates) -> list[str]:
    status, started = a.post("/messages", "my invoice is wrong")
    assert (status, started["replica"], started["started"]) == (202, a.replica, True)
    b.wait_state("running", a.replica, "my invoice is wrong")
    status, steered = b.post("/steer", "I am on the Pro plan", key="req-pro")
    assert status == 202
    assert (steered["delivered"], steered["state"], steered["started"]) == ("store", "running", False)
    # The client lost B's answer and sends the request again; the balancer picks A this time.
    status, again = a.post("/steer", "I am on the Pro plan", key="req-pro")
    assert (status, again["state"], again["started"]) == (202, "running", False)
    status, reused = b.post("/steer", "I am on the Free plan", key="req-pro")
    assert status == 409 and "another text" in reused["error"]
    gates.open_next("A's model calls look_up")
    landed = wait_for("the steer in the transcript", lambda: "I am on the Pro plan" in _user_texts(a.get()))
    assert landed
    seen = b.get()
    assert (seen["state"], seen["holder"], seen["pending_steers"]) == ("running", a.replica, 0)
    b.timeline.note("B", "GET  sees B's steer in A's transcript, beside the tool result")
    gates.open_next("A's model answers")
    done = b.wait_state("finished", a.replica)
    assert done["messages"][-1]["text"] == "heard: my invoice is wrong | I am on the Pro plan"
    return ["I am on the Pro plan"]


def _cancel_from_the_other_replica(a: Replica, b: Replica, gates: Gates) -> None:
    assert a.post("/messages", "and the refund?")[0] == 202
    b.wait_state("running", a.replica, "and the refund?")
    status, cancelled = b.post("/cancel")
    assert (status, cancelled["cancelled"]) == (200, True)
    _renewed_twice(b)  # A's heartbeat brought the cancel to A's run
    gates.open_next("A's model calls look_up, which the cancel stops")
    done = b.wait_state("cancelled", a.replica)
    last = done["messages"][-1]["content"]
    assert [(c["type"], c["is_error"]) for c in last] == [("tool_result", True)]
    assert "cancelled" in last[0]["text"]


def _renewed_twice(b: Replica) -> None:
    """Wait until the holder's lease was renewed twice since now: the first renewal began after
    this call, and the holder's heartbeat has taken in what it learned before making the second."""
    seen = [b.get()["lease_expires_at"]]

    def twice() -> bool:
        now = b.get()["lease_expires_at"]
        if now != seen[-1]:
            seen.append(now)
        return len(seen) >= 3

    wait_for("two renewals of the holder's lease", twice)
    b.timeline.note("B", "GET  sees A's lease renewed twice since the cancel: A's heartbeat has seen it")


def _takeover_after_sigkill(a: Replica, b: Replica, gates: Gates) -> list[str]:
    assert a.post("/messages", "when will it arrive?")[0] == 202
    b.wait_state("running", a.replica, "when will it arrive?")
    status, refused = b.post("/messages", "hello?")
    assert (status, refused["holder"]) == (409, a.replica)
    assert a.post("/messages", "hello again?")[0] == 409  # the holder refuses a second run too
    status, steered = b.post("/steer", "also check March")
    assert (status, steered["state"], steered["started"]) == (202, "running", False)  # A's run is to take it
    a.process.send_signal(signal.SIGKILL)
    assert a.process.wait(10) == -signal.SIGKILL
    a.timeline.note("A", "killed with SIGKILL while holding the run; 'also check March' waits in the store")
    stalled = b.wait_state("stalled", a.replica)
    assert stalled["pending_steers"] == 1
    status, steered = b.post("/steer", "and April")
    # Runner.send: the lease lapsed, so B claims the session and its run takes both steers.
    assert (status, steered["delivered"], steered["state"], steered["started"]) == (202, "new run", "running", True)
    b.wait_state("running", b.replica)
    gates.open_next("B's model answers the resumed turn")
    done = b.wait_state("finished", b.replica)
    answer = "heard: and the refund? | when will it arrive? | also check March | and April"
    assert done["messages"][-1]["text"] == answer
    assert len(done["messages"]) == len(stalled["messages"]) + 1  # resumed where A stopped: one answer more
    return ["also check March", "and April"]


def _steer_to_the_holder_too_late(b: Replica, gates: Gates) -> list[str]:
    """``Run.steer`` during the run's last model request: the run ends without it, and B answers it in a new run."""
    assert b.post("/messages", "one more thing")[0] == 202
    gates.open_next("B's model calls look_up")
    wait_for("the tool result saved", lambda: b.get()["messages"][-1]["content"][0]["type"] == "tool_result")
    status, steered = b.post("/steer", "and May")
    assert (status, steered["delivered"], steered["started"]) == (202, "run", False)  # B holds the run: Run.steer
    gates.open_next("B's model answers, without the steer it got too late")
    b.wait_state("running", b.replica, "and May")  # a new run, for the steer the last one got too late
    gates.open_next("B's model calls look_up")
    gates.open_next("B's model answers the steer")
    done = b.wait_state("finished", b.replica)
    assert [m["text"] for m in done["messages"][-7:] if m["role"] == "assistant"] == [
        "",  # the look_up call
        "heard: one more thing",
        "",
        "heard: and May",
    ]
    return ["and May"]


def _graceful_stop(b: Replica, gates: Gates, timeline: Timeline) -> None:
    assert b.post("/messages", "last one")[0] == 202
    b.wait_state("running", b.replica, "last one")
    b.process.send_signal(signal.SIGTERM)
    timeline.note("B", "sent SIGTERM while holding a run")
    wait_for("B to begin its shutdown", lambda: "stopping:" in b.log.read_text())
    gates.open_next("B's model calls look_up, which the shutdown stops")
    assert b.process.wait(30) == 0, b.log.read_text()
    timeline.note("B", "exited 0 after Runner.shutdown")
    with open_postgres(POSTGRES_DSN, b.schema) as store:
        info = store.info(CONVERSATION)
    assert (info.state, info.holder) == (agent.RunState.CANCELLED, b.replica)  # released, not left to stall
    timeline.note("test", f"store: {info.state.value}, holder {info.holder}, no lease left to lapse")
