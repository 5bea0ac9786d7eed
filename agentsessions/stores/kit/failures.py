"""The one wording of a store's failures, so every store's errors read alike.

``could_not("PostgreSQL store", "save the transcript", "s1")`` is
``"PostgreSQL store could not save the transcript for session 's1'"``; each store adds a
colon and what its driver said, and what to do about it. :func:`translated` does that for
a block of driver calls: the driver's exceptions leave it as a
:class:`~agentsessions.errors.StoreError` chained from them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from agentsessions.errors import StoreError
from agentsessions.stores.kit.incremental import KnownSessions

Failure = Callable[[str, BaseException], StoreError]
"""Builds the error to raise from the :func:`could_not` sentence and the driver's exception."""


def could_not(store: str, action: str, session_id: str | None = None) -> str:
    """What failed: the store, the action, and the session when there is one."""
    where = f" for session {session_id!r:.80}" if session_id else ""
    return f"{store} could not {action}{where}"


def plain(what: str, error: BaseException) -> StoreError:
    """``what``, a colon and what the driver said: the :class:`Failure` when nothing more is known."""
    return StoreError(f"{what}: {error}")


def first_line(error: BaseException) -> str:
    """The first line of what ``error`` says (a server's detail and hints follow it), or its type's name."""
    return str(error).strip().split("\n", 1)[0] or type(error).__name__


@contextmanager
def translated(
    errors: type[BaseException] | tuple[type[BaseException], ...],
    store: str,
    action: str,
    session_id: str | None = None,
    *,
    known: KnownSessions | None = None,
    failure: Failure = plain,
) -> Iterator[None]:
    """Run the block; a driver's ``errors`` leave it as ``failure``'s :class:`StoreError`, chained.

    ``store``, ``action`` and ``session_id`` make the :func:`could_not` sentence the error
    starts with. When a session is named, ``known`` forgets it: after a failed write the
    stored revision is no longer what this store object last saw, so the next save
    reads the stored rows first.
    """
    try:
        yield
    except errors as error:
        if session_id and known is not None:
            known.forget(session_id)
        raise failure(could_not(store, action, session_id), error) from error
