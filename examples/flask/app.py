"""A Flask service over agentsessions: any replica serves any conversation, whoever runs it.

    python examples/flask/app.py --dsn "host=127.0.0.1 user=postgres dbname=test" --schema public \\
        --migrate --port 8001 --replica web-1 [--lease 30] [--gates DIR]

Routes (JSON in, JSON out):

- ``POST /conversations/<id>/messages`` ``{"text": ...}``: a new user message; starts a run
  on a worker thread with ``Resume(text)``: the stored transcript plus the message. 409, naming the holder,
  while a run (in any replica) holds the conversation.
- ``POST /conversations/<id>/steer`` ``{"text": ...}``: ``Runner.send``: ``Run.steer`` when this
  process holds the run; through the store when another replica does; else a new run, so
  every steer gets one answer. An ``Idempotency-Key`` header makes a retried request store
  its text once (409 when the key came with another text).
- ``POST /conversations/<id>/cancel``: ``session.cancel()``, from any replica.
- ``POST /conversations/<id>/approvals/<call_id>`` ``{"decision": "approve" | "reject",
  "reason": ..., "by": ..., "input": {...}}``: a person's decision on a call the conversation
  waits for (the model asks to ``close_account`` when told "close my account"); an approval's
  optional ``input`` runs the call with those arguments instead (400 when they do not fit
  the tool's schema); once every call is decided, this replica starts the run that goes on.
  409 for a call decided otherwise.
- ``GET /conversations/<id>``: the transcript and the session's record (state, holder, lease).

The service itself is ``examples/service/conversations.py``, shared with ``examples/django``; this
file is its Flask face. The model is offline and scripted (``EchoModel``): it looks the conversation up with a
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
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flask import Flask, request
from flask.typing import ResponseReturnValue
from psycopg_pool import ConnectionPool
from werkzeug.serving import make_server

import agentsessions as agent
from agentsessions.stores import postgres

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "service"))  # the service both web examples share
from conversations import (
    BAD_BODY,
    Conversations,
    EchoModel,
    EndpointFactory,
    add_service_arguments,
    approval,
    body_text,
    cancel,
    new_turn,
    read,
    serve,
    steer,
)


def create_app(
    store: agent.RunStore, endpoint_factory: EndpointFactory, replica: str | None = None, *, lease: float = 30.0
) -> Flask:
    """The service of one replica (``None``: ``"<hostname>:<pid>"``); its runner is in ``app.extensions``."""
    app = Flask(__name__)
    conversations = Conversations(store, endpoint_factory, agent.Runner(replica=replica), lease)
    app.extensions["conversations"] = conversations

    @app.post("/conversations/<conversation_id>/messages")
    def post_message(conversation_id: str) -> ResponseReturnValue:
        text = body_text(request.get_json(silent=True))
        if text is None:
            return {"error": BAD_BODY}, 400
        return new_turn(conversations, conversation_id, text)

    @app.post("/conversations/<conversation_id>/steer")
    def post_steer(conversation_id: str) -> ResponseReturnValue:
        text = body_text(request.get_json(silent=True))
        if text is None:
            return {"error": BAD_BODY}, 400
        return steer(conversations, conversation_id, text, request.headers.get("Idempotency-Key"))

    @app.post("/conversations/<conversation_id>/cancel")
    def post_cancel(conversation_id: str) -> ResponseReturnValue:
        return cancel(conversations, conversation_id)

    @app.post("/conversations/<conversation_id>/approvals/<call_id>")
    def post_approval(conversation_id: str, call_id: str) -> ResponseReturnValue:
        return approval(conversations, conversation_id, call_id, request.get_json(silent=True))

    @app.get("/conversations/<conversation_id>")
    def get_conversation(conversation_id: str) -> ResponseReturnValue:
        return read(conversations, conversation_id)

    _error_handlers(app)
    return app


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
    add_service_arguments(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with postgres_store(args.dsn, args.schema, migrate=args.migrate) as store:
        app = create_app(store, lambda cid: EchoModel(cid, args.gates), args.replica, lease=args.lease)
        server = make_server("127.0.0.1", args.port, app, threaded=True)
        serve(server, app.extensions["conversations"].runner, server.port, grace=args.grace)


if __name__ == "__main__":
    main()
