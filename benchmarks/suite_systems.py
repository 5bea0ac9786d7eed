"""The systems the suite compares, each driving the same scripted model and the same tool.

Every model here answers request ``i`` with a call of ``add(a=i, b=1)`` and the last one
with the text "done", and notes the time of each request: a step is the time from one
request to the next, whatever the system does in between (its own bookkeeping, the tool,
its save). Each system's model returns that system's own message objects, so building
them counts against it, as it would with a real endpoint; the plain-dict floor's model
returns a dict.

A system whose package is not installed is left out, with the reason (see ``missing``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sqlite3
import time
import warnings
from collections.abc import Callable
from typing import Any

import attrs

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores import sqlite

USER = "count"


@attrs.frozen
class Run:
    """One run's request times (one per step) and, with a store, the file it left."""

    stamps: list[float]
    ended: float
    path: str = ""

    def per_step(self) -> list[float]:
        """Seconds each step took, from its request to the next (the last to the run's end)."""
        times = [*self.stamps, self.ended]
        return [later - earlier for earlier, later in itertools.pairwise(times)]


def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


# --- The floor: a loop over plain dicts, as someone would write it with no library ------------


def plain_dict(steps: int, path: str = "", durable: bool = True) -> Run:
    """The floor: dicts in, dicts out; with ``path``, each step's new messages in one SQLite commit."""
    stamps: list[float] = []

    def model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
        stamps.append(time.perf_counter())
        i = len(stamps) - 1
        if i < steps - 1:
            call = {"id": f"c{i}", "name": "add", "arguments": json.dumps({"a": i, "b": 1})}
            return {"role": "assistant", "content": "", "tool_calls": [call]}
        return {"role": "assistant", "content": "done"}

    db = _plain_db(path, durable) if path else None
    transcript: list[dict[str, Any]] = [{"role": "user", "content": USER}]
    saved = 0
    for _ in range(steps):
        if db is not None:  # save what is new before the request, as the other systems do
            with db:
                db.executemany("INSERT INTO messages (body) VALUES (?)", [(json.dumps(m),) for m in transcript[saved:]])
            saved = len(transcript)
        reply = model(transcript)
        transcript.append(reply)
        calls = reply.get("tool_calls") or []
        if not calls:
            break
        tools = {"add": add}
        for call in calls:
            output = tools[call["name"]](**json.loads(call["arguments"]))
            transcript.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    if db is not None:
        with db:
            db.executemany("INSERT INTO messages (body) VALUES (?)", [(json.dumps(m),) for m in transcript[saved:]])
        db.close()
    return Run(stamps, time.perf_counter(), path)


