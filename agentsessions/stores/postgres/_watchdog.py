"""Deadlines for calls on psycopg connections, which have no read timeout of their own.

A watchdog thread shuts a connection's socket down when the call using it is past its
deadline: psycopg's wait then ends at once with an error, and the connection is left
broken, so its pool drops it. Private to :mod:`agentsessions.stores.postgres`, which
bounds its calls with it, and the pool's check of a connection (``checked``) too.
"""

from __future__ import annotations

import operator
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

Connection = psycopg.Connection[Any]


class Watch:
    """One call's deadline, and the connection to cut if the call is still running then."""

    __slots__ = ("_conn", "_lock", "cut", "deadline", "expired")

    def __init__(self, deadline: float, lock: threading.Lock) -> None:
        self.deadline = deadline
        self.expired = False  # the deadline passed before the call was done
        self.cut = False  # ... and its connection was cut
        self._lock = lock
        self._conn: Connection | None = None

    def attach(self, conn: Connection) -> None:
        with self._lock:
            if self.expired:
                raise psycopg.OperationalError("no connection was free in the pool within the store's timeout")
            self._conn = conn

    def detach(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        # A connection cut just as its call finished must not go back to the pool looking alive.
        if self.expired and conn is not None and not conn.closed:
            conn.close()

    def expire(self) -> None:
        """Called with the lock held: mark the call late and cut its socket, which wakes the waiting thread."""
        self.expired = True
        if self._conn is not None:
            self.cut = True
            shut_down(self._conn)


class Watchdog:
    """A thread, running while calls are in flight, that cuts the connection of a call past its deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._watches: set[Watch] = set()
        self._wakes_at: float | None = None  # when the thread looks next; None while there is no thread

    @contextmanager
    def watch(self, deadline: float) -> Iterator[Watch]:
        """Watch one call until the block ends; ``deadline`` is on ``time.monotonic()``'s clock."""
        with self._lock:
            watch = Watch(deadline, self._lock)
            self._watches.add(watch)
            if self._wakes_at is None:
                self._wakes_at = deadline
                threading.Thread(target=self._run, name="agentsessions-postgres-watchdog", daemon=True).start()
            elif deadline < self._wakes_at:
                # Rare: one store's calls share a timeout, so deadlines mostly arrive in order.
                self._changed.notify()
        try:
            yield watch
        finally:
            with self._lock:
                self._watches.discard(watch)

    def _run(self) -> None:
        with self._lock:
            while self._watches:
                first = min(self._watches, key=_DEADLINE)
                wait = first.deadline - time.monotonic()
                if wait > 0:
                    self._wakes_at = first.deadline
                    self._changed.wait(wait)  # releases the lock while it waits
                else:
                    self._watches.discard(first)
                    first.expire()
            self._wakes_at = None


_DEADLINE = operator.attrgetter("deadline")
_CHECKS = Watchdog()
_borrowing = threading.local()  # .watch: the call of a store that is waiting for the pool on this thread


@contextmanager
def borrowing(watch: Watch) -> Iterator[None]:
    """While a store call borrows a connection, a check the pool runs on this thread ends by its deadline."""
    previous, _borrowing.watch = getattr(_borrowing, "watch", None), watch
    try:
        yield
    finally:
        _borrowing.watch = previous


def checked(conn: Connection, timeout: float) -> None:
    """The pool's own check (an empty query), cut after ``timeout`` or at the borrowing call's deadline."""
    call: Watch | None = getattr(_borrowing, "watch", None)
    started = time.monotonic()
    deadline = started + timeout if call is None else min(started + timeout, call.deadline)
    late = f"no answer from PostgreSQL to the pool's check within {deadline - started:.3g} s; the connection was closed"
    with _CHECKS.watch(deadline) as watch:
        watch.attach(conn)
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error as error:
            if watch.cut:
                raise psycopg.OperationalError(late) from error
            raise
        finally:
            watch.detach()
            if watch.cut and call is not None and deadline == call.deadline:
                call.cut = True  # the call's own time ran out: the store says the server did not answer
        if watch.cut:  # cut as the answer came: detach closed the connection, so it failed all the same
            raise psycopg.OperationalError(late)


def shut_down(conn: Connection) -> None:
    """Shut the connection's socket down, ending any wait on it, without closing its descriptor."""
    # shutdown() acts on the socket, not on this duplicate descriptor, and unlike close()
    # it cannot let the number be reused by another connection under the waiting thread.
    with suppress(OSError, psycopg.Error), socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.shutdown(socket.SHUT_RDWR)
