"""The ``agentsessions`` command against SQLite, PostgreSQL, MariaDB and MongoDB.

Most tests call ``main(argv)`` in this process; a few run ``python -m agentsessions`` as a
real subprocess. Sessions are made by real runs (``Runner`` with a ``ScriptedEndpoint``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import attrs
import pytest

import agentsessions as agent
from agentsessions.cli import Exit, parse_store_url
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores import sqlite
from tests.support.backends import (
    PERSISTENT,
    Opener,
    mongodb_url,
    mysql_url,
    postgres_url,
    redis_url,
    scratch_mongodb,
    scratch_mysql,
    scratch_postgres,
    scratch_redis,
    store_params,
)
from tests.support.command import Outcome, cli
from tests.support.scripts import call, double, echo_last_result
from tests.support.servers import (
    MONGODB_URI,
    MYSQL_HOST,
    MYSQL_PASSWORD,
    MYSQL_PORT,
    MYSQL_USER,
    POSTGRES_DSN,
    REDIS_URL,
    require_server,
)
from tests.support.waiting import wait_for

SECRET = "Hunter2-S3cr3t"  # distinctive: if it shows up anywhere, it came from the URL


@attrs.frozen
class Backend:
    url: str
    store: agent.RunStore


# --- Where the stores are -------------------------------------------------------------------


URLS: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager[Opener]], Callable[..., str]]] = {
    "postgres": ("PostgreSQL", lambda: scratch_postgres(POSTGRES_DSN), lambda dsn, schema: postgres_url(dsn, schema)),
    "mysql": ("MariaDB", lambda: scratch_mysql(MYSQL_HOST, MYSQL_PORT, MYSQL_USER, MYSQL_PASSWORD), mysql_url),
    "mongodb": ("MongoDB", lambda: scratch_mongodb(MONGODB_URI), mongodb_url),
    "redis": ("Redis", lambda: scratch_redis(REDIS_URL), redis_url),
}


@pytest.fixture(params=store_params(*PERSISTENT))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            path = tmp_path / "sessions.db"
            store: Any = stack.enter_context(contextlib.closing(sqlite.open(path)))
            yield Backend(f"sqlite://{path}", store)
            return
        name, scratch, url = URLS[request.param]
        opener: Any = require_server(name, lambda: stack.enter_context(scratch()))
        store = stack.enter_context(opener())
        # The scratch opener is a partial over where it made the schema or database.
        yield Backend(url(*opener.args), store)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[tuple[str, agent.RunStore]]:
    path = tmp_path / "sessions.db"
    with contextlib.closing(sqlite.open(path)) as store:
        yield f"sqlite://{path}", store


# --- Sessions made by real runs -------------------------------------------------------------

REPLICA = "web-1:4242"
TWO_CALLS = agent.Message(
    agent.Role.ASSISTANT,
    [
        agent.Content.of_text("Let me work it out."),
        agent.Content.tool_use("call-1", "double", '{"n":  21}'),  # two spaces: shown as written
        agent.Content.tool_use("call-2", "explode", "{}"),
    ],
)


@agent.tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("it blew up")


def finished_run(store: agent.RunStore, session_id: str = "conv-1") -> agent.Result:
    spec = agent.Spec(session=agent.open(session_id, store), tools=[double, explode])
    endpoint = ScriptedEndpoint([TWO_CALLS, agent.Message.assistant("It is 42.")])
    return agent.Runner(replica=REPLICA).run(spec, [agent.Message.user("double 21\nplease")], endpoint)


@contextlib.contextmanager
def live_run(store: agent.RunStore, session_id: str = "live") -> Iterator[tuple[agent.Run, ScriptedEndpoint, Any]]:
    """A run blocked in its first model request; leaving the block lets it answer with a tool call."""
    entered, release = threading.Event(), threading.Event()

    def first(_: agent.ModelRequest) -> agent.Message:
        entered.set()
        assert release.wait(20), "the test never let the model answer"
        return call("double", n=2)

    endpoint = ScriptedEndpoint([first, echo_last_result])
    spec = agent.Spec(session=agent.open(session_id, store), tools=[double], lease=3.0)
    run = agent.Runner(replica="worker-7").start(spec, [agent.Message.user("double 2")], endpoint)
    try:
        assert entered.wait(20)
        yield run, endpoint, release
    finally:
        release.set()
        run.wait(20)


# --- Every command on every store -----------------------------------------------------------


def test_list_and_show_a_session_made_by_a_real_run(backend: Backend) -> None:
    finished_run(backend.store)
    table = cli("--store", backend.url, "list")
    assert table.code == 0 and table.err == ""
    assert table.lines()[0].split()[:2] == ["ID", "STATE"]
    assert table.lines()[1].split()[:5] == ["conv-1", "finished", "4", "0", table.lines()[1].split()[4]]
    assert REPLICA in table.lines()[1]
    [line] = cli("list", "--json", "--store", backend.url).lines()  # --store after the command works too
    record = json.loads(line)
    assert record["id"] == "conv-1" and record["state"] == "finished" and record["length"] == 4
    assert record["holder"] == REPLICA and record["pending_steers"] == 0 and record["cancel_requested"] is False
    assert cli("--store", backend.url, "list", "--state", "running", "--json").out == ""
    assert len(cli("--store", backend.url, "list", "--state", "RUNNING", "--state", "finished").lines()) == 2

    show = cli("--store", backend.url, "show", "conv-1")
    assert show.code == 0
    text = show.out
    assert "state     finished" in text and f"holder    {REPLICA}" in text and "messages  4" in text
    assert "#0 user\n    double 21\n    please\n#1 assistant\n    Let me work it out.\n" in text
    assert 'tool call double [call-1]: {"n":  21}' in text  # the arguments exactly as the model wrote them
    assert "tool result [call-1]: 42\n" in text
    assert "tool result [call-2] ERROR: " in text and "it blew up" in text
    assert text.rstrip().endswith("#3 assistant\n    It is 42.")
    shown = json.loads(cli("--store", backend.url, "show", "conv-1", "--json").out)
    assert shown["state"] == "finished" and shown["steers"] == []
    assert agent.loads(json.dumps(shown["transcript"])) == backend.store.messages("conv-1")


def test_steer_export_import_fork_cancel_delete(backend: Backend, tmp_path: Path) -> None:
    finished_run(backend.store)
    url = backend.url
    steered = cli("--store", url, "steer", "conv-1", "now say it in French")
    assert (steered.code, steered.out) == (0, "finished\n")  # no run holds it: the steer waits for the next
    show = cli("--store", url, "show", "conv-1").out
    assert "steers    1 waiting:\n    [" in show and "] now say it in French\n" in show

    exported = cli("--store", url, "export", "conv-1")
    assert agent.loads(exported.out) == backend.store.messages("conv-1")
    dump = tmp_path / "conv-1.json"
    dump.write_text(exported.out, encoding="utf-8")
    assert cli("--store", url, "import", "copy", str(dump)).code == 0
    assert backend.store.messages("copy") == backend.store.messages("conv-1")
    refused = cli("--store", url, "import", "copy", str(dump))
    assert refused.code == Exit.CONFLICT and "--replace" in refused.err
    (tmp_path / "short.json").write_text(agent.dumps([agent.Message.user("hi")]), encoding="utf-8")
    assert cli("--store", url, "import", "copy", str(tmp_path / "short.json"), "--replace").code == 0
    assert backend.store.messages("copy") == [agent.Message.user("hi")]

    check_fork(backend)
    assert cli("--store", url, "cancel", "conv-1").code == Exit.NOT_FOUND  # finished: no run holds it

    deleted = cli("--store", url, "delete", "copy", "never-was", "conv-1")
    assert deleted.code == Exit.NOT_FOUND
    assert deleted.out == "deleted 'copy'\ndeleted 'conv-1'\n" and "never-was" in deleted.err
    assert backend.store.info("conv-1").length == 0 and backend.store.peek_steers("conv-1") == []
    for command in (["show"], ["export"], ["steer"], ["cancel"], ["fork"]):
        missing = cli("--store", url, *command, "conv-1", *(["x"] if command[0] in ("steer", "fork") else []))
        assert missing.code == Exit.NOT_FOUND and missing.err == "agentsessions: no session 'conv-1'\n", command


def test_steer_with_a_key_is_stored_once_and_a_reused_key_is_a_conflict(backend: Backend) -> None:
    finished_run(backend.store)
    url = backend.url
    for _ in range(3):  # a script retrying after it lost the answer
        steered = cli("--store", url, "steer", "conv-1", "now in French", "--key", "request-7")
        assert (steered.code, steered.out, steered.err) == (0, "finished\n", "")
    assert [steer.text for steer in backend.store.peek_steers("conv-1")] == ["now in French"]
    reused = cli("--store", url, "steer", "conv-1", "now in German", "--key", "request-7")
    assert reused.code == Exit.CONFLICT and reused.out == ""
    assert reused.err.startswith("agentsessions: ") and "key 'request-7'" in reused.err
    assert reused.err.count("\n") == 1  # one line, no traceback
    empty = cli("--store", url, "steer", "conv-1", "now in German", "--key", "")
    assert empty.code == Exit.USAGE and "key must have 1 to 255 characters" in empty.err
    assert [steer.text for steer in backend.store.peek_steers("conv-1")] == ["now in French"]


def check_fork(backend: Backend) -> None:
    url = backend.url
    assert isinstance(backend.store, agent.ForkStore)  # all five stores fork
    forked = cli("--store", url, "fork", "conv-1", "branch", "--at", "2")
    assert (forked.code, forked.out) == (0, "forked 'conv-1' into 'branch' (2 messages)\n")
    assert backend.store.messages("branch") == backend.store.messages("conv-1")[:2]
    assert backend.store.info("branch").state is agent.RunState.IDLE
    assert cli("--store", url, "fork", "conv-1", "branch").code == Exit.CONFLICT
    past = cli("--store", url, "fork", "conv-1", "other", "--at", "99")
    assert past.code == Exit.USAGE and "between 0" in past.err
    assert cli("--store", url, "fork", "conv-1", "whole").out.endswith("(4 messages)\n")


def test_a_live_run_is_listed_steered_and_cancelled(backend: Backend) -> None:
    url = backend.url
    with live_run(backend.store) as (run, endpoint, release):
        [record] = [json.loads(line) for line in cli("--store", url, "list", "--state", "running", "--json").lines()]
        assert record["id"] == "live" and record["holder"] == "worker-7" and record["lease_expires_at"]
        steered = cli("--store", url, "steer", "live", "use French")
        assert (steered.code, steered.out) == (0, "running\n")
        show = cli("--store", url, "show", "live").out
        assert "state     running" in show and "worker-7 (holds it now)" in show and "left)" in show
        assert "steers    1 waiting:" in show and "use French" in show
        release.set()
        result = run.wait(20)
    assert result.stop_reason == "end_turn"
    assert any("use French" in m.text for m in endpoint.requests[1].messages)  # the live run took the steer
    assert cli("--store", url, "cancel", "live").code == Exit.NOT_FOUND

    with live_run(backend.store, "to-stop") as (run, _, release):
        cancelled = cli("--store", url, "cancel", "to-stop")
        assert cancelled.code == 0 and "cancel requested" in cancelled.out
        assert "(cancelling)" in cli("--store", url, "list", "--state", "running").out
        release.set()
        assert run.wait(20).stop_reason == "cancelled"
    listed = [json.loads(line) for line in cli("--store", url, "list", "--json").lines()]
    assert {record["id"]: record["state"] for record in listed} == {"live": "finished", "to-stop": "cancelled"}


# --- SQLite details, exit codes and input checks ---------------------------------------------


def test_import_over_a_session_a_run_holds_is_refused_even_with_replace(
    sqlite_url: tuple[str, agent.RunStore], tmp_path: Path
) -> None:
    url, store = sqlite_url
    dump = tmp_path / "t.json"
    dump.write_text(agent.dumps([agent.Message.user("x")]), encoding="utf-8")
    with live_run(store):
        refused = cli("--store", url, "import", "live", str(dump), "--replace")
        assert refused.code == Exit.CONFLICT and "worker-7" in refused.err
    assert store.messages("live")[0] == agent.Message.user("double 2")


def test_a_stalled_session_is_listed_as_stalled(sqlite_url: tuple[str, agent.RunStore]) -> None:
    url, store = sqlite_url
    store.claim("crashed", replica="gone:1", lease=0.05)  # a run that claimed and died
    wait_for("the lease to lapse", lambda: store.info("crashed").state is agent.RunState.STALLED)
    [line] = cli("--store", url, "list", "--state", "stalled").lines()[1:]
    assert line.split()[:2] == ["crashed", "stalled"] and "lapsed" in line
    assert cli("--store", url, "cancel", "crashed").code == Exit.NOT_FOUND  # no LIVE run holds it


def test_list_filters_by_age_and_limits(sqlite_url: tuple[str, agent.RunStore]) -> None:
    url, store = sqlite_url
    for n in range(3):
        store.save(f"s{n}", [agent.Message.user(str(n))])
    [header] = cli("--store", url, "list", "--older-than", "1h").lines()  # none that old: the header alone
    assert header.split()[:2] == ["ID", "STATE"]
    aged = [json.loads(line)["id"] for line in cli("--store", url, "list", "--older-than", "0s", "--json").lines()]
    assert aged == ["s2", "s1", "s0"]
    assert len(cli("--store", url, "list", "--limit", "2", "--json").lines()) == 2
    for bad in (["--older-than", "7 days"], ["--older-than", "1x"], ["--limit", "0"], ["--state", "asleep"]):
        outcome = cli("--store", url, "list", *bad)
        assert outcome.code == Exit.USAGE and outcome.out == "", bad


def test_list_filters_by_metadata(sqlite_url: tuple[str, agent.RunStore]) -> None:
    url, store = sqlite_url
    assert isinstance(store, agent.MetadataStore)
    for n, user in enumerate(["42", "7", "42"]):
        store.save(f"m{n}", [agent.Message.user(str(n))])
        store.set_metadata(f"m{n}", {"user": user, "app": "support"})
    listed = [json.loads(line) for line in cli("--store", url, "list", "--metadata", "user=42", "--json").lines()]
    assert [(record["id"], record["metadata"]) for record in listed] == [
        ("m2", {"user": "42", "app": "support"}),
        ("m0", {"user": "42", "app": "support"}),
    ]
    both = cli("--store", url, "list", "--metadata", "user=7", "--metadata", "app=support", "--json").lines()
    assert [json.loads(line)["id"] for line in both] == ["m1"]
    assert cli("--store", url, "list", "--metadata", "user=42", "--state", "running", "--json").lines() == []
    for bad in (["--metadata", "user"], ["--metadata", "=42"], ["--metadata", f"user={'x' * 300}"]):
        outcome = cli("--store", url, "list", *bad)
        assert outcome.code == Exit.USAGE and outcome.out == "", bad


def test_usage_errors_and_help(sqlite_url: tuple[str, agent.RunStore], tmp_path: Path, monkeypatch: Any) -> None:
    url, _ = sqlite_url
    monkeypatch.delenv("AGENTSESSIONS_STORE", raising=False)
    assert cli("list").code == Exit.USAGE and "AGENTSESSIONS_STORE" in cli("list").err
    monkeypatch.setenv("AGENTSESSIONS_STORE", url)
    assert cli("list").code == 0  # the environment names the store
    helped = cli("--help")
    assert helped.code == 0 and "Exit codes:" in helped.out and "3  busy or conflict" in helped.out
    assert cli("frobnicate").code == Exit.USAGE
    assert cli("show", "x" * 256).code == Exit.USAGE  # not a session id
    (tmp_path / "junk.json").write_text('{"hello": 1}', encoding="utf-8")
    junk = cli("import", "x", str(tmp_path / "junk.json"))
    assert junk.code == Exit.USAGE and junk.err.count("\n") == 1 and "Traceback" not in junk.err
    assert cli("import", "x", str(tmp_path / "absent.json")).code == Exit.USAGE
    fresh = tmp_path / "fresh.db"  # import alone makes a SQLite file, and only from a transcript
    assert cli("--store", f"sqlite://{fresh}", "import", "x", str(tmp_path / "junk.json")).code == Exit.USAGE
    assert not fresh.exists()
    (tmp_path / "good.json").write_text(agent.dumps([agent.Message.user("hi")]), encoding="utf-8")
    assert cli("--store", f"sqlite://{fresh}", "import", "x", str(tmp_path / "good.json")).code == 0
    assert cli("--store", f"sqlite://{fresh}", "export", "x").out == agent.dumps([agent.Message.user("hi")]) + "\n"
    wrongs = ("sqlite://host/x.db", "redis://localhost/x", "mysql://root@localhost/", "mongodb://localhost", "ftp://x")
    for wrong in wrongs:
        assert cli("--store", wrong, "list").code == Exit.USAGE, wrong
    missing = cli("--store", f"sqlite://{tmp_path / 'nope.db'}", "list")
    assert missing.code == Exit.STORE and not (tmp_path / "nope.db").exists()
    assert missing.err == f"agentsessions: no SQLite file at {str(tmp_path / 'nope.db')!r} (only import creates one)\n"


def test_text_that_could_drive_a_terminal_is_escaped_and_export_keeps_it_exactly(
    sqlite_url: tuple[str, agent.RunStore],
) -> None:
    url, store = sqlite_url
    odd = "red \x1b[31mtext\x1b[0m, a lone \ud83d and \U0001f600"
    messages = [agent.Message.user(odd), agent.Message.assistant("ok")]
    store.save("odd", messages)
    store.add_steer("odd", "line one\nline two")
    show = cli("--store", url, "show", "odd")
    assert show.code == 0 and "\x1b" not in show.out
    assert "red \\x1b[31mtext\\x1b[0m, a lone \\ud83d and \U0001f600" in show.out
    assert "line one\\nline two" in show.out  # a steer stays on its line
    assert agent.loads(cli("--store", url, "export", "odd").out) == messages
    assert json.loads(cli("--store", url, "show", "odd", "--json").out)["steers"][0]["text"] == "line one\nline two"


# --- Passwords never shown ------------------------------------------------------------------


def _never_shows(outcome: Outcome, secret: str = SECRET) -> Outcome:
    assert secret not in outcome.out and secret not in outcome.err, outcome
    errors = [line for line in outcome.err.splitlines() if not line.startswith("usage: ")]  # argparse's usage line
    assert "Traceback" not in outcome.err and len(errors) <= 1, outcome.err
    return outcome


def test_store_urls_are_shown_with_the_password_masked() -> None:
    encoded = quote(SECRET + "@/x", safe="")
    url = parse_store_url(f"postgresql://app:{encoded}@db.example:5432/prod?password={SECRET}&x=1")
    assert url.shown == "postgresql://app:***@db.example:5432/prod?password=***&x=1"
    assert url.mask(f"failed for {SECRET} and {SECRET}@/x and {encoded}") == "failed for *** and *** and ***"
    typo = _never_shows(cli("--stroe", f"postgresql://app:{SECRET}@db/x", "list"))
    assert typo.code == Exit.USAGE and "app:***@db/x" in typo.err
    # A raw / in the password cuts the URL short; what is left is neither read nor repeated.
    for careless in (f"postgresql://app:{SECRET}/x@db/x", f"postgresql://app:{SECRET}@[::1/x"):
        unreadable = _never_shows(cli("--store", careless, "list"))
        assert unreadable.code == Exit.USAGE and "percent-encode" in unreadable.err
    cut = parse_store_url(f"mysql://app:12/{SECRET}@db/x")  # reads as host `app`, port 12
    assert SECRET not in cut.shown and cut.mask(f"12/{SECRET}") == "***"


@pytest.mark.server
def test_postgres_errors_never_show_the_password() -> None:
    require_server("PostgreSQL", lambda: __import__("psycopg").connect(POSTGRES_DSN, connect_timeout=5).close())
    schema = "agentsessions_no_such_schema"
    wrong = _never_shows(cli("--store", postgres_url(POSTGRES_DSN, schema, SECRET), "list"))
    # A server that trusts this address takes any password: then the schema is what is missing.
    assert wrong.code == Exit.STORE and ":***@" in wrong.err
    unreachable = _never_shows(cli("--store", f"postgresql://postgres:{SECRET}@127.0.0.1:1/test", "list"))
    assert unreachable.code == Exit.STORE and "postgresql://postgres:***@127.0.0.1:1/test" in unreachable.err
    # libpq quotes a password with a space in its own error text: the mask must catch the driver too.
    echoed = _never_shows(cli("--store", f"postgresql://postgres:{SECRET} x@127.0.0.1:5432/test", "list"), SECRET)
    assert echoed.code == Exit.USAGE and '"***"' in echoed.err


@pytest.mark.server
def test_mysql_errors_never_show_the_password() -> None:
    require_server(
        "MariaDB",
        lambda: (
            __import__("pymysql")
            .connect(host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER, password=MYSQL_PASSWORD, connect_timeout=5)
            .close()
        ),
    )
    wrong = _never_shows(cli("--store", mysql_url(MYSQL_HOST, MYSQL_PORT, MYSQL_USER, SECRET, "test"), "list"))
    assert wrong.code == Exit.STORE and "Access denied" in wrong.err and f"{MYSQL_USER}:***@" in wrong.err
    unreachable = _never_shows(cli("--store", f"mysql://root:{SECRET}@127.0.0.1:1/test", "show", "x"))
    assert unreachable.code == Exit.STORE and "mysql://root:***@127.0.0.1:1/test" in unreachable.err


def test_mongodb_errors_never_show_the_password() -> None:
    unreachable = _never_shows(
        cli("--store", f"mongodb://app:{SECRET}@127.0.0.1:1/db?serverSelectionTimeoutMS=300", "list")
    )
    assert unreachable.code == Exit.STORE and "mongodb://app:***@127.0.0.1:1/db" in unreachable.err


@pytest.mark.server
def test_redis_errors_never_show_the_password() -> None:
    require_server("Redis", lambda: __import__("redis").Redis.from_url(REDIS_URL, socket_connect_timeout=5).ping())
    unreachable = _never_shows(cli("--store", f"redis://app:{SECRET}@127.0.0.1:1/0", "list"))
    assert unreachable.code == Exit.STORE and "redis://app:***@127.0.0.1:1/0" in unreachable.err
    # This server has no user `app`: it refuses the password, and the refusal does not repeat it.
    host = urlsplit(REDIS_URL).netloc.rpartition("@")[2]
    refused = _never_shows(cli("--store", f"redis://app:{SECRET}@{host}/0", "list"))
    assert refused.code == Exit.STORE and f"redis://app:***@{host}/0" in refused.err


# --- As a real process ----------------------------------------------------------------------


def _process(*argv: str, env: dict[str, str], stdin: str = "", cwd: Path | None = None) -> Outcome:
    done = subprocess.run(
        [sys.executable, "-m", "agentsessions", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=cwd,
        timeout=120,
        check=False,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


@pytest.mark.server
def test_python_m_agentsessions_on_postgres_pipes_export_into_import() -> None:
    with contextlib.ExitStack() as stack:
        opener: Any = require_server("PostgreSQL", lambda: stack.enter_context(scratch_postgres(POSTGRES_DSN)))
        store = stack.enter_context(opener())
        finished_run(store)
        env = {"AGENTSESSIONS_STORE": postgres_url(*opener.args)}
        exported = _process("export", "conv-1", env=env)
        assert exported.code == 0 and exported.err == ""
        imported = _process("import", "restored", "-", env=env, stdin=exported.out)
        assert (imported.code, imported.out) == (0, "imported 4 messages into 'restored'\n")
        assert store.messages("restored") == store.messages("conv-1")
        listed = [json.loads(line) for line in _process("list", "--json", env=env).out.splitlines()]
        assert [(r["id"], r["state"]) for r in listed] == [("restored", "idle"), ("conv-1", "finished")]
        assert _process("show", "nobody", env=env).code == Exit.NOT_FOUND


def test_python_m_agentsessions_with_a_relative_sqlite_path(tmp_path: Path) -> None:
    with contextlib.closing(sqlite.open(tmp_path / "here.db")) as store:
        finished_run(store)
    listed = _process("list", env={"AGENTSESSIONS_STORE": "sqlite:here.db"}, cwd=tmp_path)
    assert listed.code == 0 and listed.out.splitlines()[1].startswith("conv-1  finished")


def test_a_missing_driver_names_the_extra_to_install() -> None:
    # The interpreter is told that psycopg is not installed: importing it then raises ImportError.
    script = "import sys; sys.modules['psycopg'] = None; from agentsessions.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", script, "--store", f"postgresql://u:{SECRET}@127.0.0.1/db", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == Exit.STORE and SECRET not in done.stderr
    assert done.stderr == "agentsessions: the postgres store needs its driver: pip install agentsessions[postgres]\n"


def test_show_prints_every_block_type(sqlite_url: tuple[str, agent.RunStore]) -> None:
    url, store = sqlite_url
    C = agent.Content
    messages = [
        agent.Message.user("what is this?", C.image(url="https://example.com/a.png")),
        agent.Message(
            agent.Role.ASSISTANT,
            [
                C.thinking("it looks like a cat", "sig-1"),
                C.redacted_thinking("b64secret"),
                C.raw("anthropic", '{"type": "server_tool_use", "id": "srv_1"}'),
                C.tool_use("call-1", "read", '{"path": "a.pdf"}'),
            ],
        ),
        agent.Message(
            agent.Role.USER,
            [
                C.tool_result("call-1", "the file:"),
                attrs.evolve(
                    C.document(media_type="application/pdf", data="JVBERi0x", name="a.pdf"), tool_use_id="call-1"
                ),
            ],
        ),
    ]
    store.save("blocks", messages)
    text = cli("--store", url, "show", "blocks").out
    assert "    image: https://example.com/a.png\n" in text
    assert "    thinking (signed): it looks like a cat\n" in text
    assert "    redacted thinking (9 characters)\n" in text
    assert "    anthropic block server_tool_use\n" in text
    assert "    document 'a.pdf' from tool call [call-1]: application/pdf, 8 base64 characters\n" in text


def test_approve_with_an_edited_input(backend: Backend) -> None:
    url, store = backend.url, backend.store

    @agent.tool(needs_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    session = agent.open("edit", store)
    uses = [agent.Content.tool_use("c1", "delete", '{"path": "a"}')]
    endpoint = ScriptedEndpoint([agent.Message(agent.Role.ASSISTANT, uses), agent.Message.assistant("done")])
    spec = agent.Spec(session=session, tools=[delete])
    agent.Runner().run(spec, [agent.Message.user("tidy up")], endpoint)
    misfit = cli("--store", url, "approve", "edit", "c1", "--input", '{"path": 3}')
    assert misfit.code == 2 and "path: expected string" in misfit.err, misfit.err
    assert cli("--store", url, "approve", "edit", "c1", "--input", '{"path": "b"}').lines() == ["waiting"]
    called = json.loads(cli("--store", url, "approvals", "edit", "--json").lines()[0])
    assert (called["input"], called["original_input"]) == ('{"path": "b"}', '{"path": "a"}')
    assert cli("--store", url, "approve", "edit", "c1", "--input", '{"path": "c"}').code == 3
    assert agent.Runner().run(spec, agent.Resume(), endpoint).messages[2].content[0].text == "deleted b"


def test_approvals_approve_reject_and_list_waiting(backend: Backend) -> None:
    url, store = backend.url, backend.store

    @agent.tool(needs_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    uses = [agent.Content.tool_use(f"c{i}", "delete", f'{{"path": "{p}"}}') for i, p in enumerate("ab", 1)]
    session = agent.open("tidy", store)
    spec = agent.Spec(session=session, tools=[delete])
    agent.Runner().run(
        spec, [agent.Message.user("tidy up")], ScriptedEndpoint([agent.Message(agent.Role.ASSISTANT, uses)])
    )
    listed = cli("--store", url, "list", "--state", "waiting", "--json")
    assert listed.code == 0 and [json.loads(line)["id"] for line in listed.lines()] == ["tidy"]
    assert json.loads(listed.lines()[0])["pending_approvals"] == 2
    assert "for approval: 2 call(s) undecided" in cli("--store", url, "show", "tidy").out
    shown = cli("--store", url, "approvals", "tidy")
    assert shown.code == 0 and [line.split()[:3] for line in shown.lines()] == [
        ["c1", "delete", "undecided"],
        ["c2", "delete", "undecided"],
    ]
    assert cli("--store", url, "approve", "tidy", "c1", "--by", "ann").lines() == ["waiting"]
    assert cli("--store", url, "approve", "tidy", "c1").code == 0  # the same decision again: a retry
    refused = cli("--store", url, "reject", "tidy", "c1")
    assert refused.code == 3 and "already approved" in refused.err
    assert cli("--store", url, "reject", "tidy", "c2", "--reason", "keep b").lines() == ["waiting"]
    calls = [json.loads(line) for line in cli("--store", url, "approvals", "tidy", "--json").lines()]
    assert [(c["call_id"], c["decision"], c["by"], c["reason"]) for c in calls] == [
        ("c1", "approved", "ann", ""),
        ("c2", "rejected", "", "keep b"),
    ]
    assert cli("--store", url, "approve", "nope", "c1").code == 1  # no such session
    bad = cli("--store", url, "approve", "tidy", "c1", "--input", "{path")
    assert bad.code == 2 and "not valid JSON" in bad.err and bad.err.startswith("agentsessions: ")
    assert cli("--store", url, "cancel", "tidy").code == 0
    assert store.info("tidy").state is agent.RunState.CANCELLED


def test_list_json_carries_each_sessions_usage_and_preview(sqlite_url: tuple[str, agent.RunStore]) -> None:
    url, store = sqlite_url
    reply = agent.ModelResponse(agent.Message.assistant("the answer"), usage=agent.Usage(12, 3, 40, 5))
    agent.Runner().run(
        agent.Spec(session=agent.open("chat", store)), [agent.Message.user("hi")], ScriptedEndpoint([reply])
    )
    listed = cli("--store", url, "list", "--json")
    [record] = [json.loads(line) for line in listed.lines()]
    assert listed.code == 0 and record["preview"] == "the answer"
    assert record["usage"] == {"input_tokens": 12, "output_tokens": 3, "cache_read_tokens": 40, "cache_write_tokens": 5}
