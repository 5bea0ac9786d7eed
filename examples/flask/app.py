"""A Flask service over agentsessions: any replica serves any conversation, whoever runs it.

    python examples/flask/app.py --dsn "host=127.0.0.1 user=postgres dbname=test" --schema public \\
        --migrate --port 8001 --replica web-1 [--lease 30] [--gates DIR]

Routes (JSON in, JSON out):

- ``POST /conversations/<id>/messages`` ``{"text": ...}``: a new user message; starts a run
  on a worker thread with ``Resume(text)``: the stored transcript plus the message. 409, naming the holder,
  while a run (in any replica) holds the conversation.
- ``POST /conversations/<id>/steer`` ``{"text": ...}``: ``Runner.send``: ``Run.steer`` when this
  process holds the run; through the store when another replica does; else a new run, so
  every steer gets one answer.
- ``POST /conversations/<id>/cancel``: ``session.cancel()``, from any replica.
- ``GET /conversations/<id>``: the transcript and the session's record (state, holder, lease).

The model is offline and scripted (:class:`EchoModel`): it looks the conversation up with a
tool, then answers by echoing every user text since its last answer, steers included. With
``--gates DIR`` its n-th reply in a conversation waits until the file ``DIR/<id>.<n>``
exists, so a test decides when the model answers.

Stopping. A run is held by this process until it ends: stop it gracefully and its runs are
cancelled, saved and released (state ``CANCELLED``); kill it and their leases lapse, and
any replica takes them over (a steer or a message to it, or ``examples/resumer.py``). Here
SIGTERM (and Ctrl-C) stop the HTTP server and then call ``Runner.shutdown``. Under gunicorn,
put the same call in the ``worker_exit`` hook of ``gunicorn.conf.py``::

    def worker_exit(server, worker):
        # worker.wsgi is the app this worker loaded; its runs must save and release now,
        # or their sessions look stalled for a whole lease.
        worker.wsgi.extensions["conversations"].runner.shutdown(timeout=10)

with ``graceful_timeout`` above that timeout. Run threads are daemons: they never keep a
process alive, and a run that has not saved by the time the process exits is one that
crashed (its lease lapses; another replica resumes it).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from flask import Flask, request
from flask.typing import ResponseReturnValue
from psycopg_pool import ConnectionPool
from werkzeug.serving import make_server

import agentsessions as agent
from agentsessions.events import Event, RunFinished
from agentsessions.stores import postgres

EndpointFactory = Callable[[str], agent.Endpoint]
"""Makes the model for one conversation, given its id."""

log = logging.getLogger("conversations")

GATE_TIMEOUT = 60.0
"""Seconds :class:`EchoModel` waits for a gate before it fails the request, as a provider's timeout would."""


@agent.tool
def look_up(query: str) -> str:
    """Look the customer's question up in the notes.

    Args:
        query: what to look for.
    """
    return f"no notes about {query!r}"


class EchoModel:
    """The offline model: calls ``look_up`` on a new question, then answers with what it heard.

    Its answer echoes every user text since its last answer: the message and the steers
    that joined it. With ``gates``, its n-th reply in the conversation (n counts the
    assistant messages the request carries, plus one) waits until ``gates/<id>.<n>`` exists.
    """

    def __init__(self, conversation_id: str, gates: Path | None = None) -> None:
        self.conversation_id = conversation_id
        self.gates = gates

    def complete(self, request: agent.ModelRequest) -> agent.ModelResponse:
        """Wait for the reply's gate, if any, then call the tool or answer."""
        replies = sum(m.role is agent.Role.ASSISTANT for m in request.messages)
        self._wait_for_gate(replies + 1)
        last = request.messages[-1]
        if not any(c.type is agent.ContentType.TOOL_RESULT for c in last.content):
            call = agent.Content.tool_use(f"call-{replies + 1}", "look_up", f'{{"query": "{len(last.text)} chars"}}')
            return agent.ModelResponse(agent.Message(agent.Role.ASSISTANT, [call]), stop_reason="tool_use")
        return agent.ModelResponse(agent.Message.assistant("heard: " + " | ".join(_heard(request.messages))))

    def _wait_for_gate(self, reply: int) -> None:
        if self.gates is None:
            return
        gate = self.gates / f"{quote(self.conversation_id, safe='')}.{reply}"
        deadline = time.monotonic() + GATE_TIMEOUT
        while not gate.exists():  # a file, so the test and every replica's model can see it
            if time.monotonic() > deadline:
                raise agent.EndpointError(f"gate {gate} did not open within {GATE_TIMEOUT} s")
            time.sleep(0.01)


