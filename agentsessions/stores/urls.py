"""Stores from URLs: the one parser the CLI, the console and the resumer share.

    with from_url("postgresql://app:secret@db:5432/prod") as store:
        ...

URLs it opens:

- ``sqlite:///absolute/path.db``, ``sqlite:relative/path.db``: the file must exist, unless
  ``create=True`` (then it is made, with its tables).
- ``postgresql://user:password@host:5432/db`` (or ``postgres://``; any libpq URI parameter,
  e.g. ``?options=-csearch_path%3Dmyschema``): a pool of ``connections`` connections.
- ``mysql://user:password@host:3306/db``: a DBUtils pool keeping up to ``connections`` PyMySQL
  connections (see ``stores/mysql/_pool.py``).
- ``mongodb://user:password@host:27017/db`` (or ``mongodb+srv://``): the database is the path.
- ``redis://user:password@host:6379/0`` (or ``rediss://`` for TLS, ``unix:///path?db=0``; any
  redis-py URL parameter), with ``prefix=`` in the query for the store's key prefix
  (default ``agentsessions:``).

The connections are opened on entry and closed on exit. A URL that cannot be read, or
names no store, is a ``ValueError``; a store that cannot be reached a
:class:`~agentsessions.errors.StoreError`; a missing driver an ``ImportError`` naming the
extra. No message ever holds the password: URLs are shown as ``postgresql://user:***@host/db``
(:attr:`StoreURL.shown`), and :meth:`StoreURL.mask` hides the URL's secrets in any text.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import SplitResult, parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import attrs

from agentsessions.errors import StoreError
from agentsessions.session import RunStore
from agentsessions.stores.kit.schema import MigratingStore, Migrator

__all__ = [
    "CONNECT_TIMEOUT",
    "REDIS_TIMEOUT",
    "StoreURL",
    "from_url",
    "mask_urls",
    "open_migrator",
    "open_url",
    "parse_url",
]

CONNECT_TIMEOUT = 5
"""Seconds: a store that does not answer fails the caller, it does not hang it."""

REDIS_TIMEOUT = 30
"""Seconds a Redis store's call waits for an answer, and for a free connection, unless the URL says otherwise."""

_SECRET_KEYS = frozenset({"password", "pass", "pwd", "sslpassword"})
# Any URL-like userinfo with a password, in any text: the net under the exact masking below.
_ANY_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:)[^\s/?#]*@")
_SCHEMES = "use sqlite:///path, postgresql://..., mysql://..., mongodb://.../db or redis://..."


@attrs.frozen
class StoreURL:
    """A store URL, the secrets in it, and how it may be shown."""

    raw: str
    scheme: str
    secrets: tuple[str, ...]
    shown: str

    def mask(self, text: str) -> str:
        """``text`` with every secret of this URL, and any URL's password, replaced by ``***``."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return mask_urls(text)


def mask_urls(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``."""
    return _ANY_USERINFO.sub(r"\1***@", text)


def parse_url(raw: str) -> StoreURL:
    """Read a store URL; one that cannot be read is a ``ValueError`` that shows only its scheme."""
    # What a careless URL's password may be (a raw `/` or `@` in it cuts the URL elsewhere):
    # everything between the scheme's first `:` after `://` and the last `@`, masked too.
    loose = raw.partition("://")[2].rpartition("@")[0].partition(":")[2]
    secrets: set[str] = {loose, unquote(loose)}
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018  (reading it checks it)
    except ValueError:
        # urlsplit's own message may quote the password; it is not repeated.
        scheme = raw.partition("://")[0] if "://" in raw else "?"
        raise ValueError(
            f"cannot read the store URL ({scheme}://...): percent-encode @ : / ? # in its user and password "
            "(%40 %3A %2F %3F %23)"
        ) from None
    netloc = parts.netloc
    if parts.password is not None:
        secrets.update((parts.password, unquote(parts.password)))
        userinfo, _, host = netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}:***@{host}"
    pieces = []
    for piece in parts.query.split("&") if parts.query else []:
        key, equals, value = piece.partition("=")
        if unquote(key).lower() in _SECRET_KEYS and value:
            secrets.update((value, unquote(value)))
            value = "***"
        pieces.append(key + equals + value)
    url = StoreURL(raw, parts.scheme.lower(), tuple(sorted(filter(None, secrets), key=len, reverse=True)), "")
    # Longest secrets first, so none leaves a piece of a longer one behind.
    return attrs.evolve(url, shown=url.mask(urlunsplit(parts._replace(netloc=netloc, query="&".join(pieces)))))


