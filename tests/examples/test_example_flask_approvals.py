"""examples/flask/app.py's approval endpoint, in this process through Flask's test client, over a memory store.

The two-replica test (test_example_web.py) runs the service as processes; this one checks
the approval route's answers: a conversation that waits, a decision that lets the run go on,
the same decision again, the other one refused.
"""

from __future__ import annotations

import json
import time
from types import ModuleType
from typing import Any

from agentsessions.stores.memory import MemoryStore
from tests.support.paths import ROOT, load_example

APP = ROOT / "examples" / "flask" / "app.py"


def flask_example() -> ModuleType:
    """examples/flask/app.py (it puts the shared service on sys.path itself)."""
    return load_example(APP, "flask_example")


def wait_for(client: Any, state: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        answer: dict[str, Any] = client.get("/conversations/c1").get_json()
        if answer["state"] == state:
            return answer
        assert time.monotonic() < deadline, answer
        time.sleep(0.01)


def test_a_conversation_waits_for_approval_and_goes_on_after_the_decision() -> None:
    example = flask_example()
    service = __import__("conversations")  # the shared service the example put on sys.path
    app = example.create_app(MemoryStore(), service.EchoModel, "web-1")
    client = app.test_client()
    assert client.post("/conversations/c1/messages", json={"text": "please close my account"}).status_code == 202
    waiting = wait_for(client, "waiting")
    assert waiting["pending_approvals"] == 1
    call = waiting["messages"][-1]["content"][0]
    assert (call["type"], call["name"]) == ("tool_use", "close_account")

    bad = client.post(f"/conversations/c1/approvals/{call['id']}", json={"decision": "maybe"})
    assert bad.status_code == 400
    done = client.post(f"/conversations/c1/approvals/{call['id']}", json={"decision": "approve", "by": "ops"})
    assert done.status_code == 200 and done.get_json()["started"] is True
    finished = wait_for(client, "finished")
    results = [b for m in finished["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert [(r["tool_use_id"], r["text"]) for r in results] == [
        (call["id"], "account closed (please close my account)")
    ]

    again = client.post(f"/conversations/c1/approvals/{call['id']}", json={"decision": "approve"})
    assert again.status_code == 200 and again.get_json()["started"] is False  # a retry: recorded once
    other = client.post(f"/conversations/c1/approvals/{call['id']}", json={"decision": "reject"})
    assert other.status_code == 409
    assert app.extensions["conversations"].runner.shutdown(timeout=10)


def test_an_approval_with_an_edited_input_runs_the_call_with_it() -> None:
    example = flask_example()
    service = __import__("conversations")
    app = example.create_app(MemoryStore(), service.EchoModel, "web-1")
    client = app.test_client()
    assert client.post("/conversations/c1/messages", json={"text": "please close my account"}).status_code == 202
    call = wait_for(client, "waiting")["messages"][-1]["content"][0]
    url = f"/conversations/c1/approvals/{call['id']}"
    misfit = client.post(url, json={"decision": "approve", "input": {"reason": 7}})
    assert misfit.status_code == 400 and "reason: expected string" in misfit.get_json()["error"]
    assert client.post(url, json={"decision": "reject", "input": {"reason": "x"}}).status_code == 400
    edited = {"decision": "approve", "by": "ops", "input": {"reason": "moving abroad"}}
    assert client.post(url, json=edited).status_code == 200
    finished = wait_for(client, "finished")
    uses = [b for m in finished["messages"] for b in m["content"] if b["type"] == "tool_use" and b["id"] == call["id"]]
    assert [json.loads(u["input"]) for u in uses] == [{"reason": "moving abroad"}]  # the transcript shows what ran
    results = [b["text"] for m in finished["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert results == ["account closed (moving abroad)"]
    assert client.post(url, json=edited).status_code == 200  # a retry
    other = client.post(url, json={"decision": "approve", "input": {"reason": "another"}})
    assert other.status_code == 409
    assert app.extensions["conversations"].runner.shutdown(timeout=10)
