"""The console's pages, as small functions that return HTML; every value from the store is escaped.

No page carries a script or a style of its own: the layout links ``static/console.css`` and
``static/console.js``, which the content security policy allows (``'self'``), and nothing
inline. Links are relative to the console's root, so it works mounted under any prefix.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from html import escape
from urllib.parse import quote, urlencode

import attrs

from agentsessions import _format as fmt
from agentsessions.approvals import Approval
from agentsessions.runs import RunState, SessionInfo, Steer


def q(value: str) -> str:
    """``value`` for a URL's query (any str: lone surrogates pass as their UTF-8-like bytes)."""
    return quote(value, safe="", errors="surrogatepass")


def session_link(root: str, session_id: str) -> str:
    """The URL of a session's page."""
    return f"{root}/session?id={q(session_id)}"


def layout(root: str, title: str, body: str, *, notice: str = "") -> str:
    """A whole page around ``body``."""
    shown = f'<p class="notice">{escape(notice)}</p>' if notice else ""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)} · agentsessions console</title>"
        f'<link rel="stylesheet" href="{root}/static/console.css">'
        f'<script src="{root}/static/console.js" defer></script></head>'
        f'<body><nav><a href="{root}/">agentsessions console</a></nav><main>{shown}{body}</main></body></html>'
    )


def csrf_field(csrf: str) -> str:
    """The hidden CSRF field every form carries."""
    return f'<input type="hidden" name="csrf" value="{escape(csrf)}">'


# --- The list ---------------------------------------------------------------------------------


@attrs.frozen
class Listing:
    """What the list page shows: one page of sessions, the counts, the filter, the next page's query."""

    rows: Sequence[SessionInfo]
    counts: Mapping[RunState, int]
    counted_all: bool
    states: frozenset[RunState]
    next_query: str | None
    first_page: bool
    metadata: Mapping[str, str] = attrs.field(factory=dict)


def listing(root: str, page: Listing, now: datetime.datetime) -> str:
    """The sessions page: state filters with their counts, the table, the link to the next page."""
    total = sum(page.counts.values())
    plus = "" if page.counted_all else "+"
    pairs = [("metadata", f"{k}={v}") for k, v in sorted(page.metadata.items())]
    filters = [_filter(root, "all", f"{total}{plus}", _query(pairs), not page.states)]
    for state in RunState:
        count = f"{page.counts.get(state, 0)}{plus if page.counts.get(state) else ''}"
        query = _query([("state", state.value), *pairs])
        filters.append(_filter(root, state.value, count, query, page.states == {state}))
    rows = "".join(_row(root, info, now) for info in page.rows) or '<tr><td colspan="8">no sessions</td></tr>'
    more = []
    if not page.first_page:
        first = _query([*(("state", s.value) for s in sorted(page.states)), *pairs])
        more.append(f'<a href="{root}/{escape(first)}">first page</a>')
    if page.next_query is not None:
        more.append(f'<a class="next" href="{root}/?{escape(page.next_query)}">next page</a>')
    # A GET form: the filter is in the address, so a page can be bookmarked and shared.
    # One pair in the box; the others (from the address) ride along hidden.
    kept = [("state", s.value) for s in sorted(page.states)] + pairs[:-1]
    hidden = "".join(f'<input type="hidden" name="{name}" value="{escape(value)}">' for name, value in kept)
    shown = escape(pairs[-1][1]) if pairs else ""
    search = (
        f'<form class="metadata" method="get" action="{root}/">{hidden}'
        f'<input name="metadata" placeholder="user=42" value="{shown}" aria-label="metadata KEY=VALUE">'
        '<button type="submit">filter</button></form>'
    )
    # The first page follows the store (static/console.js reloads its rows); later ones stay put.
    refresh = ' data-refresh="2000"' if page.first_page else ""
    return (
        f'<h1>Sessions</h1><p class="filters">{" ".join(filters)}</p>{search}'
        f'<table class="sessions"{refresh}><thead><tr><th>id</th><th>state</th><th>messages</th><th>steers</th>'
        "<th>updated (UTC)</th><th>holder</th><th>lease</th><th>approvals</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        f'<p class="pages">{" · ".join(more)}</p>'
    )


