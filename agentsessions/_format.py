"""How sessions are printed: tables and transcripts for people, JSON for scripts.

The ``agentsessions`` command prints with it; the console shows times as it does.

Text from the store (ids, holders, steers, messages) is shown with control characters and
lone surrogates escaped (``\\x1b``, ``\\ud83d``), so a transcript cannot move the cursor or
recolour the terminal, and printing never fails on text UTF-8 cannot carry. Tool arguments
are shown as the model wrote them, with only that escaping. The JSON forms escape nothing
beyond what JSON itself does: they are for programs.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable, Sequence
from typing import IO, Any

import attrs

from agentsessions.approvals import Approval
from agentsessions.messages import Content, ContentType, Message
from agentsessions.runs import RunState, SessionInfo, Steer

# C0 and C1 controls (newline and tab are kept in multi-line text) and lone surrogates.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_UNSAFE_IN_LINE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_INDENT = "    "


_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: str) -> str:
    """``text`` safe for a terminal; newlines and tabs kept."""
    return _UNSAFE.sub(_escape, text)


def clean_line(text: str) -> str:
    """``text`` safe for a terminal and on one line: newlines and tabs escaped too."""
    return _UNSAFE_IN_LINE.sub(_escape, text)


def utc(moment: datetime.datetime | None) -> str:
    """A moment to the second, in UTC, for people: ``2025-06-01 12:00:03``; ``-`` for ``None``."""
    return "-" if moment is None else moment.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def span(seconds: float) -> str:
    """A duration for people, in its largest whole unit: ``45s``, ``12m``, ``3h``, ``2d``."""
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def lease(info: SessionInfo, now: datetime.datetime) -> str:
    """The lease for people: ``27s left`` while live, ``lapsed 3m ago`` after, ``-`` when there is none."""
    if info.lease_expires_at is None or info.state not in (RunState.RUNNING, RunState.STALLED):
        return "-"
    left = (info.lease_expires_at - now).total_seconds()
    return f"{span(left)} left" if left > 0 else f"lapsed {span(left)} ago"


def info_json(info: SessionInfo) -> dict[str, Any]:
    """A session's record as a JSON object; times in ISO 8601 with their UTC offset, to the microsecond."""
    return {
        "id": info.id,
        "state": info.state.value,
        "length": info.length,
        "updated_at": _iso(info.updated_at),
        "holder": info.holder,
        "lease_expires_at": _iso(info.lease_expires_at),
        "pending_steers": info.pending_steers,
        "cancel_requested": info.cancel_requested,
        "metadata": info.metadata,
        "pending_approvals": info.pending_approvals,
        "approval_deadline": _iso(info.approval_deadline),
        "usage": attrs.asdict(info.usage),
        "preview": info.preview,
    }


