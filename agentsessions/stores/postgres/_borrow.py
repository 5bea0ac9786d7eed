"""Borrowing a live connection from the pool, within a call's deadline, without a round trip.

A connection that sat in the pool while the server restarted, or while someone ran
``pg_terminate_backend`` on it, is dead, and the pool does not know: it would lend it, and
the call it is lent to would fail. A round trip per borrow (the pool's ``check``) finds
out, at the cost of a round trip on every call. The server says so itself instead: a
backend that ends sends its reason (``FATAL: terminating connection ...``) and closes
the socket, so an idle connection with anything to read has been dropped. One
``select()`` with no wait (about a microsecond) asks the kernel, and such a connection is
closed, which makes the pool replace it, and another one borrowed. What this cannot see
is a connection whose server or network went silent without closing it: that is a
stall, which the call's deadline bounds (see ``_watchdog``).
"""

from __future__ import annotations

import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from agentsessions.stores.postgres._watchdog import Watch

Connection = psycopg.Connection[Any]


@contextmanager
def borrowed(pool: ConnectionPool[Any], watch: Watch) -> Iterator[Connection]:
    """A connection from ``pool`` that the server has not dropped, waiting for one until the call's deadline.

    Raises ``psycopg_pool.PoolTimeout`` once the deadline has passed with no live
    connection lent; the pool's ``putconn`` takes the connection back when the block ends.
    """
    while True:
        # psycopg_pool refuses a wait of 0 even with a connection ready: the least it takes.
        left = max(watch.deadline - time.monotonic(), 1e-6)
        with pool.connection(timeout=left) as conn:
            if not dropped(conn):
                yield conn
                return
            conn.close()  # back in the pool closed, so the pool makes a new one


def dropped(conn: Connection) -> bool:
    """Whether the server closed this idle connection, asked of the kernel, not of the server.

    On an idle connection the server speaks only to end it (a store's pool listens to no
    notifications), so anything to read means it is gone. A rare unprompted notice costs
    one new connection, never a wrong answer.
    """
    if conn.closed or conn.broken:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):  # no socket any more
        return True
    return bool(readable)