def _heard(messages: tuple[agent.Message, ...]) -> list[str]:
    """The user texts since the model's last answer (an assistant message calling no tool)."""
    heard: list[str] = []
    for message in reversed(messages):
        if message.role is agent.Role.ASSISTANT and not message.tool_uses:
            break
        if message.role is agent.Role.USER:
            texts = [c.text for c in message.content if c.type is agent.ContentType.TEXT]
            heard[:0] = texts
    return heard


class _Entry:
    """A run this process started, as its own events listener sees it."""

    def __init__(self) -> None:
        self.run: agent.Run | None = None
        self.ended = False


class Conversations:
    """What the routes share: the store, this replica's runner, the model, and the runs this process holds."""

    def __init__(self, store: agent.RunStore, endpoint_factory: EndpointFactory, runner: agent.Runner, lease: float):
        self.store = store
        self.endpoint_factory = endpoint_factory
        self.runner = runner
        self.lease = lease
        self._runs: dict[str, agent.Run] = {}
        self._lock = threading.Lock()

    def session(self, conversation_id: str) -> agent.StoreSession:
        """The conversation's session (``InvalidSessionIdError``, a ``ValueError``, for a bad id)."""
        return agent.open(conversation_id, self.store)

    def held(self, conversation_id: str) -> agent.Run | None:
        """The run of this conversation that this process holds, if any."""
        with self._lock:
            run = self._runs.get(conversation_id)
        return run if run is not None and not run.done else None

    def start(self, conversation_id: str, text: str) -> agent.Run:
        """Start a run continuing the stored transcript with ``text``; ``SessionBusyError`` while one holds it."""
        entry = _Entry()
        run = self.runner.start(self._spec(conversation_id), agent.Resume(text), *self._model(conversation_id, entry))
        self._track(conversation_id, entry, run)
        return run

    def send(self, conversation_id: str, text: str) -> agent.Run | None:
        """``Runner.send``: the text reaches the live run wherever it is, or starts one; answered once."""
        entry = _Entry()
        run = self.runner.send(self._spec(conversation_id), text, *self._model(conversation_id, entry))
        if run is not None and run is not self.held(conversation_id):
            self._track(conversation_id, entry, run)
        return run

    def _spec(self, conversation_id: str) -> agent.Spec:
        return agent.Spec(session=self.session(conversation_id), tools=[look_up], max_steps=8, lease=self.lease)

    def _model(self, conversation_id: str, entry: _Entry) -> tuple[agent.Endpoint, Callable[[Event], None]]:
        return self.endpoint_factory(conversation_id), self._listener(conversation_id, entry)

    def _track(self, conversation_id: str, entry: _Entry, run: agent.Run) -> None:
        with self._lock:
            entry.run = run
            if not entry.ended:  # a run may end before start() returns
                self._runs[conversation_id] = run
        log.info("%s started a run of %r", self.runner.replica, conversation_id)

    def _listener(self, conversation_id: str, entry: _Entry) -> Callable[[Event], None]:
        def on_event(event: Event) -> None:
            if isinstance(event, RunFinished):
                with self._lock:
                    entry.ended = True
                    if entry.run is not None and self._runs.get(conversation_id) is entry.run:
                        del self._runs[conversation_id]
                log.info("%s: the run of %r ended: %s", self.runner.replica, conversation_id, event.result.stop_reason)

        return on_event


