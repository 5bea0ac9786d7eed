"""Server-sent events (``text/event-stream``), parsed from raw bytes cut anywhere.

Linear in the input however it is cut: each new piece is scanned once, and a line that
arrives in many pieces is joined once, when its end arrives.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator

import attrs

_LINE_END = re.compile(r"\r\n|\r|\n")


@attrs.frozen
class ServerSentEvent:
    """One dispatched event of a ``text/event-stream``: its name (``"message"`` by default) and data.

    ``ended`` is false for the last event of a stream that stopped without the blank line
    that ends an event: it may be whole (a recording without its last newline), or cut.
    """

    event: str
    data: str
    ended: bool = True


def _lines(chunks: Iterable[bytes]) -> Iterator[str | None]:
    """The stream's lines, then ``None`` for its end."""
    # utf-8-sig drops one leading byte-order mark, even when it arrives cut in pieces.
    decoder = codecs.getincrementaldecoder("utf-8-sig")("replace")
    partial: list[str] = []  # the pieces of the line whose end has not arrived yet
    after_cr = False  # the last piece ended in CR: a LF starting the next one completes a CRLF
    for chunk in chunks:
        text = decoder.decode(chunk)
        if not text:
            continue  # half a UTF-8 sequence: nothing decoded, and after_cr still holds
        if after_cr and text[0] == "\n":
            text = text[1:]
        after_cr = text.endswith("\r")
        *ended, rest = _LINE_END.split(text)
        if ended:
            partial.append(ended[0])
            yield "".join(partial)
            yield from ended[1:]
            partial = []
        if rest:
            partial.append(rest)
    if partial:
        yield "".join(partial)  # the last line, without its end
    yield None


def parse_sse(chunks: Iterable[bytes]) -> Iterator[ServerSentEvent]:
    """Events from the raw bytes of an event stream, cut anywhere.

    Follows the WHATWG rules the providers rely on: one leading byte-order mark is
    ignored; lines end in CRLF, LF or CR (and nothing else, though JSON may hold a raw
    U+2028); ``data:`` lines join with newlines; a blank line dispatches; a line
    starting with ``:`` is a comment; ``id`` and ``retry`` are ignored. A last event
    without its blank line is dispatched too, with ``ended=False``, as the official SDKs
    do: a recording may lack its last newline, and a cut stream is told by its data.
    """
    event = ""
    data: list[str] = []
    for line in _lines(chunks):
        if line is None:
            if data:
                yield ServerSentEvent(event or "message", "\n".join(data), ended=False)
            return
        if not line:
            if data:
                yield ServerSentEvent(event or "message", "\n".join(data))
            event, data = "", []
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
