"""The conversation service both web examples serve (examples/flask, examples/django): no web framework in here.

:class:`Conversations` holds what the routes share (the store, this replica's runner, the
model, the runs this process holds); :func:`new_turn`, :func:`steer` and :func:`snapshot`
are the routes' work, answering ``(json, status)``; :class:`EchoModel` is the offline model.
The scripts put this folder (``examples/service``) on ``sys.path`` to import it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import agentsessions as agent
from agentsessions.events import Event, RunFinished
from agentsessions.session import check_steer_key

Answer = tuple[dict[str, Any], int]
"""A route's JSON body and HTTP status."""

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


@agent.tool(needs_approval=True)
def close_account(reason: str) -> str:
    """Close the customer's account: a person approves each call first (the conversation waits).

    Args:
        reason: why, in the customer's words.
    """
    return f"account closed ({reason})"


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
        if not any(c.type is agent.ContentType.TOOL_RESULT for c in last.content) and "close my account" in last.text:
            arguments = json.dumps({"reason": last.text})
            call = agent.Content.tool_use(f"call-{replies + 1}", "close_account", arguments)
            return agent.ModelResponse(agent.Message(agent.Role.ASSISTANT, [call]), stop_reason="tool_use")
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

    def resume(self, conversation_id: str) -> agent.Run:
        """Start the run that goes on from a wait whose calls are all decided (``ApprovalPendingError`` if not)."""
        entry = _Entry()
        run = self.runner.start(self._spec(conversation_id), agent.Resume(), *self._model(conversation_id, entry))
        self._track(conversation_id, entry, run)
        return run

    def send(self, conversation_id: str, text: str, key: str | None = None) -> agent.Run | None:
        """``Runner.send``: the text reaches the live run wherever it is, or starts one; answered once.

        ``key`` (the request's ``Idempotency-Key``) makes a retried request store its text once.
        """
        entry = _Entry()
        run = self.runner.send(self._spec(conversation_id), text, *self._model(conversation_id, entry), key=key)
        if run is not None and run is not self.held(conversation_id):
            self._track(conversation_id, entry, run)
        return run

    def _spec(self, conversation_id: str) -> agent.Spec:
        tools = [look_up, close_account]
        return agent.Spec(session=self.session(conversation_id), tools=tools, max_steps=8, lease=self.lease)

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


def info_json(info: agent.SessionInfo) -> dict[str, Any]:
    return {
        "state": info.state.value,
        "holder": info.holder,
        "lease_expires_at": info.lease_expires_at.isoformat() if info.lease_expires_at else None,
        "pending_steers": info.pending_steers,
        "pending_approvals": info.pending_approvals,
        "cancel_requested": info.cancel_requested,
        "length": info.length,
        "updated_at": info.updated_at.isoformat() if info.updated_at else None,
    }


def message_json(message: agent.Message) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    for c in message.content:
        if c.type is agent.ContentType.TEXT:
            blocks.append({"type": "text", "text": c.text})
        elif c.type is agent.ContentType.TOOL_USE:
            blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.input})
        else:
            blocks.append({"type": "tool_result", "tool_use_id": c.tool_use_id, "text": c.text, "is_error": c.is_error})
    return {"role": message.role.value, "text": message.text, "content": blocks}


def new_turn(conversations: Conversations, conversation_id: str, text: str) -> Answer:
    """A user message: a run from the stored transcript plus ``text``, unless a run holds the conversation (409)."""
    session = conversations.session(conversation_id)
    info = session.info()
    if info.state is agent.RunState.RUNNING:
        return busy(conversation_id, info.holder)
    try:
        conversations.start(conversation_id, text)
    except agent.SessionBusyError:  # another replica claimed it since we looked
        return busy(conversation_id, session.info().holder)
    return {"conversation": conversation_id, "replica": conversations.runner.replica, "started": True}, 202


def steer(conversations: Conversations, conversation_id: str, text: str, key: str | None = None) -> Answer:
    """``Runner.send``: to this process's run, to a run elsewhere through the store, or to a new run (202).

    ``key``, the request's ``Idempotency-Key`` header: a client retrying a request whose
    answer it lost sends it again with the same key, and the text is stored and answered
    once, whichever replica each attempt reaches. The same key with another text is a 409.
    """
    answer: dict[str, Any] = {"conversation": conversation_id, "replica": conversations.runner.replica}
    held = conversations.held(conversation_id)
    try:
        run = conversations.send(conversation_id, text, check_steer_key(key))
    except ValueError as error:  # a key that is not 1 to 255 characters, or a bad id
        return {"error": str(error)}, 400
    except agent.ConflictError as error:  # the key was used for another text
        return {"error": str(error)}, 409
    if run is None:
        return {**answer, "delivered": "store", "state": "running", "started": False}, 202
    if run is held:
        return {**answer, "delivered": "run", "state": "running", "started": False}, 202
    return {**answer, "delivered": "new run", "state": "running", "started": True}, 202


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


