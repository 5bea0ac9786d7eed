"""What a store reads back from a record: text kept as bytes, and times in UTC.

Stores keep ids, holders and steers as the text's UTF-8 (see :func:`agentsessions.codec.encode_text`),
and times in one of three forms: an aware ``timestamptz`` (PostgreSQL), a naive ``DATETIME``
that is UTC by convention (MySQL/MariaDB), or whole microseconds since the Unix epoch
(SQLite, MongoDB, Redis). Whatever the form, a store hands out aware UTC datetimes.
"""

from __future__ import annotations

import datetime
from typing import overload

from agentsessions.codec import decode_text

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
"""The Unix epoch, aware: microsecond counts are measured from it."""

MICROSECOND = datetime.timedelta(microseconds=1)
"""One microsecond, the resolution of every stored time."""


def text(data: bytes | None) -> str | None:
    """A column of encoded text as ``str``; ``None`` stays ``None``."""
    return None if data is None else decode_text(data)


@overload
def utc(value: datetime.datetime) -> datetime.datetime: ...
@overload
def utc(value: None) -> None: ...
@overload
def utc(value: datetime.datetime | None) -> datetime.datetime | None: ...


def utc(value: datetime.datetime | None) -> datetime.datetime | None:
    """A datetime the database gave back, as an aware UTC datetime; ``None`` stays ``None``.

    An aware value is converted to UTC; a naive one (MySQL's ``DATETIME`` carries no zone)
    is taken to be UTC already, as every time a store writes is.
    """
    if value is None:
        return None
    return value.replace(tzinfo=datetime.UTC) if value.tzinfo is None else value.astimezone(datetime.UTC)


def micros(moment: datetime.datetime) -> int:
    """An aware datetime as whole microseconds since :data:`EPOCH` (rounded down)."""
    return (moment - EPOCH) // MICROSECOND


def moment(micros: int | bytes) -> datetime.datetime:
    """Microseconds since :data:`EPOCH` (an ``int``, or its digits as ``bytes``) as an aware UTC datetime."""
    return EPOCH + int(micros) * MICROSECOND


def span(seconds: float) -> int:
    """A duration in seconds (a lease) as whole microseconds, rounded to the nearest."""
    return round(seconds * 1_000_000)
