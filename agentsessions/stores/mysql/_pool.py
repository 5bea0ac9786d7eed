"""The DBUtils pool that ``stores.from_url`` and Django's store make for the MySQL store.

The same setup as docs/stores/postgresql-mysql.md recommends, measured there:

- ``ping=0``: no round trip when a connection is lent. DBUtils' steady connections replace
  one the server dropped (a restart, ``KILL``) on their own, and run the failed statement
  again on the new one, when no transaction was begun: the store's first statement of a
  call (the isolation level, or the one read) comes before ``begin()``, so a connection
  dropped while it sat in the pool fails no call.
- ``reset=False``: no ``ROLLBACK`` round trip when a connection comes back; the store
  commits or rolls back each of its transactions itself.
- ``maxcached=size`` and no ``maxconnections``: a call never waits for a connection (a
  blocking DBUtils pool waits without a time limit) and never fails for want of one; past
  ``size`` busy ones, a new connection is opened and closed when it comes back.

A stall then ends a call within two ``read_timeout``: the statement's read, then the one
reconnect DBUtils tries before it gives up (PooledDB's defaults take three to four).
"""

from __future__ import annotations

from typing import Any

try:
    import pymysql
    from dbutils.pooled_db import PooledDB
except ImportError as error:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "a pool for the MySQL store needs PyMySQL and DBUtils: pip install agentsessions[mysql]"
    ) from error

__all__ = ["pool"]


def pool(size: int, **connect: Any) -> PooledDB:
    """A pool keeping up to ``size`` idle connections made with ``pymysql.connect(**connect)``."""
    return PooledDB(pymysql, mincached=0, maxcached=size, maxconnections=0, ping=0, reset=False, **connect)
