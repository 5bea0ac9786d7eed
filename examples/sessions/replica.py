"""One replica of the example: run as its own OS process, it knows only the database file.

    python replica.py B|A|C DB_PATH SESSION_ID [--model PROVIDER:MODEL] [--base-url URL]

B leaves a steer and holds no run. A runs from an empty transcript. C resumes from the
stored transcript plus a new user message. Without ``--model`` the model is a
ScriptedEndpoint whose replies are computed from what the tools returned.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores import sqlite

HERE = Path(__file__).resolve().parent
STEER = "check the lease expiry, not the token"
QUESTION = "and which line raises the token error?"


def _numbered(lines: list[str], keep: list[int]) -> str:
    return "\n".join(f"{n:3} | {lines[n - 1]}" for n in keep)


@agent.tool
def read_file(path: str) -> str:
    """Read a file of the service's code, with line numbers.

    Args:
        path: the file's name, such as lease.py.
    """
    lines = (HERE / Path(path).name).read_text().splitlines()
    return _numbered(lines, list(range(1, len(lines) + 1)))


@agent.tool
def grep(pattern: str, path: str) -> str:
    """Find the lines of a file that match a regular expression, with line numbers.

    Args:
        pattern: a Python regular expression.
        path: the file's name, such as lease.py.
    """
    lines = (HERE / Path(path).name).read_text().splitlines()
    return _numbered(lines, [n for n, line in enumerate(lines, 1) if re.search(pattern, line)]) or "no match"


def _tool_output(request: agent.ModelRequest) -> list[tuple[int, str]]:
    """The numbered lines the last tool call returned."""
    result = request.messages[-1].content[0].text
    return [(int(m[1]), m[2]) for m in re.finditer(r"^\s*(\d+) \| (.*)$", result, re.MULTILINE)]


def _call(name: str, **arguments: str) -> agent.Message:
    return agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use(f"call-{name}", name, json.dumps(arguments))])


def _answer_expiry(request: agent.ModelRequest) -> agent.Message:
    lines = _tool_output(request)
    expiry = next(i for i, (_, code) in enumerate(lines) if "expires_at" in code and code.strip().startswith("if"))
    number, code = lines[expiry + 1]
    return agent.Message.assistant(
        f"renew_lease returns None when the lease has expired (line {number}: {code.strip()}), "
        "so check_token reports an expired lease as a refused token."
    )


def _answer_raise(request: agent.ModelRequest) -> agent.Message:
    found = " and ".join(f"line {n} ({code.strip()})" for n, code in _tool_output(request))
    return agent.Message.assistant(f"The token error is raised on {found}, after renew_lease returned None.")


def scripted(role: str) -> ScriptedEndpoint:
    """The offline model: what A and C would hear from a real one, computed from the tools' output."""
    if role == "A":
        return ScriptedEndpoint([_call("read_file", path="lease.py"), _answer_expiry])
    return ScriptedEndpoint([_call("grep", pattern=r"raise TokenError\(.token", path="lease.py"), _answer_raise])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices="BAC")
    parser.add_argument("db")
    parser.add_argument("session_id")
    parser.add_argument("--model", default="")
    parser.add_argument("--base-url", default="")
    args = parser.parse_args()
    store = sqlite.open(args.db)
    session = agent.open(args.session_id, store)
    if args.role == "B":
        session.steer(STEER)  # no Runner, no Run: only the store
        return
    if args.model:
        from agentsessions.endpoints import by_name

        options = {"base_url": args.base_url} if args.base_url else {}
        endpoint: agent.Endpoint = by_name(args.model, **options)
    else:
        endpoint = scripted(args.role)
    spec = agent.Spec(session=session, tools=[read_file, grep], max_steps=4, system="You review lease.py.")
    if args.role == "A":
        result = agent.Runner().run(spec, [], endpoint)
    else:
        result = agent.Runner().run(spec, [*store.messages(args.session_id), agent.Message.user(QUESTION)], endpoint)
    json.dump({"steps": result.steps, "text": result.text}, sys.stdout)


if __name__ == "__main__":
    main()
