"""Server-sent event parsing: one long event arriving in small pieces, 1 MB against 4 MB.

    python benchmarks/sse_parsing.py

A linear parser takes about four times as long for four times the data; a parser that
rescans what it holds with every piece takes about sixteen. The tests check linearity by
counting the characters scanned (tests/endpoints/test_endpoint_sse.py); this prints the time.
"""

from __future__ import annotations

import time

from agentsessions.endpoints._sse import parse_sse

PIECE = 1024
ROUNDS = 3


def seconds(size: int) -> float:
    """The best of a few times to parse one event of ``size`` bytes sent in PIECE-byte pieces."""
    raw = b"data: " + b"x" * size + b"\n\n"
    pieces = [raw[i : i + PIECE] for i in range(0, len(raw), PIECE)]
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        (event,) = parse_sse(pieces)
        best = min(best, time.perf_counter() - started)
        assert len(event.data) == size
    return best


def main() -> None:
    """Print both times and their ratio."""
    small, large = seconds(1_000_000), seconds(4_000_000)
    print(f"1 MB in {PIECE} B pieces: {small * 1000:.1f} ms")
    print(f"4 MB in {PIECE} B pieces: {large * 1000:.1f} ms")
    print(f"ratio: {large / small:.1f} (4 is linear, 16 quadratic)")


if __name__ == "__main__":
    main()
