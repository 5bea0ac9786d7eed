"""agentsessions.contrib.django: a store over DATABASES[alias] on PostgreSQL, MariaDB and SQLite, and its migration.

Django's settings are configured once per process, so this module configures them once,
with one alias per database: ``default`` (a SQLite file), ``pg`` (a fresh PostgreSQL schema,
its tables made by ``manage.py migrate``), ``mysql`` (a scratch MariaDB database) and
``oracle`` (an engine the store does not open).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import (
    MYSQL_HOST,
    MYSQL_PASSWORD,
    MYSQL_PORT,
    MYSQL_USER,
    POSTGRES_DSN,
    require_server,
    skip_without,
)

skip_without("django", "psycopg", "pymysql", "dbutils", extra="django,postgres,mysql")

import django
from django.conf import settings
from django.core.management import call_command

import agentsessions as agent
from agentsessions.contrib import django as contrib
from tests.support.backends import scratch_mysql

pytestmark = pytest.mark.server  # PostgreSQL and MariaDB, through Django


@pytest.fixture(scope="module")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Django configured with the four aliases (once per process: Django's settings are set once)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    admin = require_server("PostgreSQL", lambda: psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5))
    schema = f"agentsessions_django_{secrets.token_hex(4)}"
    given = conninfo_to_dict(POSTGRES_DSN)
    with contextlib.ExitStack() as stack:
        stack.enter_context(admin)
        admin.execute(f"CREATE SCHEMA {schema}")
        stack.callback(admin.execute, f"DROP SCHEMA {schema} CASCADE")
        opener = stack.enter_context(
            require_server("MariaDB", lambda: scratch_mysql(MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD))
        )
        found = {
            "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path_factory.mktemp("db") / "app.db")},
            "pg": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": given.get("dbname", "test"),
                "USER": given.get("user", "postgres"),
                "PASSWORD": given.get("password", ""),
                "HOST": given.get("host", "127.0.0.1"),
                "PORT": given.get("port", "5432"),
                "OPTIONS": {"options": f"-c search_path={schema}", "server_side_binding": False},
            },
            "mysql": {
                "ENGINE": "django.db.backends.mysql",
                "NAME": opener.args[-1],  # type: ignore[attr-defined]  # the scratch database's name (a partial)
                "USER": MYSQL_USER,
                "PASSWORD": MYSQL_PASSWORD,
                "HOST": MYSQL_HOST,
                "PORT": str(MYSQL_PORT),
            },
            "oracle": {"ENGINE": "django.db.backends.oracle", "NAME": "xe"},
        }
        if not settings.configured:
            settings.configure(INSTALLED_APPS=["agentsessions.contrib.django"], DATABASES=found, USE_TZ=True)
            django.setup()  # type: ignore[attr-defined,unused-ignore]  # mypy may take examples/django for Django
        stack.callback(contrib.close)
        yield found


def _round_trip(store: agent.RunStore, session_id: str) -> None:
    session = agent.open(session_id, store)
    session.save([agent.Message.user("hello"), agent.Message.assistant("hi")])
    assert [m.text for m in store.messages(session_id)] == ["hello", "hi"]
    assert session.steer("and then?") is agent.RunState.IDLE
    assert store.take_steers(session_id) == ["and then?"]


def test_postgres_from_settings_with_tables_from_migrate(databases: dict[str, Any]) -> None:
    call_command("migrate", "agentsessions", database="pg", verbosity=0)
    store = contrib.store("pg")
    assert type(store).__name__ == "PostgresStore"
    _round_trip(store, "pg-1")
    assert contrib.store("pg") is store  # one pool per process and alias


def test_mysql_from_settings_through_a_pool_of_its_own(databases: dict[str, Any]) -> None:
    store = contrib.store("mysql")
    assert type(store).__name__ == "MySQLStore"
    for n in range(20):  # more calls than the pool has connections: each goes back to the pool
        _round_trip(store, f"mysql-{n}")
    assert len(list(store.sessions())) == 20


def test_sqlite_shares_the_projects_file(databases: dict[str, Any], tmp_path: Path) -> None:
    store = contrib.store()
    assert type(store).__name__ == "SQLiteStore"
    _round_trip(store, "sqlite-1")
    from django.db import connections

    with connections["default"].cursor() as cursor:  # Django's own connection sees the store's tables
        tables = connections["default"].introspection.table_names(cursor)
    assert any(name.startswith("agentsessions") for name in tables), tables


def test_a_closed_or_forked_store_is_opened_anew(databases: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    first = contrib.store()
    contrib.close("default")
    second = contrib.store()
    assert second is not first
    monkeypatch.setattr("os.getpid", lambda: -1)  # as a forked worker sees it: another process
    assert contrib.store() is not second


def test_what_it_cannot_open_is_named(databases: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"no database 'nope'.*default"):
        contrib.store("nope")
    with pytest.raises(ValueError, match="oracle"):
        contrib.store("oracle")
    with pytest.raises(ValueError, match="in-memory"):
        contrib._open("memory", {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"})


def test_an_unreachable_database_is_a_store_error(databases: dict[str, Any]) -> None:
    refused = {"ENGINE": "django.db.backends.postgresql", "NAME": "test", "HOST": "127.0.0.1", "PORT": "9"}
    with pytest.raises(agent.StoreError, match="cannot connect"):
        contrib._open("down", refused)
