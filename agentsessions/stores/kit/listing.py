"""Listing sessions in keyset pages: each page a query of its own, bounded by where the last one ended.

A store's ``sessions()`` reads ``PAGE_SIZE`` records at a time, newest update first, and
asks for the next page *below the last record seen* (never ``OFFSET``), so a page costs the
same however many sessions there are and no connection is held between pages. What differs
from store to store is the query; the loop around it is :func:`pages`::

    def _page(self, bound):  # None for the first page
        rows = ...  # at most PAGE_SIZE rows, below `bound`
        return rows, _info  # and how one row becomes a SessionInfo

    yield from pages(self._page, lambda row: (row.updated, row.id), "My store", PAGE_SIZE)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from agentsessions.runs import SessionInfo, listed

Row = TypeVar("Row")
Bound = TypeVar("Bound")

Page = tuple[Sequence[Row], Callable[[Row], SessionInfo]]
"""One page: its rows, and how a row becomes a :class:`~agentsessions.SessionInfo` (read at the page's clock)."""


def pages(
    fetch: Callable[[Bound | None], Page[Row]], after: Callable[[Row], Bound], store: str, size: int
) -> Iterator[SessionInfo]:
    """Every session ``fetch`` pages through, lazily, until a page comes back short.

    ``fetch(None)`` reads the first page and ``fetch(after(last_row))`` each next one, at
    most ``size`` rows each. Rows go through :func:`agentsessions.runs.listed`, so a record
    this version cannot read is logged under ``store`` and left out, not the end of the listing.
    """
    bound: Bound | None = None
    while True:
        rows, info = fetch(bound)
        yield from listed(rows, info, store)
        if len(rows) < size:
            return
        bound = after(rows[-1])
