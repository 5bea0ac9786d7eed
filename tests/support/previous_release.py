"""The previous release (schema version 1) run in a subprocess: it fills a store, or uses one.

``python -m tests.support.previous_release SCENARIO OPENER_JSON`` with ``PYTHONPATH`` starting
with ``tests/fixtures/schema_v1/agentsessions-b20dfef.zip``, so ``agentsessions`` is the
release of that commit; :func:`run_previous` does this. ``OPENER_JSON`` names one of the
``open_*`` functions of :mod:`tests.support.backends` and its arguments; those use only what
both releases have. The scenario prints one JSON object: what it stored, as the store that
stored it reads it back (:func:`snapshot`), which a test compares with what this release reads.

The module itself imports only the public API both releases share, so it runs under either.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import agentsessions as agent

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = ROOT / "tests" / "fixtures" / "schema_v1" / "agentsessions-b20dfef.zip"

Opener = Callable[[], AbstractContextManager[Any]]


def transcripts() -> dict[str, list[agent.Message]]:
    """Transcripts that exercise the stored form: tool calls with raw JSON, thinking, images, any text."""
    tool = agent.Content.tool_use("call-1", "lookup", '{"z":1,"a":[1, 2],"z":3}')
    return {
        "plain": [agent.Message.user("hello"), agent.Message.assistant("hi there")],
        "tools": [
            agent.Message.user("what is 2+2?"),
            agent.Message(agent.Role.ASSISTANT, (agent.Content.thinking("let me see", "sig=="), tool)),
            agent.Message.user(agent.Content.tool_result("call-1", "4\x00 (with a NUL)")),
            agent.Message.assistant("It is 4. \U0001f600 \ud800"),
        ],
        "image": [agent.Message.user("look", agent.Content.image(media_type="image/png", data="iVBORw0KGgo="))],
    }


def snapshot(store: Any, ids: Sequence[str]) -> dict[str, Any]:
    """Each session as ``store`` reads it: the transcript in the dumps form, its record and its steers."""
    return {
        session_id: {
            # The messages without the dumps form's version: a newer release writes a newer one.
            "messages": json.loads(agent.dumps(store.messages(session_id)))["messages"],
            "info": _info(store.info(session_id)),
            "steers": [steer.text for steer in store.peek_steers(session_id)],
        }
        for session_id in ids
    }


def _info(info: Any) -> dict[str, Any]:
    def moment(value: datetime.datetime | None) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "length": info.length,
        "updated_at": moment(info.updated_at),
        "state": info.state.value,
        "holder": info.holder,
        "lease_expires_at": moment(info.lease_expires_at),
        "pending_steers": info.pending_steers,
        "cancel_requested": info.cancel_requested,
    }


def fill(store: Any, prefix: str) -> dict[str, Any]:
    """Sessions in every state a store keeps, with steers, a fork and ids that test byte handling."""
    texts = transcripts()
    ids = {name: prefix + name for name in ("plain", "steered", "held", "finished", "cancelling", "forked")}
    ids["odd"] = prefix + "ü \x00 a%_"
    store.save(ids["plain"], texts["plain"])
    store.save(ids["odd"], texts["image"])
    store.save(ids["steered"], texts["tools"])
    store.add_steer(ids["steered"], "first")
    store.add_steer(ids["steered"], "second \u2713")
    claim = store.claim(ids["held"], replica="previous-release", lease=3600.0)
    store.save_run(claim, texts["tools"])
    store.add_steer(ids["held"], "while held")
    claim = store.claim(ids["finished"], replica="previous-release", lease=60.0)
    store.save_run(claim, texts["plain"], end=agent.RunState.FINISHED)
    claim = store.claim(ids["cancelling"], replica="previous-release", lease=3600.0)
    store.save_run(claim, texts["plain"])
    store.cancel(ids["cancelling"])
    store.fork(ids["steered"], ids["forked"], at=2)
    return snapshot(store, list(ids.values()))


def use(store: Any, prefix: str) -> dict[str, Any]:
    """What a replica does: save, read, steer, claim, take steers in a save, release, list, take, delete."""
    texts = transcripts()
    session_id, other = prefix + "used", prefix + "deleted"
    store.save(session_id, texts["tools"])
    read = agent.dumps(store.messages(session_id))
    state = store.add_steer(session_id, "from the previous release")
    claim = store.claim(session_id, replica="previous-release", lease=60.0)
    peeked = store.peek_steers(session_id)
    carried = [*texts["tools"], agent.Message.user(*(steer.text for steer in peeked))]
    store.save_run(claim, carried, taken=[steer.seq for steer in peeked], end=agent.RunState.FINISHED)
    store.add_steer(session_id, "taken by hand")
    taken = store.take_steers(session_id)
    listed = [info.id for info in store.sessions() if info.id.startswith(prefix)]
    store.save(other, texts["plain"])
    deleted = store.delete(other)
    return {
        "read": read,
        "state": state.value,
        "peeked": [steer.text for steer in peeked],
        "taken": taken,
        "listed": listed,
        "deleted": deleted,
        "gone": store.messages(other) == [],
        "snapshot": snapshot(store, [session_id]),
    }


SCENARIOS: dict[str, Callable[[Any, str], dict[str, Any]]] = {"fill": fill, "use": use}


def describe(opener: functools.partial[AbstractContextManager[Any]]) -> str:
    """An opener of :mod:`tests.support.backends` as the JSON the subprocess reads."""
    return json.dumps({"function": opener.func.__name__, "args": list(opener.args)})


@contextlib.contextmanager
def _opened(description: str) -> Iterator[Any]:
    from tests.support import backends

    named = json.loads(description)
    with getattr(backends, named["function"])(*named["args"]) as store:
        yield store


def run_previous(scenario: str, opener: Opener, prefix: str) -> dict[str, Any]:
    """Run ``scenario`` with the previous release against the store ``opener`` opens; what it printed."""
    assert isinstance(opener, functools.partial)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PREVIOUS), str(ROOT)])}
    # -P: no current directory first on the path, where this release's package would win over the zip.
    command = [sys.executable, "-P", "-m", "tests.support.previous_release", scenario, describe(opener), prefix]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"the previous release failed {scenario!r}:\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout)
    assert result.pop("release") == str(PREVIOUS / "agentsessions" / "__init__.py"), "not the previous release"
    return result


def main(argv: Sequence[str]) -> None:
    """Run the scenario ``argv[0]`` over the opener described by ``argv[1]``, ids under ``argv[2]``."""
    scenario, description, prefix = argv
    with _opened(description) as store:
        result = SCENARIOS[scenario](store, prefix)
    print(json.dumps({"release": agent.__file__, **result}))


if __name__ == "__main__":
    main(sys.argv[1:])