def _query(pairs: Sequence[tuple[str, str]]) -> str:
    return "?" + urlencode(pairs) if pairs else ""


def _filter(root: str, label: str, count: str, query: str, current: bool) -> str:
    css = ' class="current"' if current else ""
    return f'<a{css} href="{root}/{escape(query)}">{label} <span class="count">{count}</span></a>'


def _row(root: str, info: SessionInfo, now: datetime.datetime) -> str:
    cancelling = " (cancelling)" if info.cancel_requested else ""
    return (
        f'<tr><td><a href="{escape(session_link(root, info.id))}">{escape(info.id)}</a>{_preview(info)}</td>'
        f'<td><span class="state {info.state.value}">{info.state.value}{cancelling}</span></td>'
        f"<td>{info.length}</td><td>{info.pending_steers}</td><td>{fmt.utc(info.updated_at)}</td>"
        f"<td>{escape(info.holder or '-')}</td><td>{escape(fmt.lease(info, now))}</td>"
        f"<td>{_pending(info)}</td></tr>"
    )


def _preview(info: SessionInfo) -> str:
    """The session's last words under its id: what a chat sidebar shows."""
    return f'<div class="preview">{escape(info.preview)}</div>' if info.preview else ""


def _tokens(info: SessionInfo) -> str:
    usage = info.usage
    read = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return f"{read:,} in ({usage.cache_read_tokens:,} from the cache), {usage.output_tokens:,} out"


def _pending(info: SessionInfo) -> str:
    """A waiting session's undecided calls, in the list: what someone has to look at."""
    if info.state is not RunState.WAITING:
        return ""
    return f'<span class="pending-approvals">{info.pending_approvals} pending</span>'


# --- One session --------------------------------------------------------------------------


def status(info: SessionInfo, steers: Sequence[Steer], now: datetime.datetime) -> str:
    """The record of a session: state, holder, lease, what the run does, length, last update, the steers waiting.

    The steers are listed in the order a run takes them, by their text: a store's own
    numbering means nothing to a reader.
    """
    cancelling = ' <span class="badge">cancel requested</span>' if info.cancel_requested else ""
    held = {RunState.RUNNING: "holds it now", RunState.STALLED: "held it; its lease lapsed"}
    holder = "-"
    if info.holder is not None:
        holder = f"{escape(info.holder)} ({held.get(info.state, 'its last run; none holds it now')})"
    # The script names the tool when the transcript shows a call under way (a journal's mark).
    doing = '<dt>now</dt><dd class="activity">in a step: asking the model or running tools</dd>'
    waiting = "".join(f"<li>{escape(s.text)}</li>" for s in steers)
    return (
        f'<dl><dt>state</dt><dd><span class="state {info.state.value}">{info.state.value}</span>{cancelling}</dd>'
        f"<dt>holder</dt><dd>{holder}</dd><dt>lease</dt><dd>{escape(fmt.lease(info, now))}</dd>"
        + (doing if info.state is RunState.RUNNING else "")
        + (f"<dt>approvals</dt><dd>{_pending(info)}</dd>" if info.state is RunState.WAITING else "")
        + f"<dt>messages</dt><dd>{info.length}</dd><dt>updated (UTC)</dt><dd>{fmt.utc(info.updated_at)}</dd>"
        f'<dt>tokens</dt><dd class="usage">{_tokens(info)}</dd>'
        f"<dt>steers waiting</dt><dd>{len(steers)}</dd></dl>" + (f'<ol class="steers">{waiting}</ol>' if steers else "")
    )


