"""Server-sent events: the parser both endpoints read their streams with."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from agentsessions.endpoints import _sse
from agentsessions.endpoints._sse import ServerSentEvent, parse_sse

BOM = b"\xef\xbb\xbf"


def events(*chunks: bytes) -> list[tuple[str, str]]:
    return [(e.event, e.data) for e in parse_sse(chunks)]


def test_sse_lines_may_end_in_crlf_lf_or_cr_and_be_cut_anywhere() -> None:
    stream = b"event: a\r\ndata: 1\r\n\r\ndata: 2\n\ndata: 3\r\rdata: 4\r\n\r\n"
    expected = [("a", "1"), ("message", "2"), ("message", "3"), ("message", "4")]
    assert events(stream) == expected
    for cut in range(len(stream)):
        assert events(stream[:cut], stream[cut:]) == expected, cut
    assert events(*[bytes([b]) for b in stream]) == expected


def test_sse_multiline_data_comments_and_unknown_fields() -> None:
    stream = b": keep-alive\ndata: first\ndata:second\nid: 7\nretry: 10\nfoo\ndata\n\n"
    assert events(stream) == [("message", "first\nsecond\n")]


def test_sse_utf8_split_between_chunks_and_raw_line_separators_in_data() -> None:
    raw = 'data: {"t": "ü\u2028✓\x85"}\n\n'.encode()
    assert events(raw[:9], raw[9:11], raw[11:]) == [("message", '{"t": "ü\u2028✓\x85"}')]


def test_sse_an_event_without_its_blank_line_is_dispatched_marked_as_not_ended() -> None:
    # As the official SDKs do: their own recordings end without the last newline.
    assert list(parse_sse([b"data: done\n\ndata: cut"])) == [
        ServerSentEvent("message", "done"),
        ServerSentEvent("message", "cut", ended=False),
    ]
    assert list(parse_sse([b"data: x\n"])) == [ServerSentEvent("message", "x", ended=False)]
    assert list(parse_sse([b"data: x\n\n"])) == [ServerSentEvent("message", "x")]
    assert list(parse_sse([b"data: x\n\nevent: ping\n"])) == [ServerSentEvent("message", "x")]


def test_sse_a_leading_byte_order_mark_is_not_part_of_the_first_field_name() -> None:
    stream = BOM + b"event: message_start\ndata: {}\n\nevent: ping\ndata: {}\n\n"
    expected = [("message_start", "{}"), ("ping", "{}")]
    assert events(stream) == expected
    for cut in range(len(stream)):  # the mark itself cut in pieces too
        assert events(stream[:cut], stream[cut:]) == expected, cut
    assert events(*[bytes([b]) for b in stream]) == expected


def test_sse_only_one_leading_mark_is_dropped_and_none_later() -> None:
    # WHATWG: one leading U+FEFF is ignored; any other is an ordinary character.
    assert events(BOM + BOM + b"data: x\n\n") == []  # the field is then "\ufeffdata": unknown
    assert events(b"data: " + BOM + b"x\n\n") == [("message", "\ufeffx")]


class _CountingPattern:
    """The parser's line-end pattern, counting how many characters it is asked to scan."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.scanned = 0

    def split(self, text: str, *args: Any) -> list[str]:
        self.scanned += len(text)
        return self.pattern.split(text, *args)

    def finditer(self, text: str, *args: Any) -> Iterator[re.Match[str]]:
        self.scanned += len(text)
        return self.pattern.finditer(text, *args)


@pytest.mark.parametrize("piece", [1024, 7])
def test_sse_a_long_line_in_small_pieces_is_scanned_once(monkeypatch: pytest.MonkeyPatch, piece: int) -> None:
    # Work, not time: each character is looked at a bounded number of times however the
    # line is cut, so a 1 MB event in 1 KB pieces costs what it does in one piece.
    counting = _CountingPattern(_sse._LINE_END)
    monkeypatch.setattr(_sse, "_LINE_END", counting)
    size = 1_000_000 if piece > 100 else 20_000
    raw = b"data: " + b"x" * size + b"\n\n"
    parsed = list(parse_sse(raw[i : i + piece] for i in range(0, len(raw), piece)))
    assert parsed == [ServerSentEvent("message", "x" * size)]
    assert counting.scanned <= 2 * len(raw)