def _iso(moment: datetime.datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(datetime.UTC).isoformat()


def dump_json(obj: object) -> str:
    """One line of JSON; non-ASCII kept as is unless some text holds a lone surrogate (then all is escaped)."""
    text = json.dumps(obj, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        # Only \uXXXX escapes can carry a lone surrogate; JSON readers take them back exactly.
        return json.dumps(obj)
    return text


_COLUMNS = ("ID", "STATE", "MESSAGES", "STEERS", "UPDATED (UTC)", "HOLDER", "LEASE")


def table(infos: Iterable[SessionInfo], now: datetime.datetime) -> list[str]:
    """The lines of ``list``'s table: a header, then one row per session (none: the header alone)."""
    rows = [_COLUMNS]
    for info in infos:
        state = info.state.value + (" (cancelling)" if info.cancel_requested else "")
        rows.append(
            (
                clean_line(info.id),
                state,
                str(info.length),
                str(info.pending_steers),
                utc(info.updated_at),
                clean_line(info.holder or "-"),
                lease(info, now),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    right = {2, 3}  # counts line up on their last digit
    lines = []
    for row in rows:
        pairs = enumerate(zip(row, widths, strict=True))
        cells = (cell.rjust(width) if i in right else cell.ljust(width) for i, (cell, width) in pairs)
        lines.append("  ".join(cells).rstrip())
    return lines


def header(info: SessionInfo, steers: Sequence[Steer], now: datetime.datetime) -> list[str]:
    """``show``'s summary of the record: state, holder, lease, length, update, steers waiting."""
    lines = [f"session   {clean_line(info.id)}", f"state     {info.state.value}"]
    if info.cancel_requested:
        lines[-1] += " (cancel requested: the run stops before its next step)"
    if info.holder is not None:
        held = {RunState.RUNNING: "holds it now", RunState.STALLED: "held it; its lease lapsed"}
        lines.append(f"holder    {clean_line(info.holder)} ({held.get(info.state, 'its last run; none holds it now')})")
    if info.lease_expires_at is not None and info.state in (RunState.RUNNING, RunState.STALLED):
        lines.append(f"lease     expires {utc(info.lease_expires_at)} UTC ({lease(info, now)})")
    updated = "never saved"
    if info.updated_at is not None:
        updated = f"updated {utc(info.updated_at)} UTC ({span((now - info.updated_at).total_seconds())} ago)"
    lines.append(f"messages  {info.length}, {updated}")
    if info.state is RunState.WAITING:
        due = "" if info.approval_deadline is None else f", the first expiring {utc(info.approval_deadline)} UTC"
        lines[1] += f" (for approval: {info.pending_approvals} call(s) undecided{due}; agentsessions approvals ID)"
    lines.append(f"steers    {len(steers)} waiting" + (":" if steers else ""))
    lines.extend(f"{_INDENT}[{steer.seq}] {clean_line(steer.text)}" for steer in steers)
    return lines


def transcript(messages: Sequence[Message]) -> list[str]:
    """``show``'s transcript: each message numbered (the number ``fork --at`` takes), then its blocks."""
    lines: list[str] = []
    for index, message in enumerate(messages):
        lines.append(f"#{index} {message.role.value}")
        for block in message.content:
            lines.extend(_block(block))
    return lines


def _block(block: Content) -> list[str]:
    kind = block.type
    if kind is ContentType.TOOL_USE:
        first = f"tool call {clean_line(block.name)} [{clean_line(block.id)}]: {clean(block.input)}"
    elif kind is ContentType.TOOL_RESULT:
        marker = " ERROR" if block.is_error else ""
        first = f"tool result [{clean_line(block.tool_use_id)}]{marker}: {clean(block.text)}"
    elif kind is ContentType.THINKING:
        first = f"thinking{' (signed)' if block.signature else ''}: {clean(block.text)}"
    elif kind is ContentType.REDACTED_THINKING:
        first = f"redacted thinking ({len(block.data)} characters)"
    elif kind is ContentType.IMAGE or kind is ContentType.DOCUMENT:
        first = _media(block)
    elif kind is ContentType.COMPACTION:
        first = f"summary of messages #0 to #{block.covers - 1}: {clean(block.text)}"
    elif kind is ContentType.RAW:
        shown = f": {clean(block.text)}" if block.text else ""
        first = f"{clean_line(block.name)} block {clean_line(_raw_type(block.data))}{shown}"
    else:
        first = clean(block.text)
    # Continuation lines sit under the block's first line, so blocks stay apart however long.
    return [_INDENT + line for line in first.split("\n")]


def _media(block: Content) -> str:
    where = (
        clean_line(block.url) if block.url else f"{clean_line(block.media_type)}, {len(block.data)} base64 characters"
    )
    title = f" {clean_line(block.name)!r}" if block.name else ""
    returned = f" from tool call [{clean_line(block.tool_use_id)}]" if block.tool_use_id else ""
    return f"{block.type.value}{title}{returned}: {where}"


def _raw_type(data: str) -> str:
    kind = json.loads(data).get("type")
    return kind if isinstance(kind, str) else "(untyped)"


def show_json(info: SessionInfo, steers: Sequence[Steer], transcript_dump: str) -> dict[str, Any]:
    """``show --json``: the record, the steers waiting, and the transcript in the ``dumps`` form."""
    return {
        **info_json(info),
        "steers": [{"seq": steer.seq, "text": steer.text} for steer in steers],
        "transcript": json.loads(transcript_dump),
    }


def messages(count: int) -> str:
    """``1 message``, ``4 messages``."""
    return f"{count} message" if count == 1 else f"{count} messages"


def one_line(text: str) -> str:
    """``text`` on one line: its lines stripped and joined by spaces (for errors on stderr)."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def write_utf8(out: IO[str], text: str) -> None:
    """Write ``text`` as UTF-8 whatever the locale says: through the bytes under ``out`` when it has them."""
    buffer = getattr(out, "buffer", None)
    if buffer is None:
        out.write(text)
        return
    out.flush()
    buffer.write(text.encode())
    buffer.flush()


def approvals(calls: Sequence[Approval]) -> list[str]:
    """A wait's calls, one line each: id, tool, decision (``undecided``), who, the input, a rejection's reason."""
    lines = []
    for call in calls:
        decided = call.decision or "undecided"
        who = f" by {clean_line(call.by)}" if call.by else ""
        why = f" ({clean_line(call.reason)})" if call.reason else ""
        due = f" (expires {_iso(call.expires_at)})" if call.expires_at is not None and call.decision is None else ""
        lines.append(f"{clean_line(call.call_id)}  {call.tool}  {decided}{due}{who}{why}  {one_line(call.input)}")
    return lines


def approval_json(call: Approval) -> dict[str, Any]:
    """One call of a wait, as ``approvals --json`` writes it."""
    fields = ("call_id", "tool", "input", "original_input", "decision", "by", "reason")
    return {
        **{name: getattr(call, name) for name in fields},
        "requested_at": _iso(call.requested_at),
        "decided_at": _iso(call.decided_at),
        "expires_at": _iso(call.expires_at),
    }