def from_url(url: str, *, create: bool = False, connections: int = 2) -> AbstractContextManager[RunStore]:
    """The store ``url`` names, as a context manager that opens its connections and closes them.

    ``create``: a SQLite file that does not exist is made. ``connections``: the most
    connections a PostgreSQL, MySQL or Redis store keeps open (a run, a heartbeat and a
    listing each use one at a time; a MySQL store opens more while all are busy, and closes
    them after).
    """
    if isinstance(connections, bool) or not isinstance(connections, int) or connections < 1:
        raise ValueError(f"connections is a number above 0, got {connections!r:.80}")
    return open_url(parse_url(url), create=create, connections=connections)


@contextlib.contextmanager
def open_url(url: StoreURL, *, create: bool = False, connections: int = 2) -> Iterator[RunStore]:
    """:func:`from_url` for a URL already read with :func:`parse_url`."""
    parts = urlsplit(url.raw)
    openers: dict[str, Callable[[StoreURL, SplitResult], AbstractContextManager[RunStore]]] = {
        "sqlite": functools.partial(_sqlite, create=create),
        "postgresql": functools.partial(_postgres, connections=connections),
        "postgres": functools.partial(_postgres, connections=connections),
        "mysql": functools.partial(_mysql, connections=connections),
        "mongodb": _mongodb,
        "mongodb+srv": _mongodb,
        "redis": functools.partial(_redis, connections=connections),
        "rediss": functools.partial(_redis, connections=connections),
        "unix": functools.partial(_redis, connections=connections),
    }
    opener = openers.get(url.scheme)
    if opener is None:
        raise ValueError(f"unknown store URL {url.shown}: {_SCHEMES}")
    with opener(url, parts) as store:
        yield store


def _driver(extra: str) -> NoReturn:
    raise ImportError(f"the {extra} store needs its driver: pip install agentsessions[{extra}]")


@contextlib.contextmanager
def open_migrator(url: StoreURL) -> Iterator[Migrator]:
    """The :class:`~agentsessions.stores.kit.schema.Migrator` of the store ``url`` names, over connections
    opened on entry and closed on exit, as :func:`open_url` opens them; a SQLite file is not opened as a
    store (that would migrate it) and must exist."""
    if url.scheme == "sqlite":
        from agentsessions.stores import sqlite

        yield sqlite.migrator(_sqlite_path(url, urlsplit(url.raw), create=False))
        return
    with open_url(url) as store:
        if not isinstance(store, MigratingStore):
            raise ValueError(f"{type(store).__name__} records no schema version: nothing to migrate")
        yield store.migrator()


def _sqlite_path(url: StoreURL, parts: SplitResult, *, create: bool) -> Path:
    if parts.netloc or parts.query or parts.fragment or not parts.path:
        raise ValueError(f"a SQLite URL is sqlite:///absolute/path or sqlite:relative/path, got {url.shown}")
    path = Path(unquote(parts.path))
    if not create and not path.is_file():
        missing = FileNotFoundError(errno.ENOENT, "no such file", str(path))
        raise StoreError(f"no SQLite file at {str(path)!r}: from_url makes one only with create=True") from missing
    return path


@contextlib.contextmanager
def _sqlite(url: StoreURL, parts: SplitResult, *, create: bool) -> Iterator[RunStore]:
    from agentsessions.stores import sqlite

    with contextlib.closing(sqlite.open(_sqlite_path(url, parts, create=create))) as store:
        yield store


@contextlib.contextmanager
def _postgres(url: StoreURL, _: SplitResult, *, connections: int) -> Iterator[RunStore]:
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
        from psycopg_pool import ConnectionPool, PoolTimeout

        from agentsessions.stores import postgres
    except ImportError:
        _driver("postgres")
    try:
        options = {} if "connect_timeout" in conninfo_to_dict(url.raw) else {"connect_timeout": CONNECT_TIMEOUT}
        # The pool keeps why it could not connect to itself (it logs and retries until its
        # timeout); one connection of our own first turns a wrong password into its reason.
        psycopg.connect(url.raw, **options).close()  # type: ignore[arg-type]
    except psycopg.ProgrammingError as error:
        raise ValueError(f"cannot read the store URL {url.shown}: {error}") from None
    except psycopg.Error as error:
        raise StoreError(f"cannot connect to {url.shown}: {error}") from None
    # No check: the store finds a connection the server dropped without a round trip (see
    # postgres/_borrow.py), and a check would cost one on every call.
    pool: ConnectionPool[Any] = ConnectionPool(
        url.raw, kwargs=options, min_size=1, max_size=connections, open=False, name="agentsessions"
    )
    try:
        try:
            pool.open(wait=True, timeout=2 * CONNECT_TIMEOUT)
        except PoolTimeout:
            why = f"no connection within {2 * CONNECT_TIMEOUT} s"
            raise StoreError(f"cannot connect to {url.shown}: {why}") from None
        yield postgres.PostgresStore(pool)
    finally:
        pool.close()


