"""``SessionInfo.usage`` and ``SessionInfo.preview`` as runs leave them: a sidebar is one listing.

The store's own rules are storetest's (``storetest.SUMMARY``); these run agents and read the records.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runs import PREVIEW_CHARS
from agentsessions.stores.kit.summary import fold_usage, stored_usage
from agentsessions.stores.memory import MemoryStore
from tests.support.backends import PERSISTENT, scratch_opener, store_params


@pytest.fixture(params=store_params("memory", *PERSISTENT))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[agent.RunStore]:
    """A store of each kind: every one keeps usage and preview."""
    if request.param == "memory":
        yield MemoryStore()
        return
    with scratch_opener(request.param, tmp_path) as opener, opener() as opened:
        yield opened


def _reply(text: str, usage: agent.Usage) -> agent.ModelResponse:
    return agent.ModelResponse(agent.Message.assistant(text), usage=usage)


def _tool_call(usage: agent.Usage) -> agent.ModelResponse:
    message = agent.Message(agent.Role.ASSISTANT, (agent.Content.tool_use("c1", "clock", "{}"),))
    return agent.ModelResponse(message, stop_reason="tool_use", usage=usage)


@agent.tool
def clock() -> str:
    """The time."""
    return "noon"


def test_a_session_sums_the_usage_of_its_runs_and_shows_its_last_words(store: agent.RunStore) -> None:
    session = agent.open("chat", store)
    spec = agent.Spec(session=session, tools=(clock,))
    first = agent.Runner().run(
        spec,
        [agent.Message.user("what time is it?")],
        ScriptedEndpoint([_tool_call(agent.Usage(100, 10, 5, 1)), _reply("It is noon.", agent.Usage(120, 7, 90, 0))]),
    )
    info = session.info()
    assert first.usage == agent.Usage(220, 17, 95, 1)
    assert (info.usage, info.preview) == (first.usage, "It is noon.")

    answer = "x" * (PREVIEW_CHARS + 50)
    second = agent.Runner().run(
        spec, [*first.messages, agent.Message.user("and tomorrow?")], ScriptedEndpoint([_reply(answer, agent.Usage(3))])
    )
    info = session.info()
    assert (info.usage, info.preview) == (first.usage + second.usage, answer[:PREVIEW_CHARS])
    [listed] = list(store.sessions())
    assert (listed.usage, listed.preview) == (info.usage, info.preview)


def test_a_plain_save_shows_its_text_and_keeps_the_usage(store: agent.RunStore) -> None:
    session = agent.open("notes", store)
    agent.Runner().run(
        agent.Spec(session=session), [agent.Message.user("hi")], ScriptedEndpoint([_reply("hello", agent.Usage(9, 9))])
    )
    session.save([*session.messages(), agent.Message.user("an edit by the application")])
    info = session.info()
    assert (info.usage, info.preview) == (agent.Usage(9, 9), "an edit by the application")


def test_the_stored_usage_folds_each_run_once_and_refuses_what_it_cannot_read() -> None:
    first = fold_usage(None, 7, agent.Usage(10, 1))
    assert fold_usage(first, 7, agent.Usage(10, 1)) == first  # a save repeated stores the same
    again = fold_usage(fold_usage(first, 7, agent.Usage(20, 2)), 9, agent.Usage(1, 1, 1, 1))
    assert stored_usage(again) == agent.Usage(21, 3, 1, 1)
    assert stored_usage(None) == stored_usage("") == agent.Usage()
    for bad in ("{", '{"token": 1}', '{"token": 1, "run": [1, 2], "before": [0, 0, 0, 0]}', '{"token": "1"}'):
        with pytest.raises(agent.FormatError, match="stored usage"):
            stored_usage(bad)
