"""The SDK adapters (agentsessions.integrations): processes writing one session at once lose nothing, on every store.

The SDKs' own suites (tests/sdk) prove the protocols; these prove the fencing across real
OS processes, and the adapters' own edges: stores they refuse, foreign messages, long keys,
a retried Claude batch.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

from tests.support.servers import skip_without

skip_without("agents", "claude_agent_sdk", extra="openai-agents,claude")

from agents import TResponseInputItem
from claude_agent_sdk import SessionKey

import agentsessions as agent
from agentsessions.integrations import claude, openai_agents
from agentsessions.stores.memory import MemoryStore

pytestmark = pytest.mark.slow  # processes racing, on every store

Opener = Callable[[], AbstractContextManager[Any]]
WRITERS, EACH = 3, 15
KEY: SessionKey = {"project_key": "-srv-app", "session_id": "shared"}


def _add_openai_items(opener: Opener, writer: int, go: Any) -> None:
    with opener() as store:
        session = openai_agents.Session("shared", store, replica=f"writer-{writer}")
        go.wait(60)
        for n in range(EACH):
            item: TResponseInputItem = {"role": "user", "content": f"{writer}:{n}"}
            asyncio.run(session.add_items([item]))


def _append_claude_entries(opener: Opener, writer: int, go: Any) -> None:
    with opener() as store:
        sessions = claude.SessionStore(store, replica=f"writer-{writer}")
        go.wait(60)
        for n in range(EACH):
            entry = {"type": "user", "uuid": f"{writer}:{n}", "timestamp": "2024-01-01T00:00:00.000Z"}
            asyncio.run(sessions.append(KEY, [entry]))  # type: ignore[list-item]


def _race(opener: Opener, writer: Callable[[Opener, int, Any], None]) -> None:
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    processes = [context.Process(target=writer, args=(opener, w, go)) for w in range(WRITERS)]
    for process in processes:
        process.start()
    go.set()  # the processes have imported the SDKs meanwhile; they start writing together
    for process in processes:
        process.join(120)
        assert process.exitcode == 0, f"writer exited with {process.exitcode}"


def _check_all_once_in_order(written: list[str]) -> None:
    assert sorted(written) == sorted(f"{w}:{n}" for w in range(WRITERS) for n in range(EACH))
    for w in range(WRITERS):
        mine = [int(text.split(":")[1]) for text in written if text.startswith(f"{w}:")]
        assert mine == list(range(EACH))


def test_openai_agents_processes_adding_at_once_lose_no_item(opener: Opener) -> None:
    _race(opener, _add_openai_items)
    with opener() as store:
        items = asyncio.run(openai_agents.Session("shared", store).get_items())
        assert store.info("shared").state is agent.RunState.FINISHED  # every change released the session
    _check_all_once_in_order([str(item["content"]) for item in items])  # type: ignore[typeddict-item]


def test_claude_processes_appending_at_once_lose_no_entry(opener: Opener) -> None:
    _race(opener, _append_claude_entries)
    with opener() as store:
        sessions = claude.SessionStore(store)
        entries = asyncio.run(sessions.load(KEY)) or []
        summaries = asyncio.run(sessions.list_session_summaries(KEY["project_key"]))
        listed = asyncio.run(sessions.list_sessions(KEY["project_key"]))
    _check_all_once_in_order([str(entry["uuid"]) for entry in entries])
    assert [s["session_id"] for s in summaries] == [s["session_id"] for s in listed] == ["shared"]
    assert summaries[0]["mtime"] >= listed[0]["mtime"]


def test_adapters_refuse_a_store_without_claims() -> None:
    class SeedStore:  # the seed's four methods only: no claims, so no fencing
        def save(self, session_id: str, messages: Any) -> None: ...
        def messages(self, session_id: str) -> list[agent.Message]:
            return []

        def add_steer(self, session_id: str, text: str) -> None: ...
        def take_steers(self, session_id: str) -> list[str]:
            return []

    with pytest.raises(TypeError, match="RunStore"):
        openai_agents.Session("s", SeedStore())
    with pytest.raises(TypeError, match="RunStore"):
        claude.SessionStore(SeedStore())


def test_openai_agents_session_refuses_what_it_did_not_write() -> None:
    store = MemoryStore()
    store.save("chat", [agent.Message.user("written by an agentsessions run")])
    with pytest.raises(agent.FormatError, match="not a openai-agents item"):
        asyncio.run(openai_agents.Session("chat", store).get_items())


def test_openai_agents_bad_arguments_name_themselves() -> None:
    with pytest.raises(agent.InvalidSessionIdError):
        openai_agents.Session("", MemoryStore())
    with pytest.raises(ValueError, match="lease"):
        openai_agents.Session("s", MemoryStore(), lease=0)
    session = openai_agents.Session("s", MemoryStore())
    with pytest.raises(TypeError):
        unserializable: Any = {"role": "user", "content": object()}
        asyncio.run(session.add_items([unserializable]))
    assert asyncio.run(session.get_items()) == []  # nothing was written, no claim left behind
    assert session.store.info("s").state is agent.RunState.IDLE


def test_openai_agents_items_round_trip_verbatim() -> None:
    store = MemoryStore()
    session = openai_agents.Session("s", store)
    items: list[Any] = [
        {"role": "user", "content": 'z\u0000\U0001f600 "quoted"'},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"z":1,"a":[1, 2],"z":3}'},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.get_items()) == items
    roles = [m.role for m in store.messages("s")]
    assert roles == [agent.Role.USER, agent.Role.ASSISTANT, agent.Role.USER]
    assert asyncio.run(session.pop_item()) == items[-1]
    asyncio.run(session.clear_session())
    assert store.info("s").length == 0 and asyncio.run(session.pop_item()) is None


def test_claude_a_retried_batch_is_stored_once() -> None:
    sessions = claude.SessionStore(MemoryStore())
    batch: list[Any] = [{"type": "user", "uuid": "u1"}, {"type": "x"}, {"type": "assistant", "uuid": "a1"}]
    asyncio.run(sessions.append(KEY, batch))
    asyncio.run(sessions.append(KEY, [batch[0], {"type": "x"}, batch[2], {"type": "user", "uuid": "u2"}]))
    # Entries without a uuid (titles, tags) are appended again, as the SDK asks.
    assert asyncio.run(sessions.load(KEY)) == [*batch, {"type": "x"}, {"type": "user", "uuid": "u2"}]


def test_claude_keys_are_encoded_apart_and_bounded() -> None:
    store = MemoryStore()
    sessions = claude.SessionStore(store)
    tricky: SessionKey = {"project_key": "a:b/c", "session_id": "s:1"}
    plain: SessionKey = {"project_key": "a", "session_id": "b:c/s:1"}
    asyncio.run(sessions.append(tricky, [{"type": "x", "n": 1}]))  # type: ignore[typeddict-unknown-key]
    asyncio.run(sessions.append(plain, [{"type": "x", "n": 2}]))  # type: ignore[typeddict-unknown-key]
    assert asyncio.run(sessions.load(tricky)) == [{"type": "x", "n": 1}]
    assert asyncio.run(sessions.list_sessions("a:b/c")) == [{"session_id": "s:1", "mtime": pytest.approx(0, abs=1e13)}]
    long_project: SessionKey = {"project_key": "p" * 300, "session_id": "s"}
    asyncio.run(sessions.append(long_project, [{"type": "x"}]))
    assert [s["session_id"] for s in asyncio.run(sessions.list_sessions("p" * 300))] == ["s"]
    with pytest.raises(ValueError, match="at most 255"):
        asyncio.run(sessions.append({"project_key": "p", "session_id": "s" * 300}, [{"type": "x"}]))