def _body_text() -> str | None:
    body = request.get_json(silent=True)
    text = body.get("text") if isinstance(body, dict) else None
    return text if isinstance(text, str) and text else None


def _info_json(info: agent.SessionInfo) -> dict[str, Any]:
    return {
        "state": info.state.value,
        "holder": info.holder,
        "lease_expires_at": info.lease_expires_at.isoformat() if info.lease_expires_at else None,
        "pending_steers": info.pending_steers,
        "cancel_requested": info.cancel_requested,
        "length": info.length,
        "updated_at": info.updated_at.isoformat() if info.updated_at else None,
    }


def _message_json(message: agent.Message) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    for c in message.content:
        if c.type is agent.ContentType.TEXT:
            blocks.append({"type": "text", "text": c.text})
        elif c.type is agent.ContentType.TOOL_USE:
            blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.input})
        else:
            blocks.append({"type": "tool_result", "tool_use_id": c.tool_use_id, "text": c.text, "is_error": c.is_error})
    return {"role": message.role.value, "text": message.text, "content": blocks}


def create_app(
    store: agent.RunStore, endpoint_factory: EndpointFactory, replica: str | None = None, *, lease: float = 30.0
) -> Flask:
    """The service of one replica (``None``: ``"<hostname>:<pid>"``); its runner is in ``app.extensions``."""
    app = Flask(__name__)
    conversations = Conversations(store, endpoint_factory, agent.Runner(replica=replica), lease)
    replica = conversations.runner.replica
    app.extensions["conversations"] = conversations

    @app.post("/conversations/<conversation_id>/messages")
    def post_message(conversation_id: str) -> ResponseReturnValue:
        text = _body_text()
        if text is None:
            return {"error": 'the body must be JSON {"text": "..."} with a non-empty text'}, 400
        return new_turn(conversations, conversation_id, text)

    @app.post("/conversations/<conversation_id>/steer")
    def post_steer(conversation_id: str) -> ResponseReturnValue:
        text = _body_text()
        if text is None:
            return {"error": 'the body must be JSON {"text": "..."} with a non-empty text'}, 400
        return steer(conversations, conversation_id, text), 202

    @app.post("/conversations/<conversation_id>/cancel")
    def post_cancel(conversation_id: str) -> ResponseReturnValue:
        cancelled = conversations.session(conversation_id).cancel()
        run = conversations.held(conversation_id)
        if run is not None:
            run.cancel()  # ours: it stops without waiting for its heartbeat to bring the request
        return {"conversation": conversation_id, "replica": replica, "cancelled": cancelled}

    @app.get("/conversations/<conversation_id>")
    def get_conversation(conversation_id: str) -> ResponseReturnValue:
        info, messages = snapshot(conversations.session(conversation_id))
        running_here = conversations.held(conversation_id) is not None
        return {
            "conversation": conversation_id,
            "replica": replica,
            "running_here": running_here,
            **_info_json(info),
            "messages": [_message_json(m) for m in messages],
        }

    _error_handlers(app)
    return app


def new_turn(conversations: Conversations, conversation_id: str, text: str) -> ResponseReturnValue:
    """A user message: a run from the stored transcript plus ``text``, unless a run holds the conversation (409)."""
    session = conversations.session(conversation_id)
    info = session.info()
    if info.state is agent.RunState.RUNNING:
        return _busy(conversation_id, info.holder)
    try:
        conversations.start(conversation_id, text)
    except agent.SessionBusyError:  # another replica claimed it since we looked
        return _busy(conversation_id, session.info().holder)
    return {"conversation": conversation_id, "replica": conversations.runner.replica, "started": True}, 202


