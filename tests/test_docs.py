"""The docs cannot drift: every Python block of the README and of docs/ runs, and CI runs the test command.

Each block runs in a folder of its own, twice (a reader may run it again). Blocks that
need a database run against this machine's servers, with the docs' example connection
settings swapped for the test ones, each in a scratch schema or database of its own;
blocks that talk to a provider run against a local server speaking its wire format.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsessions.testing.fakes.messages import FakeMessagesAPI, Reply, text, tool_use
from tests.support.backends import delete_prefix
from tests.support.paths import ROOT
from tests.support.servers import (
    MONGODB_URI,
    MYSQL_HOST,
    MYSQL_PASSWORD,
    MYSQL_PORT,
    MYSQL_USER,
    POSTGRES_DSN,
    REDIS_URL,
    require_server,
    skip_without,
)

pytestmark = pytest.mark.slow  # every block of every page, each in a folder of its own, twice

README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS: list[tuple[str, str]] = [
    (f"{page.relative_to(ROOT)} block {number}", block)
    for page in PAGES
    for number, block in enumerate(re.findall(r"^```python\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL), 1)
]
SERVER_MARKS = {
    "PostgreSQL": "postgres.SCHEMA",
    "MariaDB": "mysql.SCHEMA",
    "MongoDB": "mongodb.INDEXES",
    "Redis": "RedisStore(client",
    "Anthropic": 'AnthropicEndpoint("claude-sonnet-4-5", stream=True)',
    "Anthropic, first run": 'AnthropicEndpoint("claude-sonnet-4-5")  # the key comes from $ANTHROPIC_API_KEY',
}


def _server_of(block: str) -> str | None:
    return next((name for name, mark in SERVER_MARKS.items() if mark in block), None)


def _run(block: str, name: str, replacements: dict[str, str] | None = None) -> None:
    for old, new in (replacements or {}).items():
        assert old in block, f"the {name} block no longer says {old!r}"
        block = block.replace(old, new)
    exec(compile(block, name, "exec"), {"__name__": "docs"})


OFFLINE = [(name, block) for name, block in BLOCKS if _server_of(block) is None]


def test_the_docs_have_their_blocks() -> None:
    assert len(OFFLINE) >= 15 and any(name.startswith("README.md") for name, _ in OFFLINE)


@pytest.mark.parametrize(("name", "block"), OFFLINE, ids=[name for name, _ in OFFLINE])
def test_each_offline_block_runs_in_a_folder_of_its_own_twice(
    name: str, block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for attempt in ("first", "second"):
        try:
            _run(block, name)
        except Exception as error:
            raise AssertionError(f"{name} failed when run the {attempt} time: {error!r}") from error


def _block_for(server: str) -> str:
    blocks = [block for _, block in BLOCKS if _server_of(block) == server]
    assert len(blocks) == 1, f"expected one block for {server} in the docs"
    return blocks[0]


@pytest.mark.server
def test_the_postgres_block_runs() -> None:
    skip_without("psycopg", extra="postgres")
    import psycopg

    admin = require_server("PostgreSQL", lambda: psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5))
    schema = f"agentsessions_readme_{secrets.token_hex(4)}"
    admin.execute(f"CREATE SCHEMA {schema}")
    try:
        dsn = f"\"{POSTGRES_DSN} options='-c search_path={schema}'\""  # the block's kwargs are its own
        _run(_block_for("PostgreSQL"), "PostgreSQL", {'"host=127.0.0.1 dbname=myapp user=myapp"': dsn})
        assert admin.execute(f"SELECT to_regclass('{schema}.agentsessions_sessions')").fetchone() != (None,)
    finally:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()


@pytest.mark.server
def test_the_mysql_block_runs() -> None:
    skip_without("pymysql", extra="mysql")
    import pymysql

    settings: dict[str, Any] = {"host": MYSQL_HOST, "port": MYSQL_PORT, "user": MYSQL_USER, "password": MYSQL_PASSWORD}
    admin = require_server("MariaDB", lambda: pymysql.connect(**settings, autocommit=True, connect_timeout=5))
    database = f"agentsessions_readme_{secrets.token_hex(4)}"
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    try:
        ours = ", ".join(f"{key}={value!r}" for key, value in {**settings, "database": database}.items())
        _run(_block_for("MariaDB"), "MySQL", {'host="127.0.0.1", user="myapp", password="...", database="myapp"': ours})
        from agentsessions.stores import mysql

        tables = {re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", statement) for statement in mysql.SCHEMA}
        with admin.cursor() as cur:
            cur.execute(f"SHOW TABLES FROM {database}")
            assert {name for (name,) in cur.fetchall()} == {match.group(1) for match in tables if match}
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE {database}")
        admin.close()


@contextlib.contextmanager
def _mongodb_uri() -> Iterator[str]:
    if MONGODB_URI:
        yield MONGODB_URI
        return
    from secantus import SecantusDBServer

    with SecantusDBServer(storage_path=":memory:") as server:
        yield server.uri


@pytest.mark.server
def test_the_mongodb_block_runs() -> None:
    skip_without("pymongo", "secantus", extra="mongodb")
    import pymongo

    with contextlib.ExitStack() as stack:
        uri: str = require_server("MongoDB", lambda: stack.enter_context(_mongodb_uri()))
        database = f"agentsessions_readme_{secrets.token_hex(4)}"
        _run(_block_for("MongoDB"), "MongoDB", {'"mongodb://127.0.0.1:27017"': repr(uri), '"myapp"': repr(database)})
        client: pymongo.MongoClient[dict[str, Any]]
        with pymongo.MongoClient(uri) as client:
            assert "agentsessions_messages_key" in client[database]["agentsessions_messages"].index_information()
            client.drop_database(database)


@pytest.mark.server
def test_the_redis_block_runs() -> None:
    skip_without("redis", extra="redis")
    import redis

    client = require_server("Redis", lambda: redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5))
    client.ping()
    prefix = f"agentsessions_readme_{secrets.token_hex(4)}:"
    try:
        for _ in range(2):  # twice in a row, as every block must run
            _run(
                _block_for("Redis"),
                "Redis",
                {'"redis://127.0.0.1:6379/0"': repr(REDIS_URL), '"myapp:sessions:"': repr(prefix)},
            )
        # The block's delete left nothing under its prefix but the version its first call recorded.
        assert list(client.scan_iter(match=prefix + "*")) == [(prefix + "schema").encode()]
    finally:
        delete_prefix(client, prefix)


def test_the_streaming_block_runs_against_a_local_server_with_the_wire_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = [Reply([tool_use("toolu_1", "local_time", {"city": "Oslo"})]), Reply([text("It is 14:05 in Oslo.")])]
    with FakeMessagesAPI(script, api_key="sk-ant-readme") as server:
        options = f'stream=True, api_key="sk-ant-readme", base_url="{server.origin}"'
        local = f'AnthropicEndpoint("claude-sonnet-4-5", {options})'
        _run(_block_for("Anthropic"), "streaming", {'AnthropicEndpoint("claude-sonnet-4-5", stream=True)': local})
    assert capsys.readouterr().out.endswith("It is 14:05 in Oslo.")


def test_the_first_run_block_runs_against_a_local_server_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    script = [Reply([tool_use("toolu_1", "local_time", {"city": "Oslo"})]), Reply([text("It is 14:05 in Oslo.")])]
    with FakeMessagesAPI(script * 2, api_key="sk-ant-readme") as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-readme")
        local = f'AnthropicEndpoint("claude-sonnet-4-5", base_url="{server.origin}")'
        mark = SERVER_MARKS["Anthropic, first run"]
        for _ in range(2):
            _run(_block_for("Anthropic, first run"), "first run", {mark: local})
        second = server.requests[-1].body["messages"]
    assert capsys.readouterr().out == "It is 14:05 in Oslo.\n" * 2
    # The second run continued the stored conversation: both questions went to the model.
    assert json.dumps(second).count("Time in Oslo?") == 2


def test_ci_runs_the_readme_test_command() -> None:
    commands = re.search(r"^```sh\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
    assert commands is not None
    test_command = commands.group(1).splitlines()[1].split("#")[0].strip()
    assert test_command in (ROOT / ".ci" / "run").read_text()