def _plain_db(path: str, durable: bool) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
    db.execute("CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    return db


def message_text_bytes(steps: int) -> int:
    """The bytes of a ``steps``-step run's messages, as the floor writes them (its JSON): the size baseline."""
    total = len(json.dumps({"role": "user", "content": USER}))
    for i in range(steps - 1):
        call = {"id": f"c{i}", "name": "add", "arguments": json.dumps({"a": i, "b": 1})}
        total += len(json.dumps({"role": "assistant", "content": "", "tool_calls": [call]}))
        total += len(json.dumps({"role": "tool", "tool_call_id": f"c{i}", "content": add(i, 1)}))
    return total + len(json.dumps({"role": "assistant", "content": "done"}))


# --- agentsessions, and the hand-written loop over its classes ---------------------------------

_ADD = agent.tool(add)


def _script(steps: int, stamps: list[float]) -> list[Callable[[agent.ModelRequest], agent.Message]]:
    # Each reply is built when it is asked for, as the floor's and the peers' models build
    # theirs: making and checking a Message counts against us, as with any real endpoint.
    def reply(i: int) -> Callable[[agent.ModelRequest], agent.Message]:
        def answer(_: agent.ModelRequest) -> agent.Message:
            stamps.append(time.perf_counter())
            if i < steps - 1:
                call = agent.Content.tool_use(f"c{i}", "add", json.dumps({"a": i, "b": 1}))
                return agent.Message(agent.Role.ASSISTANT, [call])
            return agent.Message.assistant("done")

        return answer

    return [reply(i) for i in range(steps)]


def our_classes(steps: int) -> Run:
    """benchmarks/loop_overhead.py's hand-written loop: no library loop, but our Message and Content."""
    from benchmarks.loop_overhead import STEPS, hand_written

    if steps > STEPS:
        raise ValueError(f"loop_overhead.hand_written runs at most {STEPS} steps")
    stamps: list[float] = []
    hand_written(ScriptedEndpoint(_script(steps, stamps)), [agent.Message.user(USER)])
    return Run(stamps, time.perf_counter())


def agentsessions_run(steps: int, path: str = "", durable: bool = False) -> Run:
    """``Runner.run``; with ``path``, a session in a SQLite store (claims, leases, a save per step)."""
    stamps: list[float] = []
    store = sqlite.open(path, durable=durable) if path else None
    session = agent.open("bench", store) if store is not None else None
    spec = agent.Spec(tools=[_ADD], max_steps=steps, session=session)
    agent.Runner().run(spec, [agent.Message.user(USER)], ScriptedEndpoint(_script(steps, stamps)))
    ended = time.perf_counter()
    if store is not None:
        store.close()
    return Run(stamps, ended, path)


# --- LangGraph: create_react_agent, with SqliteSaver ------------------------------------------


def langgraph_run(steps: int, path: str = "") -> Run:
    """LangGraph's prebuilt ReAct agent; with ``path``, checkpointed by ``SqliteSaver`` (its default FULL sync)."""
    from langchain_core.tools import tool as lc_tool  # type: ignore[import-not-found, unused-ignore]
    from langgraph.checkpoint.sqlite import SqliteSaver  # type: ignore[import-not-found, unused-ignore]
    from langgraph.prebuilt import create_react_agent  # type: ignore[import-not-found, unused-ignore]

    stamps: list[float] = []
    model = _langgraph_model(steps, stamps)
    connection = sqlite3.connect(path, check_same_thread=False) if path else None
    with warnings.catch_warnings():  # create_react_agent is deprecated for langchain.agents, still shipped
        warnings.simplefilter("ignore")
        graph = create_react_agent(
            model, [lc_tool(add)], checkpointer=SqliteSaver(connection) if connection is not None else None
        )
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": 4 * steps + 10}
    graph.invoke({"messages": [("user", USER)]}, config)
    ended = time.perf_counter()
    if connection is not None:
        connection.close()
    return Run(stamps, ended, path)


def _langgraph_model(steps: int, stamps: list[float]) -> Any:
    from langchain_core.language_models.chat_models import BaseChatModel  # type: ignore[import-not-found, unused-ignore]
    from langchain_core.messages import AIMessage  # type: ignore[import-not-found, unused-ignore]
    from langchain_core.outputs import ChatGeneration, ChatResult  # type: ignore[import-not-found, unused-ignore]

    class Scripted(BaseChatModel):  # type: ignore[misc, unused-ignore]
        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            stamps.append(time.perf_counter())
            i = len(stamps) - 1
            if i < steps - 1:
                call = {"id": f"c{i}", "name": "add", "args": {"a": i, "b": 1}}
                message = AIMessage(content="", tool_calls=[call])
            else:
                message = AIMessage(content="done")
            return ChatResult(generations=[ChatGeneration(message=message)])

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        @property
        def _llm_type(self) -> str:
            return "scripted"

    return Scripted()


# --- The OpenAI Agents SDK: Runner.run_sync, with SQLiteSession -------------------------------


def openai_agents_run(steps: int, path: str = "") -> Run:
    """The Agents SDK's ``Runner.run_sync``; with ``path``, a ``SQLiteSession`` (its default FULL sync)."""
    from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled  # type: ignore[import-not-found, unused-ignore]

    set_tracing_disabled(True)  # tracing would export to OpenAI's servers: no network in a benchmark
    stamps: list[float] = []
    bench = Agent(name="bench", model=_agents_model(steps, stamps), tools=[function_tool(add)])
    session = SQLiteSession("bench", path) if path else None
    Runner.run_sync(bench, USER, max_turns=steps + 5, session=session)
    ended = time.perf_counter()
    if session is not None:
        session.close()
    return Run(stamps, ended, path)


def _agents_model(steps: int, stamps: list[float]) -> Any:
    from agents.items import ModelResponse  # type: ignore[import-not-found, unused-ignore]
    from agents.models.interface import Model  # type: ignore[import-not-found, unused-ignore]
    from agents.usage import Usage  # type: ignore[import-not-found, unused-ignore]
    from openai.types.responses import (  # type: ignore[import-not-found, unused-ignore]
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class Scripted(Model):  # type: ignore[misc, unused-ignore]
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            stamps.append(time.perf_counter())
            i = len(stamps) - 1
            output: list[Any]
            if i < steps - 1:
                arguments = json.dumps({"a": i, "b": 1})
                call = ResponseFunctionToolCall(type="function_call", call_id=f"c{i}", name="add", arguments=arguments)
                output = [call]
            else:
                text = ResponseOutputText(type="output_text", text="done", annotations=[])
                done = ResponseOutputMessage(
                    type="message", id="m", role="assistant", status="completed", content=[text]
                )
                output = [done]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark does not stream")

    return Scripted()


def sdk_read(path: str, loop: asyncio.AbstractEventLoop) -> tuple[int, float]:
    """How many items a fresh ``SQLiteSession`` reads with ``get_items``, and the seconds it took."""
    from agents import SQLiteSession  # type: ignore[import-not-found, unused-ignore]

    session = SQLiteSession("read", path)
    started = time.perf_counter()
    items = loop.run_until_complete(session.get_items())
    elapsed = time.perf_counter() - started
    session.close()
    return len(items), elapsed


def sdk_write(path: str, items: list[dict[str, Any]]) -> None:
    """Store ``items`` in a ``SQLiteSession`` at ``path``."""
    from agents import SQLiteSession  # type: ignore[import-not-found, unused-ignore]

    session = SQLiteSession("read", path)
    asyncio.run(session.add_items(items))  # type: ignore[arg-type, unused-ignore]
    session.close()


# --- Which systems are here --------------------------------------------------------------------

PEERS = {"LangGraph": ("langgraph", "langgraph.checkpoint.sqlite"), "OpenAI Agents": ("agents",)}


def missing(name: str) -> str:
    """Why the peer ``name`` cannot run here ("" when it can)."""
    import importlib.util

    for module in PEERS[name]:
        with contextlib.suppress(ModuleNotFoundError):
            if importlib.util.find_spec(module) is not None:
                continue
        return f"{module} is not installed (pip install agentsessions[bench])"
    return ""


def versions() -> dict[str, str]:
    """The versions of the packages measured."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("agentsessions", "langgraph", "langgraph-checkpoint-sqlite", "openai-agents", "msgspec"):
        with contextlib.suppress(PackageNotFoundError):
            found[package] = version(package)
    found.setdefault("agentsessions", agent.__version__)
    return found


def file_bytes(path: str) -> int:
    """The SQLite file's size after its WAL is checkpointed into it (every connection closed)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return os.path.getsize(path)
