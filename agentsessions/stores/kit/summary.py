"""What a session's record says of its transcript for a listing: the preview and the usage.

A chat application's sidebar shows each conversation's last words and what it cost. Both are
kept in the session's record, written in the step that saves the transcript, so that
``sessions()`` reports them without reading any message:

- :func:`preview` (:func:`agentsessions.runs.preview`, here for stores): the first
  :data:`PREVIEW_CHARS` characters of the text of the last message that has any, computed from
  the transcript the store is given.
- the usage, one short text the store keeps opaque. A run's saves carry what the run has used
  so far (cumulative for that run), so a save repeated after an unknown outcome records the
  same figures; the total of earlier runs is kept beside it, and a save under a new claim's
  token first adds the previous run's last figures to it (:func:`fold_usage`).
  :func:`stored_usage` reads the session's total back.
"""

from __future__ import annotations

import json

from agentsessions.errors import FormatError
from agentsessions.runs import PREVIEW_CHARS, preview
from agentsessions.usage import Usage

__all__ = ["PREVIEW_CHARS", "fold_usage", "preview", "stored_usage"]


def fold_usage(stored: str | None, token: int, run: Usage) -> str:
    """The usage text to store after a save under the claim ``token`` whose run has used ``run`` so far.

    ``stored`` is the text the record holds (``None`` or ``""``: nothing yet). A save under
    the token already recorded replaces that run's figures; under another token it first adds
    them to the earlier runs' total. The same save twice stores the same text.
    """
    before, last_token, last_run = _parsed(stored)
    if last_token != token:
        before = [b + r for b, r in zip(before, last_run, strict=True)]
    counts = [run.input_tokens, run.output_tokens, run.cache_read_tokens, run.cache_write_tokens]
    return json.dumps({"token": token, "run": counts, "before": before}, separators=(",", ":"))


def stored_usage(stored: str | None) -> Usage:
    """The session's total usage that a stored usage text holds (``Usage()`` for none)."""
    if not stored:
        return _NONE
    before, _, run = _parsed(stored)
    return Usage(*(b + r for b, r in zip(before, run, strict=True)))


_NONE = Usage()
_ZEROS = (0, 0, 0, 0)


def _parsed(stored: str | None) -> tuple[list[int], int | None, list[int]]:
    """``(before, token, run)`` of a stored usage text; a text this version cannot read is a ``FormatError``."""
    if not stored:
        return list(_ZEROS), None, list(_ZEROS)
    try:
        record = json.loads(stored)
        before, token, run = record["before"], record["token"], record["run"]
    except (ValueError, TypeError, KeyError) as error:
        raise FormatError(f"a session's stored usage is not one this version reads: {stored!r:.120}") from error
    if not (_counts(before) and _counts(run) and type(token) is int):
        raise FormatError(f"a session's stored usage is not one this version reads: {stored!r:.120}")
    return before, token, run


def _counts(value: object) -> bool:
    return isinstance(value, list) and len(value) == 4 and all(type(v) is int and v >= 0 for v in value)
