"""A run that fails because its SQL server stops answering at its release leaves the session
where a resumer looks (STALLED, its steer waiting), on PostgreSQL and MariaDB through the
pools the docs set up (issue 33 item 3).

The run's store reaches the server through a proxy that stalls; the test watches and
steers through a store of its own, straight to the server.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("psycopg", "psycopg_pool", "pymysql", "dbutils", extra="test")  # before the imports that need them

import contextlib
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pymysql
import pytest
from psycopg_pool import ConnectionPool

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores import mysql, postgres
from agentsessions.stores.mysql._pool import pool as mysql_pool
from tests.support.proxy import Proxy, proxied
from tests.support.servers import MYSQL_HOST, MYSQL_PASSWORD, MYSQL_PORT, MYSQL_USER, POSTGRES_DSN, require_server
from tests.support.waiting import wait_for

pytestmark = pytest.mark.server  # PostgreSQL and MariaDB

TIMEOUT = 1.0  # the run's store: its timeout (PostgreSQL), its read/write/connect timeouts (MariaDB)


@contextlib.contextmanager
def _postgres(proxy: Proxy) -> Iterator[tuple[agent.RunStore, agent.RunStore]]:
    """The run's store through ``proxy`` and the test's own, on a fresh schema."""
    schema = f"agentsessions_test_{secrets.token_hex(4)}"
    admin = require_server("PostgreSQL", lambda: psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5))
    admin.execute(f"CREATE SCHEMA {schema}")
    kwargs = {"options": f"-c search_path={schema}", "connect_timeout": 5}
    proxied_dsn = psycopg.conninfo.make_conninfo(POSTGRES_DSN, host="127.0.0.1", port=proxy.port)
    try:
        with (
            ConnectionPool(POSTGRES_DSN, kwargs=kwargs, min_size=1, max_size=2, open=True) as direct,
            ConnectionPool(proxied_dsn, kwargs=kwargs, min_size=1, max_size=2, open=True) as through,
        ):
            with direct.connection() as conn:
                conn.execute(postgres.SCHEMA)
            yield postgres.PostgresStore(through, timeout=TIMEOUT), postgres.PostgresStore(direct)
    finally:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()


@contextlib.contextmanager
def _mysql(proxy: Proxy) -> Iterator[tuple[agent.RunStore, agent.RunStore]]:
    server: dict[str, Any] = {"host": MYSQL_HOST, "port": MYSQL_PORT, "user": MYSQL_USER, "password": MYSQL_PASSWORD}
    admin = require_server("MariaDB", lambda: pymysql.connect(**server, autocommit=True, connect_timeout=5))
    database = f"agentsessions_test_{secrets.token_hex(4)}"
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    timeouts = {"read_timeout": TIMEOUT, "write_timeout": TIMEOUT, "connect_timeout": TIMEOUT}
    direct = mysql_pool(2, **server, database=database)
    through = mysql_pool(2, **{**server, "host": "127.0.0.1", "port": proxy.port}, database=database, **timeouts)
    try:
        with contextlib.closing(direct.connection()) as conn, conn.cursor() as cur:
            for stmt in mysql.SCHEMA:
                cur.execute(stmt)
            conn.commit()
        yield mysql.MySQLStore(through.connection), mysql.MySQLStore(direct.connection)
    finally:
        through.close()
        direct.close()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE {database}")
        admin.close()


SERVERS: dict[str, Callable[[Proxy], contextlib.AbstractContextManager[tuple[agent.RunStore, agent.RunStore]]]] = {
    "postgres": _postgres,
    "mysql": _mysql,
}
ADDRESSES = {
    "postgres": lambda: (
        str(psycopg.conninfo.conninfo_to_dict(POSTGRES_DSN).get("host") or "127.0.0.1"),
        int(psycopg.conninfo.conninfo_to_dict(POSTGRES_DSN).get("port") or 5432),
    ),
    "mysql": lambda: (MYSQL_HOST, MYSQL_PORT),
}


@pytest.mark.parametrize("server", ["postgres", "mysql"])
def test_a_run_whose_server_stops_answering_leaves_its_steer_in_a_stalled_session(server: str) -> None:
    with proxied(ADDRESSES[server]()) as proxy, SERVERS[server](proxy) as (runs, watcher):
        entered, release = threading.Event(), threading.Event()

        def answer(_: agent.ModelRequest) -> agent.Message:
            entered.set()
            assert release.wait(10), "the test never released the model"
            return agent.Message.assistant("done")

        session_id = f"stranded-{server}"
        spec = agent.Spec(session=agent.open(session_id, runs), lease=2.0)
        run = agent.Runner().start(spec, [agent.Message.user("hello")], ScriptedEndpoint([answer]))
        assert entered.wait(10)
        # Answered RUNNING: a promise that some run answers it.
        assert agent.open(session_id, watcher).steer("answered RUNNING") is agent.RunState.RUNNING
        proxy.stall()  # the run's server stops answering before the run's next save
        release.set()
        with pytest.raises(agent.RunError) as caught:
            run.wait(30)
        assert isinstance(caught.value.__cause__, agent.StoreError), caught.value
        # Not released FAILED, where a resumer listing STALLED never looks: its lease lapses.
        wait_for("the lease to lapse", lambda: watcher.info(session_id).state is agent.RunState.STALLED, seconds=15)
        assert [info.id for info in watcher.sessions(state=agent.RunState.STALLED)] == [session_id]
        assert watcher.info(session_id).pending_steers == 1
