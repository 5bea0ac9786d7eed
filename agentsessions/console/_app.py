"""The console as a WSGI application: routes, the checks every request passes, the actions.

    GET  /                       the sessions (?state=..., ?metadata=K=V, each repeated; ?before=&skip= pages)
    GET  /session?id=ID          one session: record, actions, transcript
    GET  /session/poll?id=ID&from=N&v=V   what changed since (JSON, for static/console.js)
    GET  /delete?id=ID           the confirmation step
    POST /steer /cancel /fork /delete      the actions (form fields id, csrf, and text, key, new, at)
    POST /approve /reject        a decision on a waiting call (fields id, csrf, call, seen, by, and reason)
    GET  /static/console.js /static/console.css

Each action goes through the store, so it reaches the run whichever replica holds it.
"""

from __future__ import annotations

import datetime
import importlib.resources
import itertools
import json
import logging
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

import attrs

from agentsessions.approvals import Approval, ApprovalStore, Decision
from agentsessions.console import _blocks, _html
from agentsessions.console._guard import SECURITY_HEADERS, Guard, same_origin
from agentsessions.errors import AgentSessionsError, ConflictError
from agentsessions.runs import RunState, SessionInfo, exists, utcnow
from agentsessions.session import ForkStore, MetadataStore, RunStore, keeps_steer_keys
from agentsessions.session import open as open_session

log = logging.getLogger("agentsessions.console")

PAGE = 50
"""Sessions per page of the list."""
COUNT_LIMIT = 1000
"""The list counts at most this many sessions (then shows ``1000+``): counting reads the whole listing."""
MAX_FORM = 1 << 20

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
Params = dict[str, list[str]]

