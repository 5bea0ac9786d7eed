"""A store over a Django project's own database settings.

    # views.py
    import agentsessions as agent
    from agentsessions.contrib.django import store

    def post_message(request, conversation_id):
        session = agent.open(conversation_id, store())
        ...

:func:`store` reads ``settings.DATABASES[alias]`` and opens the matching store with a pool
of its own (runs save from worker threads, which must not share Django's per-request
connections): PostgreSQL through psycopg 3 and ``psycopg_pool``, MySQL and MariaDB through
PyMySQL and a DBUtils pool (whatever driver Django itself uses), SQLite on the same file.
It opens the pool on its first call in a process and hands the same store back after,
so calling it in every view is cheap; a forked worker opens its own. The pools close when
the process exits, or with :func:`close`.

The tables: add ``"agentsessions.contrib.django"`` to ``INSTALLED_APPS`` and ``python
manage.py migrate`` creates them (PostgreSQL's :data:`~agentsessions.stores.postgres.SCHEMA`,
MySQL's :data:`~agentsessions.stores.mysql.SCHEMA`; SQLite creates its own), as any app's
tables are; or run the schema in your own migrations.

Needs Django (``pip install agentsessions[django]``) and the database's driver extra
(``[postgres]`` or ``[mysql]``).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

try:
    import django  # noqa: F401  (only to name the extra when it is missing)
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("agentsessions.contrib.django needs Django: pip install agentsessions[django]") from error

from agentsessions.session import RunStore

__all__ = ["POOL_SIZE", "close", "store"]

POOL_SIZE = 10
"""The most connections each store's pool keeps: a run, its heartbeat and a view each use one at a time."""

CONNECT_TIMEOUT = 5
"""Seconds: a database that does not answer fails the view, it does not hang it."""

# Settings that only Django's own backends read; a driver would refuse them.
_DJANGO_ONLY_OPTIONS = frozenset({"pool", "server_side_binding", "isolation_level", "assume_role", "transaction_mode"})

_lock = threading.Lock()
_stores: dict[str, tuple[int, RunStore, Callable[[], None]]] = {}


def store(alias: str = "default") -> RunStore:
    """The store over ``settings.DATABASES[alias]``, opened once per process.

    Args:
        alias: the key of the database in ``settings.DATABASES``.

    Returns:
        A :class:`agentsessions.RunStore`: a ``PostgresStore``, ``MySQLStore`` or
        ``SQLiteStore``, shared by every thread of this process.

    Raises:
        ValueError: ``alias`` is not in ``settings.DATABASES``, or its ``ENGINE`` is none of
            PostgreSQL, MySQL/MariaDB or SQLite.
        ImportError: the database's driver is not installed (the message names the extra).
        StoreError: the database could not be reached.
    """
    with _lock:
        held = _stores.get(alias)
        if held is not None and held[0] == os.getpid():
            return held[1]
        # A pool made before a fork belongs to the parent: its sockets are not ours to use.
        opened, closer = _open(alias, _settings(alias))
        _stores[alias] = (os.getpid(), opened, closer)
        return opened


def close(alias: str | None = None) -> None:
    """Close the pool of ``alias``'s store (every store's when ``None``); the next :func:`store` opens a new one."""
    with _lock:
        aliases = list(_stores) if alias is None else [alias]
        for name in aliases:
            held = _stores.pop(name, None)
            if held is not None and held[0] == os.getpid():
                held[2]()


atexit.register(close)


def _settings(alias: str) -> Mapping[str, Any]:
    from django.db import connections

    try:
        return dict(connections.settings[alias])
    except KeyError:
        known = ", ".join(sorted(connections.settings)) or "none"
        raise ValueError(f"no database {alias!r} in settings.DATABASES (it has: {known})") from None


def _open(alias: str, settings: Mapping[str, Any]) -> tuple[RunStore, Callable[[], None]]:
    engine = str(settings.get("ENGINE", ""))
    if "postgres" in engine or "postgis" in engine:
        return _postgres(settings)
    if "mysql" in engine:
        return _mysql(settings)
    if "sqlite" in engine or "spatialite" in engine:
        return _sqlite(settings)
    raise ValueError(
        f"DATABASES[{alias!r}] uses {engine!r}: agentsessions.contrib.django opens PostgreSQL, MySQL/MariaDB "
        "and SQLite databases (for another, build the store yourself)"
    )


def _options(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in dict(settings.get("OPTIONS") or {}).items() if key not in _DJANGO_ONLY_OPTIONS}


def _postgres(settings: Mapping[str, Any]) -> tuple[RunStore, Callable[[], None]]:
    try:
        from psycopg_pool import ConnectionPool

        from agentsessions.stores import postgres
    except ImportError:
        raise ImportError("a PostgreSQL database needs psycopg 3: pip install agentsessions[postgres]") from None
    params: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT, **_options(settings)}
    for key, name in (("NAME", "dbname"), ("USER", "user"), ("PASSWORD", "password"), ("HOST", "host")):
        if settings.get(key):
            params[name] = settings[key]
    if settings.get("PORT"):
        params["port"] = int(settings["PORT"])
    pool: ConnectionPool[Any] = ConnectionPool(
        kwargs=params, min_size=1, max_size=POOL_SIZE, open=False, name="agentsessions"
    )
    _opening(pool.open, wait=True, timeout=2 * CONNECT_TIMEOUT)
    return postgres.PostgresStore(pool), pool.close


def _mysql(settings: Mapping[str, Any]) -> tuple[RunStore, Callable[[], None]]:
    try:
        from agentsessions.stores import mysql
        from agentsessions.stores.mysql._pool import pool as mysql_pool
    except ImportError:
        raise ImportError(
            "a MySQL or MariaDB database needs PyMySQL: pip install agentsessions[django,mysql]"
        ) from None
    host = str(settings.get("HOST") or "localhost")
    params: dict[str, Any] = {
        "database": settings.get("NAME"),
        "user": settings.get("USER") or None,
        "password": settings.get("PASSWORD") or "",
        "port": int(settings.get("PORT") or 3306),
        # The timeouts the MySQL store asks of its connections (see agentsessions.stores.mysql).
        "connect_timeout": CONNECT_TIMEOUT,
        "read_timeout": 30,
        "write_timeout": 30,
        "init_command": "SET SESSION innodb_lock_wait_timeout = 10",
        **_options(settings),
    }
    params["unix_socket" if host.startswith("/") else "host"] = host  # Django's way of naming a socket
    pool = mysql_pool(POOL_SIZE, **params)  # the pool from_url makes: see stores/mysql/_pool.py
    _opening(lambda: pool.connection().close())  # a wrong password fails here, naming the database
    return mysql.MySQLStore(pool.connection), pool.close


def _sqlite(settings: Mapping[str, Any]) -> tuple[RunStore, Callable[[], None]]:
    from agentsessions.stores import sqlite

    name = str(settings.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:"):
        raise ValueError(
            f"a SQLite database shared with agentsessions is a file; NAME is {name!r} "
            "(an in-memory database is private to one connection)"
        )
    opened = sqlite.open(name)
    return opened, opened.close


def _opening(open_: Callable[..., Any], **arguments: Any) -> None:
    from agentsessions.errors import StoreError

    try:
        open_(**arguments)
    except Exception as error:  # a driver's or a pool's own error: said once, chained
        raise StoreError(f"cannot connect to the Django database for agentsessions: {error}") from error