def busy(conversation_id: str, holder: str | None) -> Answer:
    """409: a run holds the conversation (``holder`` names its replica)."""
    return {"error": f"conversation {conversation_id!r} is running", "holder": holder, "state": "running"}, 409


def read(conversations: Conversations, conversation_id: str) -> dict[str, Any]:
    """``GET``: the conversation's record and transcript as of one instant, and whether this process runs it."""
    info, messages = snapshot(conversations.session(conversation_id))
    return {
        "conversation": conversation_id,
        "replica": conversations.runner.replica,
        "running_here": conversations.held(conversation_id) is not None,
        **info_json(info),
        "messages": [message_json(m) for m in messages],
    }


def cancel(conversations: Conversations, conversation_id: str) -> dict[str, Any]:
    """``session.cancel()`` from any replica; the run this process holds is also told at once."""
    cancelled = conversations.session(conversation_id).cancel()
    run = conversations.held(conversation_id)
    if run is not None:
        run.cancel()  # ours: it stops without waiting for its heartbeat to bring the request
    return {"conversation": conversation_id, "replica": conversations.runner.replica, "cancelled": cancelled}


def approval(conversations: Conversations, conversation_id: str, call_id: str, body: object) -> Answer:
    """A person's decision on a waiting call, from any replica; once every call is decided, the run goes on here.

    The body is ``{"decision": "approve" | "reject", "reason": "...", "by": "..."}``; an approval
    may carry ``"input": {...}``, the arguments the call runs with instead of the model's
    (checked against the tool's schema: 400 naming the field that does not fit). 409 when the
    call was decided the other way (or approved with another input) or is not waiting (the
    same decision again is a 200).
    """
    fields = body if isinstance(body, dict) else {}
    kind, reason, by = fields.get("decision"), fields.get("reason", ""), fields.get("by", "")
    edited = fields.get("input")
    if kind not in ("approve", "reject") or not isinstance(reason, str) or not isinstance(by, str):
        return {"error": 'the body must be JSON {"decision": "approve" | "reject", "reason": "...", "by": "..."}'}, 400
    if edited is not None and (kind != "approve" or not isinstance(edited, dict)):
        return {"error": 'only an approval carries an "input", and it is a JSON object'}, 400
    session = conversations.session(conversation_id)
    try:
        if kind == "approve":
            text = None if edited is None else json.dumps(edited, ensure_ascii=False)
            decision = agent.Decision.approve(by=by, input=text)
        else:
            decision = agent.Decision.reject(reason=reason, by=by)
        state = session.decide({call_id: decision})
    except agent.ConflictError as error:
        return {"error": str(error)}, 409
    except (ValueError, TypeError) as error:  # an input that does not fit, or a store without edits
        return {"error": str(error)}, 400
    started = False
    if state is agent.RunState.WAITING and session.info().pending_approvals == 0:
        with contextlib.suppress(agent.ConflictError):  # another replica's decision started it an instant before
            conversations.resume(conversation_id)
            started = True
    return {"conversation": conversation_id, "replica": conversations.runner.replica, "started": started}, 200


BAD_BODY = 'the body must be JSON {"text": "..."} with a non-empty text'
"""The 400 answer's error when a POST carries no text."""


def body_text(body: object) -> str | None:
    """The ``text`` of a POST's JSON body, or ``None`` when there is none (then answer 400 with :data:`BAD_BODY`)."""
    text = body.get("text") if isinstance(body, dict) else None
    return text if isinstance(text, str) and text else None


class Server(Protocol):
    """What both web servers offer: werkzeug's ``make_server`` and Django's ``ThreadedWSGIServer``."""

    def serve_forever(self) -> None: ...

    def server_close(self) -> None: ...


def serve(server: Server, runner: agent.Runner, port: int, *, grace: float) -> None:
    """Serve until SIGTERM or Ctrl-C; then take no new request, and let the runs stop, save and release.

    A run is held by this process until it ends: stopped gracefully, its runs are cancelled,
    saved and released (state ``CANCELLED``); killed, their leases lapse and any replica
    takes them over.
    """
    signal.signal(signal.SIGTERM, _leave)
    log.info("%s serving on http://127.0.0.1:%d", runner.replica, port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        log.info("%s stopping: its runs are cancelled, saved and released", runner.replica)
        stopped = runner.shutdown(timeout=grace)
        log.info("%s stopped; every run saved and released: %s", runner.replica, stopped)


def _leave(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # leaves serve_forever on the main thread; serve() then shuts the runner down


def add_service_arguments(parser: argparse.ArgumentParser) -> None:
    """The command-line options both web examples take besides their database."""
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--replica", default=None, help="this process's name in SessionInfo.holder")
    parser.add_argument("--lease", type=float, default=30.0, help="seconds a dead replica's runs stay held")
    parser.add_argument("--gates", type=Path, default=None, help="a directory: each model reply waits for its file")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds runs get to save and release at SIGTERM")
