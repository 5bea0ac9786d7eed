"""The three-replica flow of examples/sessions, over PostgreSQL: three OS processes, one database.

B leaves a steer holding no run; A runs two steps from an empty transcript and picks the
steer up; C resumes from what A saved plus a new question, and answers. The processes
share nothing but the database (a schema of this test's own, dropped at the end); the
tools and the scripted model are the example's own (examples/sessions/replica.py).
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("psycopg", "psycopg_pool", extra="postgres")  # before the imports that need them

import importlib
import multiprocessing
import secrets
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import agentsessions as agent
from agentsessions.stores import postgres
from tests.support.paths import ROOT
from tests.support.servers import POSTGRES_DSN, require_server

pytestmark = pytest.mark.server  # PostgreSQL

EXAMPLE = ROOT / "examples" / "sessions"
SESSION = "conversation-1"


def _pool(schema: str) -> ConnectionPool[Any]:
    return ConnectionPool(POSTGRES_DSN, kwargs={"options": f"-c search_path={schema}"}, min_size=1, open=True)


def replica(role: str, schema: str, results: multiprocessing.Queue[dict[str, Any]]) -> None:
    """One replica, in a process of its own: it knows the database and the session id, nothing else."""
    sys.path.insert(0, str(EXAMPLE))
    example = importlib.import_module("replica")  # the example's tools, question, steer and scripted model

    with _pool(schema) as pool:
        store = postgres.PostgresStore(pool)
        session = agent.open(SESSION, store)
        if role == "B":
            session.steer(example.STEER)  # no Runner, no Run: only the store
            results.put({})
            return
        spec = agent.Spec(session=session, tools=[example.read_file, example.grep], max_steps=4)
        messages = [] if role == "A" else [*store.messages(SESSION), agent.Message.user(example.QUESTION)]
        result = agent.Runner().run(spec, messages, example.scripted(role))
        results.put({"steps": result.steps, "text": result.text, "steer": example.STEER, "question": example.QUESTION})


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh schema with the store's tables, dropped at the end."""
    admin = require_server("PostgreSQL", lambda: psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5))
    name = f"agentsessions_test_{secrets.token_hex(4)}"
    with admin:
        admin.execute(f"CREATE SCHEMA {name}")
        try:
            admin.execute(f"SET search_path = {name}")
            admin.execute(postgres.SCHEMA)
            yield name
        finally:
            admin.execute(f"DROP SCHEMA {name} CASCADE")


def _run(role: str, schema: str) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[dict[str, Any]] = context.Queue()
    process = context.Process(target=replica, args=(role, schema, results), name=f"replica-{role}")
    process.start()
    process.join(60)
    assert process.exitcode == 0, f"replica {role} failed with exit code {process.exitcode}"
    return results.get(timeout=10)  # small: the child's put has been flushed before it exited


def test_three_replicas_over_postgres_steer_run_and_resume(schema: str) -> None:
    _run("B", schema)
    a = _run("A", schema)
    with _pool(schema) as pool:
        store = postgres.PostgresStore(pool)
        after_a = store.messages(SESSION)
        assert a["steps"] == 2
        assert len(after_a) == 4
        assert after_a[0].role is agent.Role.USER and after_a[0].text == a["steer"]
        c = _run("C", schema)
        after_c = store.messages(SESSION)
        assert after_c[:4] == after_a  # C resumed from messages it never produced
        assert after_c[4].text == c["question"]
        assert after_c[-1].role is agent.Role.ASSISTANT and after_c[-1].text == c["text"]
        assert 'raise TokenError("token refused' in c["text"]
        assert store.take_steers(SESSION) == []  # the steer was handed over exactly once