_NOTICES = {
    "steered": "Steer stored: the live run takes it before its next model request.",
    "steer-waits": "Steer stored: no live run holds the session, so it waits for the next run.",
    "cancelling": "Cancel requested: the run stops before its next step.",
    "no-run": "No live run holds this session: nothing to cancel.",
    "wait-ended": "The wait ended: each of its calls is answered as cancelled, and the session is cancelled.",
    "forked": "Forked: this is the new session.",
    "deleted": "Deleted.",
    "approved": "Approved: a run started with Resume() runs the call once every call of the wait is decided.",
    "rejected": "Rejected: the model reads the reason when a run goes on with Resume().",
}
_STATIC = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}
_REASONS = {200: "OK", 303: "See Other", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden"}
_REASONS |= {404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 413: "Content Too Large"}
_REASONS |= {500: "Internal Server Error", 503: "Service Unavailable"}


@attrs.frozen
class Response:
    """What a route answers."""

    status: int
    body: bytes = b""
    type: str = "text/html; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


class Refused(Exception):
    """A request the console will not carry out: ``status`` and a message for the page."""

    def __init__(self, status: int, text: str, back: str | None = None) -> None:
        super().__init__(text)
        self.status, self.text, self.back = status, text, back


def _page(status: int, text: str) -> Response:
    return Response(status, text.encode("utf-8", "backslashreplace"))


def _redirect(location: str, *extra: tuple[str, str]) -> Response:
    return Response(303, headers=(("Location", location), *extra))


class Console:
    """The WSGI application :func:`app` returns."""

    def __init__(self, store: RunStore, *, token: str) -> None:
        if not isinstance(store, RunStore):
            raise TypeError(f"the console needs a RunStore (one that keeps run records), got {type(store).__name__}")
        self.store = store
        self.guard = Guard(token)
        files = importlib.resources.files("agentsessions.console") / "static"
        self._static = {name: (files / name).read_bytes() for name in _STATIC}

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Answer one request."""
        response = self._answer(environ)
        headers = [("Content-Type", response.type), ("Content-Length", str(len(response.body)))]
        headers += [*SECURITY_HEADERS, *response.headers]
        start_response(f"{response.status} {_REASONS.get(response.status, '')}", headers)
        return [response.body]

    def _answer(self, environ: dict[str, Any]) -> Response:
        root = str(environ.get("SCRIPT_NAME", "")).rstrip("/")
        try:
            return self._route(environ, root)
        except Refused as refused:
            if refused.status == 401:  # no details: not even which check failed
                return Response(
                    401,
                    b"401 Unauthorized\n",
                    "text/plain; charset=utf-8",
                    (("WWW-Authenticate", 'Bearer realm="agentsessions console"'),),
                )
            return _page(
                refused.status, _html.layout(root, "Not done", _html.problem(root, refused.text, refused.back))
            )
        except (ValueError, TypeError) as error:
            return _page(400, _html.layout(root, "Not done", _html.problem(root, str(error))))
        except ConflictError as error:
            return _page(409, _html.layout(root, "Not done", _html.problem(root, str(error))))
        except AgentSessionsError as error:
            # A store's message may name its server; the log has it, the page only the kind.
            log.exception("the store failed")
            text = f"the store failed ({type(error).__name__}); the console's log has the details"
            return _page(503, _html.layout(root, "Store error", _html.problem(root, text)))
        except Exception:
            # A bug: answered here, not by the server, so the page keeps the security headers.
            log.exception("the console failed")
            text = "the console failed (a bug); its log has the traceback"
            return _page(500, _html.layout(root, "Console error", _html.problem(root, text)))

    def _route(self, environ: dict[str, Any], root: str) -> Response:
        method = environ.get("REQUEST_METHOD", "GET")
        path = str(environ.get("PATH_INFO", "")) or "/"
        params = _params(str(environ.get("QUERY_STRING", "")))
        if method == "GET" and "token" in params:
            return self._exchange(environ, root, path, params)
        if not self.guard.allowed(environ):
            raise Refused(401, "")
        if method == "GET":
            return self._get(root, path, params)
        if method == "POST" and path in self._posts:
            if not same_origin(environ):
                raise Refused(403, "a cross-site request was refused")
            form = _form(environ)
            if not self.guard.csrf_matches(form.get("csrf", [""])[0]):
                raise Refused(403, "the form's CSRF token is missing or wrong: reload the page and try again")
            return self._posts[path](self, root, form)
        raise Refused(405 if path in self._posts or path in self._gets else 404, f"no such page: {method} {path}")

    def _exchange(self, environ: dict[str, Any], root: str, path: str, params: Params) -> Response:
        """``?token=TOKEN``: set the cookie, then the same page without the token in its address."""
        if not self.guard.token_matches(_one(params, "token")):
            raise Refused(401, "")
        rest = [(key, value) for key, values in params.items() if key != "token" for value in values]
        query = "?" + urlencode(rest) if rest else ""
        # One leading slash: `//host` in a Location header would send the browser to another site.
        return _redirect(f"{root}/{path.lstrip('/')}{query}", self.guard.set_cookie(environ))

    def _get(self, root: str, path: str, params: Params) -> Response:
        if path.startswith("/static/") and path[8:] in _STATIC:
            return Response(200, self._static[path[8:]], _STATIC[path[8:]])
        route = self._gets.get(path)
        if route is None:
            raise Refused(404, f"no such page: {path}")
        return route(self, root, params)

    # --- Pages -------------------------------------------------------------------------------

    def _list(self, root: str, params: Params) -> Response:
        states = frozenset(RunState(value) for value in params.get("state", []))
        before = _moment(params.get("before", [""])[0])
        skip = _whole(params.get("skip", ["0"])[0], "skip")
        pairs = _pairs(params.get("metadata", []))
        listed = self._listed(states, before, pairs)
        rows = list(itertools.islice(listed, skip, skip + PAGE + 1))
        counts: dict[RunState, int] = {}
        counted = 0
        for info in itertools.islice(self.store.sessions(), COUNT_LIMIT + 1):
            counts[info.state] = counts.get(info.state, 0) + 1
            counted += 1
        if counted > COUNT_LIMIT:
            counts[info.state] -= 1
        shown = rows[:PAGE]
        next_query = _next_page(states, pairs, before, skip, shown) if len(rows) > PAGE else None
        first = before is None and not skip
        page = _html.Listing(shown, counts, counted <= COUNT_LIMIT, states, next_query, first, pairs)
        return self._html(root, "Sessions", _html.listing(root, page, utcnow()), params)

    def _listed(
        self, states: frozenset[RunState], before: datetime.datetime | None, pairs: dict[str, str]
    ) -> Iterator[SessionInfo]:
        if not pairs:
            return self.store.sessions(state=states or None, updated_before=before)
        if not isinstance(self.store, MetadataStore):
            raise Refused(400, f"{type(self.store).__name__} keeps no session metadata to filter by")
        try:
            return self.store.sessions(state=states or None, updated_before=before, metadata=pairs)
        except (TypeError, ValueError) as error:
            raise Refused(400, str(error)) from None

    def _session(self, root: str, params: Params) -> Response:
        info = self._known(_one(params, "id"))
        transcript = self.store.messages(info.id)
        status = _html.status(info, self.store.peek_steers(info.id), utcnow())
        # A key per page: sending its steer form twice stores the steer once.
        key = secrets.token_urlsafe(16) if keeps_steer_keys(self.store) else ""
        waits = _html.approvals(root, info, self._calls(info), self.guard.csrf)
        body = _html.session(
            root, info, status, _blocks.messages(transcript), _version(info), self.guard.csrf, key, waits
        )
        return self._html(root, f"Session {info.id}", body, params)

    def _poll(self, root: str, params: Params) -> Response:
        """What the page's script asks every second: the record, and the messages when they changed."""
        info = self.store.info(_one(params, "id"))
        answer: dict[str, Any] = {"gone": not exists(info), "version": _version(info), "length": info.length}
        answer["state"] = info.state.value
        answer["status"] = _html.status(info, self.store.peek_steers(info.id), utcnow())
        calls = self._calls(info)
        answer["approvals"] = _html.approvals_mark(info, calls)
        if answer["approvals"] != params.get("a", [""])[0]:
            answer["approvals_html"] = _html.approvals(root, info, calls, self.guard.csrf)
        if answer["version"] != params.get("v", [""])[0] and not answer["gone"]:
            transcript = self.store.messages(info.id)
            # From the last message the page has: a steer may have joined it (the trailing user message).
            start = max(0, min(_whole(params.get("from", ["0"])[0], "from"), len(transcript)) - 1)
            answer |= {"start": start, "messages": _blocks.messages(transcript, start), "length": len(transcript)}
        body = json.dumps(answer).encode()
        return Response(200, body, "application/json")

    def _confirm_delete(self, root: str, params: Params) -> Response:
        info = self._known(_one(params, "id"))
        return self._html(root, f"Delete {info.id}?", _html.confirm_delete(root, info, self.guard.csrf), params)

    # --- Actions ----------------------------------------------------------------------------

    def _steer(self, root: str, form: Params) -> Response:
        info = self._known(_one(form, "id"))
        text = _one(form, "text")
        if not text.strip():
            raise Refused(400, "a steer needs some text", _html.session_link(root, info.id))
        key = form.get("key", [""])[0]
        state = self.store.add_steer(info.id, text, key=key) if key else self.store.add_steer(info.id, text)
        return self._back(root, info.id, "steered" if state is RunState.RUNNING else "steer-waits")

    def _cancel(self, root: str, form: Params) -> Response:
        info = self._known(_one(form, "id"))
        # A waiting session's cancel ends its wait (session.cancel): its calls are answered as cancelled.
        if not open_session(info.id, self.store).cancel():
            return self._back(root, info.id, "no-run")
        return self._back(root, info.id, "wait-ended" if info.state is RunState.WAITING else "cancelling")

    def _approve(self, root: str, form: Params) -> Response:
        by, edited = form.get("by", [""])[0], _edited(form)
        return self._decide(root, form, lambda: Decision.approve(by=by, input=edited))

    def _reject(self, root: str, form: Params) -> Response:
        reason, by = form.get("reason", [""])[0], form.get("by", [""])[0]
        return self._decide(root, form, lambda: Decision.reject(reason=reason, by=by))

    def _decide(self, root: str, form: Params, decision: Callable[[], Decision]) -> Response:
        """Record ``decision()`` on the form's call; a call decided elsewhere meanwhile is a 409 page.

        The page of a conflict says why and shows the wait as it stands. The form carries
        the input the page showed (``seen``): a call that now holds another input is a
        conflict too, so nobody decides on what they did not see. A bad edited input (a
        ``ValueError`` naming the field) is a 400 page saying so.
        """
        info = self._known(_one(form, "id"))
        if not isinstance(self.store, ApprovalStore):
            raise Refused(400, f"this store ({type(self.store).__name__}) keeps no approvals")
        call_id, seen = _one(form, "call"), form.get("seen")
        back = _html.session_link(root, info.id)
        try:
            made = decision()
            current = {call.call_id: call for call in self._calls(info)}.get(call_id)
            if seen is not None and current is not None and _asked(current) != seen[0]:
                raise ConflictError(f"call {call_id!r:.80} holds another input than the page showed")
            open_session(info.id, self.store).decide({call_id: made})
        except ConflictError as error:
            return _page(409, _html.layout(root, "Conflict", self._conflict(root, info.id, str(error), back)))
        except ValueError as error:  # a bad edited input: the message names the field
            raise Refused(400, str(error), back) from None
        return self._back(root, info.id, made.decision)

    def _fork(self, root: str, form: Params) -> Response:
        info = self._known(_one(form, "id"))
        if not isinstance(self.store, ForkStore):
            raise Refused(400, f"this store ({type(self.store).__name__}) cannot fork sessions")
        at = form.get("at", [""])[0]
        new = _one(form, "new")
        self.store.fork(info.id, new, at=_whole(at, "at") if at else None)
        return self._back(root, new, "forked")

    def _delete(self, root: str, form: Params) -> Response:
        session_id = _one(form, "id")
        if not self.store.delete(session_id):
            raise Refused(404, f"no session {session_id!r:.300}")
        return _redirect(f"{root}/?notice=deleted")

    # --- Helpers ----------------------------------------------------------------------------

    def _known(self, session_id: str) -> SessionInfo:
        info = self.store.info(session_id)
        if not exists(info):
            raise Refused(404, f"no session {session_id!r:.300}")
        return info

    def _conflict(self, root: str, session_id: str, text: str, back: str) -> str:
        """A conflict's page: why nothing was recorded, the session's state and its latest wait's calls."""
        state = self.store.info(session_id).state.value
        calls = self.store.approvals(session_id) if isinstance(self.store, ApprovalStore) else []
        standing = f'<p>The session is <span class="state {state}">{state}</span> now.</p>{_html.decided(calls)}'
        return _html.problem(root, f"Not recorded: {text}", back) + f'<section class="approvals">{standing}</section>'

    def _calls(self, info: SessionInfo) -> list[Approval]:
        """The calls a waiting session waits for; none when it does not wait or the store keeps no approvals."""
        if info.state is not RunState.WAITING or not isinstance(self.store, ApprovalStore):
            return []
        return self.store.approvals(info.id)

    def _back(self, root: str, session_id: str, notice: str) -> Response:
        return _redirect(_html.session_link(root, session_id) + f"&notice={notice}")

    def _html(self, root: str, title: str, body: str, params: Params) -> Response:
        notice = _NOTICES.get(params.get("notice", [""])[0], "")
        return _page(200, _html.layout(root, title, body, notice=notice))

    _gets: Mapping[str, Callable[[Console, str, Params], Response]] = {
        "/": _list,
        "/session": _session,
        "/session/poll": _poll,
        "/delete": _confirm_delete,
    }
    _posts: Mapping[str, Callable[[Console, str, Params], Response]] = {
        "/steer": _steer,
        "/cancel": _cancel,
        "/fork": _fork,
        "/delete": _delete,
        "/approve": _approve,
        "/reject": _reject,
    }


def _params(text: str) -> Params:
    """A query string or a form body as lists of values; ids may hold any str, so surrogates pass."""
    found: Params = {}
    for key, value in parse_qsl(text, keep_blank_values=True, errors="surrogatepass"):
        found.setdefault(key, []).append(value)
    return found


def _form(environ: Mapping[str, Any]) -> Params:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise Refused(400, "Content-Length is not a number") from None
    if length > MAX_FORM:
        raise Refused(413, f"a form of at most {MAX_FORM} bytes")
    body = environ["wsgi.input"].read(length) if length else b""
    try:
        return _params(body.decode("ascii"))
    except UnicodeDecodeError:
        raise Refused(400, "the form is not URL-encoded") from None


def _one(params: Params, name: str) -> str:
    values = params.get(name)
    if not values:
        raise Refused(400, f"the request has no {name}")
    return values[0]


def _edited(form: Params) -> str | None:
    """The approve form's input when the person changed it; ``None`` to run the call as the model wrote it.

    Browsers send a textarea's line breaks as CRLF: they are made LF again, so an input
    that was only looked at is not taken for an edit.
    """
    shown, seen = form.get("input"), form.get("seen")
    if not shown or not seen:
        return None
    text = shown[0].replace("\r\n", "\n")
    return None if text == seen[0] else text


def _asked(call: Approval) -> str:
    """The input the model asked for: what an approve form shows (an edit replaces ``input``)."""
    return call.input if call.original_input is None else call.original_input


def _whole(text: str, name: str) -> int:
    if not text.isdigit():
        raise Refused(400, f"{name} is a whole number of at least 0, got {text!r:.40}")
    return int(text)


def _moment(text: str) -> datetime.datetime | None:
    if not text:
        return None
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise Refused(400, "before is a moment with its UTC offset")
    return moment


def _version(info: SessionInfo) -> str:
    """What changes whenever the transcript does: its length and its last save."""
    return f"{info.length}@{info.updated_at.isoformat() if info.updated_at else '-'}"


def _pairs(texts: list[str]) -> dict[str, str]:
    """The ``metadata=K=V`` filters of the list page (an empty one is no filter)."""
    pairs: dict[str, str] = {}
    for text in filter(None, (text.strip() for text in texts)):
        name, equals, value = text.partition("=")
        if not equals or not name:
            raise Refused(400, f"a metadata filter is KEY=VALUE, got {text!r:.80}")
        pairs[name] = value
    return pairs


def _next_page(
    states: frozenset[RunState],
    pairs: dict[str, str],
    before: datetime.datetime | None,
    skip: int,
    shown: list[SessionInfo],
) -> str:
    """The query of the page after ``shown``: a moment to list before, and how many to skip there.

    ``updated_before`` is strict, so the next page lists before one microsecond after the
    last row's update and skips the rows of this page that share that update; sessions
    never saved (no update) come last, and are paged by count alone.
    """
    last = shown[-1].updated_at
    if last is None:
        cut, skipped = before, skip + len(shown)
    else:
        cut = last + datetime.timedelta(microseconds=1)
        ties = sum(1 for info in shown if info.updated_at == last)
        skipped = skip + len(shown) if cut == before else ties
    query = [("state", s.value) for s in sorted(states)] + [("metadata", f"{k}={v}") for k, v in sorted(pairs.items())]
    if cut is not None:
        query.append(("before", cut.isoformat()))
    return urlencode([*query, ("skip", str(skipped))])
