"""examples/sessions: three OS processes over one SQLite file print the promised lines and where the store is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentsessions.testing.fakes import chat_completions as fake_openai
from agentsessions.testing.fakes import messages as fake_anthropic
from agentsessions.testing.fakes import responses as fake_responses
from agentsessions.testing.fakes.server import FakeServer
from tests.support.paths import ROOT


def test_the_three_replica_example_keeps_its_promises(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sessions"), "--db", str(tmp_path / "sessions.db")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 7
    # Where the store is, whole: the reader can open it.
    db = (tmp_path / "sessions.db").resolve()
    assert lines[0] == f"replica B   left a steer in {db}, holding no run — there was none yet"
    assert lines[6] == f"the store   agentsessions show --store sqlite:///{db} conversation-1"
    command = [sys.executable, "-m", "agentsessions", *lines[6].split()[3:]]
    shown = subprocess.run(command, capture_output=True, text=True, check=False)
    assert shown.returncode == 0 and "check the lease expiry" in shown.stdout, shown.stderr
    assert lines[1] == "replica A   ran 2 steps and was never told replica B existed"
    assert lines[2] == "transcript  4 messages, and the steer is message 0 of them"
    assert lines[3] == "replica C   resumed from 4 messages it never produced, and answered"
    assert 'line 23 (raise TokenError("token refused' in lines[4]
    assert lines[5] == "steers      0 left in the store: it was handed over exactly once"


KEY = "sk-example-test-key"
STEER = "check the lease expiry, not the token"


def _openai(script_answers: list[tuple[str, dict[str, str]] | str]) -> tuple[FakeServer, str, dict[str, str]]:
    replies = [
        fake_openai.Reply(content=a) if isinstance(a, str) else fake_openai.Reply(tool_calls=[_openai_call(*a)])
        for a in script_answers
    ]
    server = fake_openai.FakeChatCompletionsAPI(replies, api_key=KEY)
    return server, "openai:gpt-test", {"OPENAI_API_KEY": KEY}


def _openai_call(name: str, arguments: dict[str, str]) -> fake_openai.Call:
    return fake_openai.Call(f"call-{name}", name, json.dumps(arguments))


def _responses(script_answers: list[tuple[str, dict[str, str]] | str]) -> tuple[FakeServer, str, dict[str, str]]:
    # Every answer comes after a reasoning item: the fake refuses a call sent back without it.
    replies = [
        fake_responses.Answer(a, reasoning="think")
        if isinstance(a, str)
        else fake_responses.Answer(calls=[_openai_call(*a)], reasoning=f"call {a[0]}")
        for a in script_answers
    ]
    server = fake_responses.FakeResponsesAPI(replies, api_key=KEY)
    return server, "openai-responses:gpt-test", {"OPENAI_API_KEY": KEY}


def _anthropic(script_answers: list[tuple[str, dict[str, str]] | str]) -> tuple[FakeServer, str, dict[str, str]]:
    replies = [
        fake_anthropic.Reply([fake_anthropic.text(a)])
        if isinstance(a, str)
        else fake_anthropic.Reply([fake_anthropic.tool_use(f"toolu_{a[0]}", a[0], dict(a[1]))])
        for a in script_answers
    ]
    server = fake_anthropic.FakeMessagesAPI(replies, api_key=KEY)
    return server, "anthropic:claude-test", {"ANTHROPIC_API_KEY": KEY}


@pytest.mark.parametrize("provider", [_openai, _responses, _anthropic], ids=["openai", "openai-responses", "anthropic"])
def test_the_example_runs_against_a_provider_over_http(
    tmp_path: Path, provider: Callable[[list[tuple[str, dict[str, str]] | str]], tuple[FakeServer, str, dict[str, str]]]
) -> None:
    script: list[tuple[str, dict[str, str]] | str] = [
        ("read_file", {"path": "lease.py"}),
        "renew_lease returns None once the lease has expired.",
        ("grep", {"pattern": "raise TokenError", "path": "lease.py"}),
        "Line 23 raises the token error.",
    ]
    server, model, env = provider(script)
    with server:
        base_url = server.url if isinstance(server, fake_openai.FakeChatCompletionsAPI) else server.origin
        example = [sys.executable, str(ROOT / "examples" / "sessions"), "--db", str(tmp_path / "s.db")]
        done = subprocess.run(
            [*example, "--model", model, "--base-url", base_url],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **env},
        )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1:4] == [
        "replica A   ran 2 steps and was never told replica B existed",
        "transcript  4 messages, and the steer is message 0 of them",
        "replica C   resumed from 4 messages it never produced, and answered",
    ]
    assert lines[4] == '            "Line 23 raises the token error."'
    assert len(server.requests) == 4
    first = server.requests[0].body.get("messages") or server.requests[0].body["input"]
    assert STEER in json.dumps(first[-1])  # A's first request carried B's steer, and only it
    if isinstance(server, fake_responses.FakeResponsesAPI):  # C sent back the reasoning A's process stored
        assert [item["type"] for item in server.requests[3].body["input"]].count("reasoning") == 3
    assert KEY not in done.stdout + done.stderr