def session(
    root: str,
    info: SessionInfo,
    status_html: str,
    transcript_html: str,
    version: str,
    csrf: str,
    steer_key: str = "",
    approvals_html: str = "",
) -> str:
    """A session's page: its record, the actions, and the transcript that the script keeps growing.

    ``steer_key``, when the store keeps steer keys, goes into the steer form: a form sent
    twice (a double click, a resent request) stores its steer once. ``approvals_html``
    (:func:`approvals`) is the wait's panel; the script replaces it as decisions arrive.
    """
    sid = escape(info.id)
    hidden = csrf_field(csrf) + f'<input type="hidden" name="id" value="{sid}">'
    poll = escape(f"{root}/session/poll?id={q(info.id)}")
    # Panels of the side column, in order; an approvals panel goes beside the steer one.
    panels = [
        f'<section class="panel"><h2>Run</h2><div id="status">{status_html}</div></section>',
        f'<div id="approvals">{approvals_html}</div>',
        _steer_panel(root, hidden, steer_key),
        _actions_panel(root, info, hidden),
    ]
    return (
        f'<h1>Session <code class="session-id">{sid}</code></h1><div class="columns"><aside>{"".join(panels)}</aside>'
        f'<section class="transcript-column"><h2>Transcript</h2><div id="transcript" data-poll="{poll}" '
        f'data-length="{info.length}" data-version="{escape(version)}" data-state="{info.state.value}">'
        f"{transcript_html}</div></section></div>"
    )


def approvals_mark(info: SessionInfo, calls: Sequence[Approval]) -> str:
    """What changes when the wait's panel should: the state and every call's decision."""
    if info.state is not RunState.WAITING:
        return ""
    decided = ";".join(f"{c.call_id}={c.decision or '-'}" for c in calls)
    return f"{len(calls)}:{decided}"


def approvals(root: str, info: SessionInfo, calls: Sequence[Approval], csrf: str) -> str:
    """The panel of a waiting session: each call of the wait, with Approve and Reject for the undecided.

    ``data-mark`` is :func:`approvals_mark`: the page's script asks for the panel again
    when the console's mark differs (a decision made elsewhere, a run that went on).
    """
    if info.state is not RunState.WAITING:
        return ""
    hidden = csrf_field(csrf) + f'<input type="hidden" name="id" value="{escape(info.id)}">'
    shown = "".join(_approval(root, hidden, call) for call in calls) or "<p>no calls</p>"
    end = (
        f'<form method="post" action="{root}/cancel" class="end-wait">{hidden}'
        '<button type="submit" name="do" value="end-wait" class="danger">Cancel: end the wait</button></form>'
    )
    return (
        f'<section class="panel approvals" data-mark="{escape(approvals_mark(info, calls))}">'
        f"<h2>Approvals</h2>{shown}{end}</section>"
    )


def decided(calls: Sequence[Approval]) -> str:
    """The calls of a wait as they stand, without forms (the page after a conflict)."""
    return "".join(_approval("", "", call) for call in calls)


def _expiry(call: Approval) -> str:
    """When an undecided call's approval expires, for its heading ("" without a deadline)."""
    if call.expires_at is None or call.decision is not None:
        return ""
    return f", expires {fmt.utc(call.expires_at)} UTC"


