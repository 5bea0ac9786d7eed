"""Idempotent steers: ``session.steer(text, key=...)`` and ``runner.send(..., key=...)``.

What every store must do with keys is storetest's ``KEYS`` property (run on all six stores
and on each wrapped by ``crypto.encrypted``). Here: the session and runner API over keys,
the stores that cannot keep them, keyed steers through the encrypting wrapper (a retry
across a key rotation, nothing of the text revealed), and a chat view's retries of one
``send`` in-process.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.session import keeps_steer_keys
from agentsessions.stores.memory import MemoryStore
from tests.support.servers import skip_without


class Echo:
    """A model that answers each request by quoting the user's last words."""

    def __init__(self) -> None:
        self.requests = 0

    def complete(self, request: agent.ModelRequest) -> agent.ModelResponse:
        self.requests += 1
        return agent.ModelResponse(agent.Message.assistant(f"you said: {request.messages[-1].text}"))


class SeedStore:
    """A store with only the seed's four methods."""

    def __init__(self) -> None:
        self.steers: list[str] = []

    def save(self, session_id: str, messages: Sequence[agent.Message]) -> None:
        pass

    def messages(self, session_id: str) -> list[agent.Message]:
        return []

    def add_steer(self, session_id: str, text: str) -> None:
        self.steers.append(text)

    def take_steers(self, session_id: str) -> list[str]:
        taken, self.steers = self.steers, []
        return taken


class KeylessRunStore(MemoryStore):
    """A run store written before steer keys: its add_steer takes no key."""

    def add_steer(self, session_id: str, text: str) -> agent.RunState:  # type: ignore[override]
        return super().add_steer(session_id, text)


def test_a_keyed_steer_retried_is_stored_once_and_another_text_is_a_conflict() -> None:
    store = MemoryStore()
    session = agent.open("chat", store)
    assert session.steer("hello", key="req-1") is agent.RunState.IDLE
    assert session.steer("hello", key="req-1") is agent.RunState.IDLE
    with pytest.raises(agent.ConflictError, match="already has a steer with key 'req-1' and another text"):
        session.steer("hello again", key="req-1")
    assert session.take_steers() == ["hello"]
    assert session.steer("hello", key="req-1") is agent.RunState.IDLE  # the key outlives its steer
    assert session.take_steers() == []
    assert session.steer("hello", key="req-2") is agent.RunState.IDLE and session.take_steers() == ["hello"]


@pytest.mark.parametrize(
    ("key", "error", "words"),
    [("", ValueError, "1 to 255 characters"), ("k" * 256, ValueError, "got 256"), (7, TypeError, "key must be a str")],
)
def test_a_bad_key_is_refused_before_anything_is_stored(key: object, error: type[Exception], words: str) -> None:
    store = MemoryStore()
    with pytest.raises(error, match=words):
        agent.open("chat", store).steer("hello", key=key)  # type: ignore[arg-type]
    assert store.info("chat").pending_steers == 0


def test_stores_that_cannot_keep_keys_refuse_a_keyed_steer_and_store_nothing() -> None:
    seed = SeedStore()
    with pytest.raises(TypeError, match=r"SeedStore cannot keep steer keys: it implements only agentsessions\.Store"):
        agent.open("chat", seed).steer("hello", key="req-1")
    keyless = KeylessRunStore()
    with pytest.raises(TypeError, match="KeylessRunStore cannot keep steer keys: its add_steer takes no key"):
        agent.open("chat", keyless).steer("hello", key="req-1")
    assert seed.steers == [] and keyless.info("chat").pending_steers == 0
    assert agent.open("chat", seed).steer("hello") is None and seed.steers == ["hello"]  # unkeyed: as ever
    spec = agent.Spec(session=agent.open("chat", seed))
    with pytest.raises(TypeError, match="cannot keep steer keys"):
        agent.Runner().send(spec, "hello", Echo(), key="req-1")


def test_a_retried_send_is_answered_once_whether_the_run_finished_or_still_runs() -> None:
    store = MemoryStore()
    spec = agent.Spec(session=agent.open("chat", store))
    runner, model = agent.Runner(), Echo()
    run = runner.send(spec, "first", model, key="req-1")
    assert run is not None and run.wait(5).text == "you said: first"
    # The view lost the answer and sends again: the text was taken and answered, no run starts.
    assert runner.send(spec, "first", model, key="req-1") is None
    assert model.requests == 1 and [m.text for m in store.messages("chat")] == ["first", "you said: first"]

    entered, release = threading.Event(), threading.Event()

    def slow(request: agent.ModelRequest) -> agent.Message:
        entered.set()
        assert release.wait(5)
        return agent.Message.assistant(f"you said: {request.messages[-1].text}")

    live = runner.send(spec, "second", ScriptedEndpoint([slow]), key="req-2")
    assert live is not None and entered.wait(5)
    assert runner.send(spec, "second", model, key="req-2") is live  # its own live run has it
    assert agent.Runner(replica="elsewhere").send(spec, "second", model, key="req-2") is None
    release.set()
    live.wait(5)
    said = [m.text for m in store.messages("chat")]
    assert said == ["first", "you said: first", "second", "you said: second"] and model.requests == 1
    with pytest.raises(agent.ConflictError):
        runner.send(spec, "something else", model, key="req-2")


