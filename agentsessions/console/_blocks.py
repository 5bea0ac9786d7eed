"""A transcript as HTML: one ``<article>`` per message, one element per block, every value escaped.

The transcript is untrusted model output (and tool output): every str goes through
:func:`html.escape` before it meets markup, a URL becomes a link only when it is http(s),
and an image is shown inline only as a ``data:`` URL of an ``image/*`` media type whose
data is plain base64 (the page's content security policy allows no other image source).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from html import escape

from agentsessions.messages import Content, ContentType, Message
from agentsessions.persistence import IN_DOUBT

_IMAGE_TYPE = re.compile(r"image/[A-Za-z0-9.+-]{1,60}")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\r\n]*")
_WEB = re.compile(r"https?://", re.IGNORECASE)


def messages(transcript: Sequence[Message], start: int = 0) -> str:
    """The messages of ``transcript`` from index ``start`` on, numbered as ``fork --at`` counts them.

    In the last message, a result that is the journal's in-doubt mark is a call under way
    while a run holds the session (the journal saves it just before the tool runs), and in
    doubt once none does: both are in the page, and the session's state picks one.
    """
    last = len(transcript) - 1
    calls = _tool_names(transcript[last - 1]) if last >= 1 else {}
    return "".join(
        message(index, transcript[index], calls if index == last else None) for index in range(start, last + 1)
    )


def _tool_names(item: Message) -> dict[str, str]:
    return {use.id: use.name for use in item.tool_uses}


def message(index: int, item: Message, underway: dict[str, str] | None = None) -> str:
    """One message: its number and role, then its blocks.

    ``underway`` maps the ids of the calls a run may be running to their tools' names: an
    in-doubt result for one of them is shown as a call under way (see :func:`messages`).
    """
    role = item.role.value
    blocks = "".join(
        _underway(content, underway[content.tool_use_id])
        if underway and content.tool_use_id in underway and _in_doubt(content)
        else block(content)
        for content in item.content
    )
    return (
        f'<article class="message {role}" id="m{index}" data-index="{index}">'
        f'<header><span class="number">#{index}</span> {role}</header>{blocks}</article>'
    )


def block(content: Content) -> str:
    """One content block as HTML."""
    kind = content.type
    if kind is ContentType.TEXT:
        return f'<div class="text">{escape(content.text)}</div>'
    if kind is ContentType.THINKING:
        signed = " (signed)" if content.signature else ""
        summary = f"<summary>thinking{signed}</summary>"
        return f'<details class="thinking">{summary}<div class="text">{escape(content.text)}</div></details>'
    if kind is ContentType.REDACTED_THINKING:
        return f'<div class="thinking redacted">redacted thinking ({len(content.data)} characters, encrypted)</div>'
    if kind is ContentType.TOOL_USE:
        return (
            f'<div class="tool-call"><span class="label">tool call</span> <code>{escape(content.name)}</code> '
            f'<span class="call-id">[{escape(content.id)}]</span><pre>{escape(content.input)}</pre></div>'
        )
    if kind is ContentType.TOOL_RESULT:
        error = ' <span class="badge error">error</span>' if content.is_error else ""
        css = "tool-result error" if content.is_error else "tool-result"
        return (
            f'<div class="{css}"><span class="label">tool result</span>{error} '
            f'<span class="call-id">[{escape(content.tool_use_id)}]</span><pre>{escape(content.text)}</pre></div>'
        )
    if kind is ContentType.IMAGE or kind is ContentType.DOCUMENT:
        return _media(content)
    if kind is ContentType.COMPACTION:
        return (
            f'<div class="compaction"><span class="label">summary of messages #0 to #{content.covers - 1}</span>'
            f'<div class="text">{escape(content.text)}</div></div>'
        )
    return _raw(content)


def _in_doubt(content: Content) -> bool:
    return content.type is ContentType.TOOL_RESULT and content.is_error and content.text == IN_DOUBT


def _underway(content: Content, tool: str) -> str:
    """An in-doubt result that may be a call under way: the stylesheet shows the side the session's state picks."""
    return (
        f'<div class="tool-result error in-doubt" data-tool="{escape(tool)}"><span class="label">tool result</span> '
        '<span class="badge underway">running</span><span class="badge error doubt">in doubt</span> '
        f'<span class="call-id">[{escape(content.tool_use_id)}]</span>'
        f'<p class="underway">{escape(tool)} is running; its result shows here when it returns</p>'
        f'<pre class="doubt">{escape(content.text)}</pre></div>'
    )


def _media(content: Content) -> str:
    title = f" <q>{escape(content.name)}</q>" if content.name else ""
    returned = f' <span class="call-id">from [{escape(content.tool_use_id)}]</span>' if content.tool_use_id else ""
    label = f'<span class="label">{content.type.value}</span>{title}{returned}'
    if content.url:
        return f'<div class="media">{label} {_link(content.url)}</div>'
    size = f"{escape(content.media_type)}, {len(content.data)} base64 characters"
    if (
        content.type is ContentType.IMAGE
        and _IMAGE_TYPE.fullmatch(content.media_type)
        and _BASE64.fullmatch(content.data)
    ):
        source = f"data:{content.media_type};base64,{content.data}"
        return f'<figure class="media">{label} <img src="{escape(source)}" alt="image ({size})"></figure>'
    return f'<div class="media">{label} ({size})</div>'


def _link(url: str) -> str:
    """A link for an http(s) URL; any other scheme (``javascript:``...) stays text."""
    if _WEB.match(url):
        return f'<a href="{escape(url)}" rel="noreferrer noopener" target="_blank">{escape(url)}</a>'
    return f"<code>{escape(url)}</code>"


def _raw(content: Content) -> str:
    kind = json.loads(content.data).get("type")
    shown = f'<div class="text">{escape(content.text)}</div>' if content.text else ""
    name = escape(kind) if isinstance(kind, str) else "(untyped)"
    return f'<div class="raw"><span class="label">{escape(content.name)} block</span> <code>{name}</code>{shown}</div>'