@contextlib.contextmanager
def _mysql(url: StoreURL, parts: SplitResult, *, connections: int) -> Iterator[RunStore]:
    try:
        from agentsessions.stores import mysql
        from agentsessions.stores.mysql._pool import pool
    except ImportError:
        _driver("mysql")
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database or parts.query or parts.fragment:
        raise ValueError(f"a MySQL URL is mysql://user:password@host:port/database, got {url.shown}")
    # Pooled connections, each with the timeouts the store asks for.
    pooled = pool(
        connections,
        host=parts.hostname or "localhost",
        port=parts.port or 3306,
        user=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password or ""),
        database=database,
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=30,
        write_timeout=30,
        init_command="SET SESSION innodb_lock_wait_timeout = 10",
    )
    try:
        yield mysql.MySQLStore(pooled.connection)
    finally:
        pooled.close()


@contextlib.contextmanager
def _mongodb(url: StoreURL, parts: SplitResult) -> Iterator[RunStore]:
    try:
        import pymongo
        from pymongo.errors import PyMongoError

        from agentsessions.stores import mongodb
    except ImportError:
        _driver("mongodb")
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ValueError(f"a MongoDB URL names its database: mongodb://host:27017/database, got {url.shown}")
    given = {key.lower() for key, _ in parse_qsl(parts.query)}
    options: dict[str, Any] = {}
    if "serverselectiontimeoutms" not in given:
        options["serverSelectionTimeoutMS"] = CONNECT_TIMEOUT * 1000
    try:
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(url.raw, **options)
    except PyMongoError as error:  # a URL pymongo cannot read (it does no I/O here but DNS for +srv)
        raise ValueError(f"cannot use the store URL {url.shown}: {error}") from None
    try:
        yield mongodb.MongoStore(client[database])
    finally:
        client.close()


@contextlib.contextmanager
def _redis(url: StoreURL, parts: SplitResult, *, connections: int) -> Iterator[RunStore]:
    try:
        import redis

        from agentsessions.stores.redis import RedisStore
    except ImportError:
        _driver("redis")
    # redis-py reads a path that is no number as database 0, silently: a typo would open the wrong one.
    if url.scheme != "unix" and not re.fullmatch(r"/?\d*", unquote(parts.path)):
        raise ValueError(f"a Redis URL is redis://user:password@host:6379/DB with DB a number, got {url.shown}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefixes = [value for key, value in query if key == "prefix"]
    rest = urlunsplit(parts._replace(query=urlencode([(key, value) for key, value in query if key != "prefix"])))
    given = {key for key, _ in query}
    options: dict[str, Any] = {}
    if "socket_connect_timeout" not in given:
        options["socket_connect_timeout"] = CONNECT_TIMEOUT
    if "socket_timeout" not in given:
        options["socket_timeout"] = REDIS_TIMEOUT
    try:
        # A pool that makes a call wait for a free connection (up to the call's own timeout)
        # instead of failing it: redis-py's default raises once max_connections are open.
        wait = float(dict(query).get("socket_timeout") or REDIS_TIMEOUT)
        pool = redis.BlockingConnectionPool.from_url(rest, max_connections=connections, timeout=wait, **options)
        client = redis.Redis(connection_pool=pool)
    except (ValueError, TypeError) as error:  # a parameter redis-py cannot read
        raise ValueError(f"cannot use the store URL {url.shown}: {error}") from None
    try:
        try:
            client.ping()  # redis-py connects lazily: an unreachable server fails here, not mid-command
        except redis.RedisError as error:
            raise StoreError(f"cannot connect to {url.shown}: {error}") from None
        except TypeError as error:  # an unknown URL parameter reaches the connection only now
            raise ValueError(f"cannot use the store URL {url.shown}: {error}") from None
        yield RedisStore(client, **({"prefix": prefixes[-1]} if prefixes else {}))
    finally:
        client.close()
        pool.disconnect()  # a client given its pool leaves it open