def test_a_retried_send_whose_text_still_waits_starts_the_run_that_answers_it() -> None:
    store = MemoryStore()
    spec = agent.Spec(session=agent.open("chat", store))
    # The first attempt stored the steer and died before starting a run.
    assert agent.open("chat", store).steer("first", key="req-1") is agent.RunState.IDLE
    run = agent.Runner().send(spec, "first", Echo(), key="req-1")
    assert run is not None and run.wait(5).text == "you said: first"
    assert [m.text for m in store.messages("chat")] == ["first", "you said: first"]


# --- Through the encrypting wrapper ---------------------------------------------------------


def test_keyed_steers_through_encryption_survive_a_rotation_and_reveal_nothing() -> None:
    skip_without("cryptography", extra="crypto")
    from agentsessions.crypto import Keyring, encrypted

    inner = MemoryStore()
    old = Keyring({"k1": Keyring.new_key()}, "k1")
    store = encrypted(inner, old)
    assert store.add_steer("chat", "meet at noon", key="req-1") is agent.RunState.IDLE
    assert store.add_steer("chat", "meet at noon", key="req-1") is agent.RunState.IDLE
    [kept] = inner.peek_steers("chat")
    assert "noon" not in kept.text and kept.text.startswith("agentsessions.crypto/1:k1:")
    with pytest.raises(agent.ConflictError):
        store.add_steer("chat", "meet at one", key="req-1")
    # The same text under another key, or in another session, is another ciphertext.
    store.add_steer("chat", "meet at noon", key="req-2")
    store.add_steer("other", "meet at noon", key="req-1")
    texts = [s.text for s in inner.peek_steers("chat")] + [s.text for s in inner.peek_steers("other")]
    assert len(set(texts)) == 3
    # A retry after the current key changed is still a retry; a new key's steer uses the new key.
    rotated = encrypted(inner, old.rotated("k2"))
    assert rotated.add_steer("chat", "meet at noon", key="req-1") is agent.RunState.IDLE
    with pytest.raises(agent.ConflictError):
        rotated.add_steer("chat", "meet at one", key="req-1")
    rotated.add_steer("chat", "later", key="req-3")
    assert inner.peek_steers("chat")[-1].text.startswith("agentsessions.crypto/1:k2:")
    assert rotated.take_steers("chat") == ["meet at noon", "meet at noon", "later"]


def test_the_wrapper_over_a_store_without_keys_has_no_keyed_steers() -> None:
    skip_without("cryptography", extra="crypto")
    from agentsessions.crypto import Keyring, encrypted

    keyring = Keyring({"k1": Keyring.new_key()}, "k1")
    assert keeps_steer_keys(encrypted(MemoryStore(), keyring))
    for store in (SeedStore(), KeylessRunStore()):
        wrapped = encrypted(store, keyring)
        assert not keeps_steer_keys(wrapped)
        with pytest.raises(TypeError, match="cannot keep steer keys"):
            agent.open("chat", wrapped).steer("hello", key="req-1")


def test_a_keyed_steer_rekeyed_while_it_waits_is_still_recognised_when_retried() -> None:
    skip_without("cryptography", extra="crypto")
    from agentsessions.crypto import Keyring, encrypted, rekey

    inner = MemoryStore()
    old = Keyring({"k1": Keyring.new_key()}, "k1")
    encrypted(inner, old).add_steer("chat", "meet at noon", key="req-1")
    new = old.rotated("k2")
    rekey(inner, new)  # the waiting steer is now sealed under k2; its key's digest is k1's ciphertext's
    assert [s.text.split(":")[1] for s in inner.peek_steers("chat")] == ["k2"]
    store = encrypted(inner, new)
    assert store.add_steer("chat", "meet at noon", key="req-1") is agent.RunState.FINISHED  # rekey's claim released it
    with pytest.raises(agent.ConflictError):
        store.add_steer("chat", "meet at one", key="req-1")
    assert store.take_steers("chat") == ["meet at noon"]