def steer(conversations: Conversations, conversation_id: str, text: str) -> dict[str, Any]:
    """``Runner.send``: to this process's run, to a run elsewhere through the store, or to a new run."""
    answer: dict[str, Any] = {"conversation": conversation_id, "replica": conversations.runner.replica}
    held = conversations.held(conversation_id)
    run = conversations.send(conversation_id, text)
    if run is None:
        return {**answer, "delivered": "store", "state": "running", "started": False}
    if run is held:
        return {**answer, "delivered": "run", "state": "running", "started": False}
    return {**answer, "delivered": "new run", "state": "running", "started": True}


def snapshot(session: agent.StoreSession) -> tuple[agent.SessionInfo, list[agent.Message]]:
    """The record and the transcript as of one instant: read again while a save slips in between the two reads."""
    info = session.info()
    for _ in range(10):
        messages, again = session.messages(), session.info()
        if _moment(again) == _moment(info):
            break
        info = again
    return info, messages


def _moment(info: agent.SessionInfo) -> tuple[object, ...]:
    return info.updated_at, info.length, info.state, info.holder


def _busy(conversation_id: str, holder: str | None) -> ResponseReturnValue:
    return {"error": f"conversation {conversation_id!r} is running", "holder": holder, "state": "running"}, 409


def _error_handlers(app: Flask) -> None:
    @app.errorhandler(agent.InvalidSessionIdError)
    def bad_id(error: agent.InvalidSessionIdError) -> ResponseReturnValue:
        return {"error": str(error)}, 400

    @app.errorhandler(agent.RunnerClosedError)
    def closing(error: agent.RunnerClosedError) -> ResponseReturnValue:
        return {"error": "this replica is shutting down; try another"}, 503

    @app.errorhandler(agent.StoreError)
    def store_down(error: agent.StoreError) -> ResponseReturnValue:
        return {"error": f"the store failed: {error}"}, 503


@contextmanager
def postgres_store(dsn: str, schema: str, *, migrate: bool) -> Iterator[agent.RunStore]:
    """A PostgreSQL store over a pool of this process's own, in ``schema``."""
    pool: ConnectionPool[Any] = ConnectionPool(
        dsn,
        check=postgres.check_connection,
        kwargs={"options": f"-c search_path={schema}", "connect_timeout": 5},
        min_size=1,
        max_size=10,
        open=True,
    )
    with pool:
        if migrate:  # the library never creates tables: this stands in for your migrations
            with pool.connection() as conn:
                conn.execute(postgres.SCHEMA)
        yield postgres.PostgresStore(pool)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a libpq conninfo: postgresql://... or 'host=... dbname=...'")
    parser.add_argument("--schema", default="public", help="the schema holding the tables (search_path)")
    parser.add_argument("--migrate", action="store_true", help="create the tables first (CREATE ... IF NOT EXISTS)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--replica", default=None, help="this process's name in SessionInfo.holder")
    parser.add_argument("--lease", type=float, default=30.0, help="seconds a dead replica's runs stay held")
    parser.add_argument("--gates", type=Path, default=None, help="a directory: each model reply waits for its file")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds runs get to save and release at SIGTERM")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with postgres_store(args.dsn, args.schema, migrate=args.migrate) as store:
        app = create_app(store, lambda cid: EchoModel(cid, args.gates), args.replica, lease=args.lease)
        server = make_server("127.0.0.1", args.port, app, threaded=True)
        signal.signal(signal.SIGTERM, _leave)
        log.info("%s serving on http://127.0.0.1:%d", args.replica, server.port)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()  # no new requests; then the runs stop, save and release
            log.info("%s stopping: its runs are cancelled, saved and released", args.replica)
            stopped = app.extensions["conversations"].runner.shutdown(timeout=args.grace)
            log.info("%s stopped; every run saved and released: %s", args.replica, stopped)


def _leave(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # leaves serve_forever on the main thread; main() then shuts the runner down


if __name__ == "__main__":
    main()