def _approval(root: str, hidden: str, call: Approval) -> str:
    head = (
        f'<p><strong class="tool">{escape(call.tool)}</strong> <code class="call-id">{escape(call.call_id)}</code>'
        f"<br>requested {fmt.utc(call.requested_at)} UTC{_expiry(call)}</p>"
    )
    box = f'<div class="approval" data-call="{escape(call.call_id)}">{head}'
    if call.decision is not None or not hidden:
        asked = ""
        if call.original_input is not None:  # approved with an edited input: what the model asked, too
            asked = f'<p class="asked">the model asked: <code>{escape(call.original_input)}</code></p>'
        return f'{box}<pre class="input">{escape(call.input)}</pre>{asked}{_decision(call)}</div>'
    # Each form names the call and the input it shows: the console refuses a decision on a
    # call that changed since the page showed it.
    which = hidden + (
        f'<input type="hidden" name="call" value="{escape(call.call_id)}">'
        f'<input type="hidden" name="seen" value="{escape(call.input)}">'
    )
    who = '<label>by <input name="by" value="console" aria-label="decided by"></label>'
    return (
        f'{box}<form method="post" action="{root}/approve">{which}'
        # The newline after <textarea>: a parser drops one there, so the input keeps its own.
        '<label>input <textarea name="input" rows="3" aria-label="input">\n'
        f"{escape(call.input)}</textarea></label>"
        f'{who}<button type="submit" name="do" value="approve">Approve</button></form>'
        f'<form method="post" action="{root}/reject">{which}'
        '<label>reason <input name="reason" aria-label="reason"></label>'
        f'{who}<button type="submit" name="do" value="reject" class="danger">Reject</button></form></div>'
    )


def _decision(call: Approval) -> str:
    if call.decision is None:
        return '<p class="decision undecided">undecided</p>'
    by = f" by {escape(call.by)}" if call.by else ""
    reason = f': <span class="reason">{escape(call.reason)}</span>' if call.reason else ""
    at = f" at {fmt.utc(call.decided_at)} UTC" if call.decided_at else ""
    return f'<p class="decision {escape(call.decision)}">{escape(call.decision)}{by}{at}{reason}</p>'


def _steer_panel(root: str, hidden: str, steer_key: str) -> str:
    key = f'<input type="hidden" name="key" value="{escape(steer_key)}">' if steer_key else ""
    return (
        f'<section class="panel"><h2>Steer</h2><form method="post" action="{root}/steer">{hidden}{key}'
        '<textarea name="text" rows="3" required aria-label="steer text"></textarea>'
        '<button type="submit" name="do" value="steer">Steer</button></form></section>'
    )


def _actions_panel(root: str, info: SessionInfo, hidden: str) -> str:
    # Cancel is offered while a run holds the session, and the fork offers the whole
    # transcript: the script keeps both true as the session changes.
    live = "" if info.state is RunState.RUNNING else " hidden"
    return (
        f'<section class="panel"><h2>Actions</h2><form method="post" action="{root}/cancel" id="cancel"{live}>'
        f'{hidden}<button type="submit" name="do" value="cancel">Cancel the run</button></form>'
        f'<form method="post" action="{root}/fork" class="fork">{hidden}'
        f'<label>new id <input name="new" required value="{escape(info.id)}-fork"></label>'
        f'<label>first <input name="at" id="fork-at" type="number" min="0" max="{info.length}" value="{info.length}">'
        " messages</label>"
        '<button type="submit" name="do" value="fork">Fork</button></form>'
        f'<p><a class="danger" href="{escape(root + "/delete?id=" + q(info.id))}">Delete…</a></p></section>'
    )


def confirm_delete(root: str, info: SessionInfo, csrf: str) -> str:
    """The confirmation step before a delete."""
    sid = escape(info.id)
    return (
        f"<h1>Delete session <code>{sid}</code>?</h1><p>This removes its transcript ({fmt.messages(info.length)}), "
        f"its steers and its record, for every replica. It cannot be undone.</p>"
        f'<form method="post" action="{root}/delete">{csrf_field(csrf)}<input type="hidden" name="id" value="{sid}">'
        f'<button type="submit" name="do" value="delete" class="danger">Delete it</button> '
        f'<a href="{escape(session_link(root, info.id))}">keep it</a></form>'
    )


def problem(root: str, text: str, back: str | None = None) -> str:
    """The body of an error page: what went wrong, and a way back."""
    link = f'<p><a href="{escape(back)}">back</a></p>' if back else f'<p><a href="{root}/">the sessions</a></p>'
    return f'<h1>Not done</h1><p class="problem">{escape(text)}</p>{link}'
