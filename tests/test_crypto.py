"""Encryption at rest, on the memory and SQLite stores: keys, binding, failing closed, incremental saves.

The same properties on every persistent store, the raw scans of each database and the
whole conformance suite over each store wrapped are in test_crypto_stores.py; ``rekey``
is in test_crypto_rekey.py.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("cryptography", extra="crypto")  # before the imports that need it

import base64
import contextlib
import json
import pickle
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import agentsessions as agent
from agentsessions.codec import load_message
from agentsessions.crypto import DecryptionError, EncryptedStore, Keyring, encrypted
from agentsessions.crypto._sealing import Sealer
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores import sqlite
from agentsessions.stores.memory import MemoryStore
from agentsessions.testing import storetest
from tests.support.seed_store import SeedOnly

OLD, NEW = Keyring.new_key(), Keyring.new_key()
KEYRING = Keyring({"k1": OLD}, current="k1")


def conversation(tag: str = "") -> list[agent.Message]:
    """A transcript with text, a tool call and its result, and thinking."""
    return [
        agent.Message.user(f"my card is 4111 1111 {tag}"),
        agent.Message(
            agent.Role.ASSISTANT,
            [agent.Content.thinking("the user shared a card", "sig"), agent.Content.tool_use("c1", "pay", '{"x": 1}')],
        ),
        agent.Message(agent.Role.USER, [agent.Content.tool_result("c1", f"paid {tag}")]),
        agent.Message.assistant(f"done {tag}"),
    ]


# --- The keyring ----------------------------------------------------------------------------


def test_a_keyring_checks_its_keys_and_never_shows_them() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        Keyring({"k": b"short"}, "k")
    with pytest.raises(TypeError, match="must be bytes"):
        Keyring({"k": "x" * 32}, "k")  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="key id"):
        Keyring({"a:b": OLD}, "a:b")
    with pytest.raises(ValueError, match="not among the keys"):
        Keyring({"k1": OLD}, "k2")
    keyring = Keyring({"k1": OLD, "k2": NEW}, "k2")
    assert (keyring.current, keyring.ids, "k1" in keyring, "k3" in keyring) == ("k2", ("k1", "k2"), True, False)
    shown = repr(keyring) + str(keyring)
    assert "k1" in shown and all(base64.b64encode(key).decode() not in shown for key in (OLD, NEW))
    assert OLD.hex() not in shown


def test_a_keyring_round_trips_through_json_a_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyring = KEYRING.rotated("k2", NEW)
    assert (keyring.current, keyring.ids) == ("k2", ("k1", "k2"))
    text = keyring.to_json()
    assert json.loads(text) == {
        "current": "k2",
        "keys": {"k1": base64.b64encode(OLD).decode(), "k2": base64.b64encode(NEW).decode()},
    }
    path = tmp_path / "keys.json"
    path.write_text(text)
    monkeypatch.setenv("AGENTSESSIONS_KEYS", text)
    for again in (Keyring.from_json(text), Keyring.from_file(path), Keyring.from_env()):
        assert again.to_json() == text
    assert keyring.without("k1").ids == ("k2",)
    with pytest.raises(ValueError, match="current key"):
        keyring.without("k2")
    with pytest.raises(ValueError, match="already holds"):
        keyring.rotated("k1")
    staged = KEYRING.with_key("k2", NEW)  # a rotation's first step: readable everywhere, not yet written
    assert (staged.current, staged.ids, staged.using("k2").to_json()) == ("k1", ("k1", "k2"), text)
    monkeypatch.delenv("AGENTSESSIONS_KEYS")
    with pytest.raises(ValueError, match="AGENTSESSIONS_KEYS"):
        Keyring.from_env()
    for bad in ("not json", "[]", '{"keys": {}}', '{"current": "k", "keys": {"k": "***"}}'):
        with pytest.raises(ValueError):
            Keyring.from_json(bad)


def test_a_key_file_of_wrapped_keys_is_unwrapped_by_a_kms_callable(tmp_path: Path) -> None:
    # The "KMS": a master key that never leaves it; the file holds only data keys it wrapped.
    master = AESGCM(AESGCM.generate_key(bit_length=256))
    calls: list[str] = []

    def wrap(key_id: str, key: bytes) -> str:
        nonce = Keyring.new_key()[:12]
        return base64.b64encode(nonce + master.encrypt(nonce, key, key_id.encode())).decode()

    def unwrap(key_id: str, stored: bytes) -> bytes:
        calls.append(key_id)
        return master.decrypt(stored[:12], stored[12:], key_id.encode())

    path = tmp_path / "wrapped.json"
    path.write_text(json.dumps({"current": "k1", "keys": {"k1": wrap("k1", OLD)}}))
    keyring = Keyring.from_file(path, unwrap=unwrap)
    assert calls == ["k1"] and keyring.to_json() == KEYRING.to_json()
    assert OLD not in path.read_bytes() and base64.b64encode(OLD) not in path.read_bytes()


# --- The wrapper has the store's methods, no more -----------------------------------------------


class NoFork(MemoryStore):
    """A RunStore that cannot fork (``fork`` is hidden the only way a class can hide it)."""

    fork = None  # type: ignore[assignment]


def test_the_wrapper_has_exactly_the_capabilities_of_the_store() -> None:
    full = encrypted(MemoryStore(), KEYRING)
    assert isinstance(full, agent.RunStore) and isinstance(full, agent.ForkStore)
    seed = encrypted(SeedOnly(MemoryStore()), KEYRING)
    assert isinstance(seed, agent.Store) and not isinstance(seed, agent.RunStore) and not hasattr(seed, "claim")
    runs = encrypted(NoFork(), KEYRING)
    assert isinstance(runs, agent.RunStore) and not isinstance(runs, agent.ForkStore)
    with pytest.raises(TypeError, match="encrypted already"):
        encrypted(full, KEYRING)
    with pytest.raises(TypeError, match="not a store"):
        encrypted(object(), KEYRING)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="Keyring"):
        encrypted(MemoryStore(), {"k1": OLD})  # type: ignore[call-overload]


def test_a_seed_store_wrapped_runs_an_agent_and_keeps_only_ciphertext() -> None:
    seed = SeedOnly(MemoryStore())
    store = encrypted(seed, KEYRING)
    store.add_steer("s", "a steer about my diagnosis")
    spec = agent.Spec(session=agent.open("s", store))
    result = agent.Runner().run(
        spec, [agent.Message.user("my diagnosis")], ScriptedEndpoint([agent.Message.assistant("noted")])
    )
    assert store.messages("s") == result.messages and "a steer about my diagnosis" in result.messages[0].text
    assert "diagnosis" not in agent.dumps(seed.messages("s"))


def test_a_seed_store_wrapped_keeps_the_contract_of_its_four_methods() -> None:
    shared = MemoryStore()
    report = storetest.run(lambda: encrypted(SeedOnly(shared), KEYRING), max_examples=10)
    skipped = {*storetest.RUN_PROPERTIES, storetest.KEYS, storetest.BUSY, storetest.FORK}
    skipped.update(
        (*storetest.APPROVAL_PROPERTIES, storetest.METADATA, storetest.SUMMARY, storetest.PRUNE, storetest.SCHEMA)
    )
    assert report.replicas and set(report.skipped) == skipped, report


# --- What is stored, and what does not decrypt ------------------------------------------------


def test_the_store_keeps_ciphertext_and_the_wrapper_gives_back_the_messages() -> None:
    inner = MemoryStore()
    store = encrypted(inner, KEYRING)
    store.save("s", conversation("secret"))
    assert store.add_steer("s", "steer secret") is agent.RunState.IDLE
    raw = agent.dumps(inner.messages("s")) + json.dumps([s.text for s in inner.peek_steers("s")])
    for text in ("4111", "card", "pay", '{\\"x\\"', "secret", "sig"):
        assert text not in raw
    assert [Sealer.message_key(row) for row in inner.messages("s")] == ["k1"] * 4
    assert [m.role for m in inner.messages("s")] == [m.role for m in conversation()]
    assert store.messages("s") == conversation("secret")
    assert [s.text for s in store.peek_steers("s")] == ["steer secret"]
    assert store.take_steers("s") == ["steer secret"] and store.take_steers("s") == []
    # A reader without the keyring sees one raw block per message, of a provider no endpoint speaks.
    assert all(m.text == "" and m.content[0].name == "agentsessions.crypto" for m in inner.messages("s"))


def check_fails_closed(store: agent.Store, call: Any, session_id: str, key_id: str, says: str) -> None:
    with pytest.raises(DecryptionError, match=says) as caught:
        call()
    assert caught.value.session_id == session_id and caught.value.key_id == key_id
    assert isinstance(caught.value, agent.FormatError) and repr(session_id)[:40] in str(caught.value)


def test_a_ciphertext_copied_to_another_session_or_position_does_not_decrypt() -> None:
    inner = MemoryStore()
    store = encrypted(inner, KEYRING)
    store.save("a", conversation())
    store.add_steer("a", "a steer")
    rows = inner.messages("a")
    inner.save("b", rows)  # the whole transcript copied into another session
    check_fails_closed(store, lambda: store.messages("b"), "b", "k1", "another session or place")
    store.save("c", conversation())
    inner.save("c", [inner.messages("c")[0]] * 2)  # message 0 copied to position 1 of its session
    check_fails_closed(store, lambda: store.messages("c"), "c", "k1", "message 1 does not decrypt")
    inner.save("d", [rows[2], rows[1]])  # two user-or-not rows swapped
    check_fails_closed(store, lambda: store.messages("d"), "d", "k1", "message 0")
    flipped = agent.Message(agent.Role.ASSISTANT, rows[0].content)  # the role altered
    inner.save("e", [flipped])
    check_fails_closed(store, lambda: store.messages("e"), "e", "k1", "message 0")
    [steer] = inner.peek_steers("a")
    inner.add_steer("b2", steer.text)  # a steer copied into another session
    check_fails_closed(store, lambda: store.take_steers("b2"), "b2", "k1", "a steer does not decrypt")
    assert store.messages("a") == conversation()  # the original still reads


def test_an_altered_ciphertext_does_not_decrypt() -> None:
    inner = MemoryStore()
    store = encrypted(inner, KEYRING)
    store.save("s", [agent.Message.user("pay 10 EUR")])
    [row] = inner.messages("s")
    envelope = json.loads(row.content[0].data)
    sealed = bytearray(base64.b64decode(envelope["sealed"]))
    sealed[20] ^= 1
    envelope["sealed"] = base64.b64encode(sealed).decode()
    inner.save("s", [agent.Message(row.role, [agent.Content.raw("agentsessions.crypto", json.dumps(envelope))])])
    check_fails_closed(store, lambda: store.messages("s"), "s", "k1", "altered")


def test_a_wrong_or_missing_key_raises_and_never_reads_as_empty() -> None:
    inner = MemoryStore()
    encrypted(inner, KEYRING).save("s", conversation())
    encrypted(inner, KEYRING).add_steer("s", "steer")
    wrong = encrypted(inner, Keyring({"k1": NEW}, "k1"))  # same id, other bytes
    check_fails_closed(wrong, lambda: wrong.messages("s"), "s", "k1", "does not decrypt with key 'k1'")
    check_fails_closed(wrong, lambda: wrong.peek_steers("s"), "s", "k1", "does not decrypt")
    missing = encrypted(inner, Keyring({"k2": NEW}, "k2"))
    check_fails_closed(missing, lambda: missing.messages("s"), "s", "k1", "keyring does not hold")
    check_fails_closed(missing, lambda: missing.peek_steers("s"), "s", "k1", "keyring does not hold")
    # A run resumed without its key fails on the caller's thread; it never starts from nothing.
    spec = agent.Spec(session=agent.open("s", missing))
    endpoint = ScriptedEndpoint([agent.Message.assistant("never asked")])
    with pytest.raises(DecryptionError, match="keyring does not hold"):
        agent.Runner().run(spec, agent.Resume("go on"), endpoint)
    assert endpoint.requests == [] and encrypted(inner, KEYRING).messages("s") == conversation()


def test_plaintext_rows_are_refused_unless_allowed_and_new_ones_are_encrypted() -> None:
    inner = MemoryStore()
    inner.save("old", conversation("plain"))
    inner.add_steer("old", "a plaintext steer")
    store = encrypted(inner, KEYRING)
    check_fails_closed(store, lambda: store.messages("old"), "old", "", "plaintext")
    check_fails_closed(store, lambda: store.peek_steers("old"), "old", "", "plaintext")
    moving = encrypted(inner, KEYRING, allow_plaintext=True)
    assert moving.messages("old") == conversation("plain")
    moving.save("old", [*conversation("plain"), agent.Message.user("new words")])
    rows = inner.messages("old")
    assert rows[:4] == conversation("plain") and "new words" not in agent.dumps(rows[4:])
    assert moving.messages("old")[-1].text == "new words"
    assert moving.take_steers("old") == ["a plaintext steer"]


def test_rotation_reads_old_keys_and_writes_with_the_current_one() -> None:
    inner = MemoryStore()
    encrypted(inner, KEYRING).save("s", conversation())
    rotated = encrypted(inner, KEYRING.rotated("k2", NEW))
    transcript = rotated.messages("s")
    assert transcript == conversation()
    rotated.save("s", [*transcript, agent.Message.user("after the rotation")])
    keys = [Sealer.message_key(row) for row in inner.messages("s")]
    assert keys == ["k1", "k1", "k1", "k1", "k2"]  # what was saved stays as it was; new rows use k2
    assert encrypted(inner, KEYRING.rotated("k2", NEW)).messages("s")[-1].text == "after the rotation"


def test_decryption_errors_keep_their_names_through_pickle() -> None:
    error = DecryptionError("session 's' message 1 ...", session_id="s", key_id="k1")
    again = pickle.loads(pickle.dumps(error))
    assert (str(again), again.session_id, again.key_id) == (str(error), "s", "k1")


# --- Saves stay incremental ---------------------------------------------------------------------


def test_a_save_through_the_wrapper_writes_only_the_new_messages(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    inner = sqlite.open(path)
    store = encrypted(inner, KEYRING)
    messages = [agent.Message.user(f"m{i}") for i in range(50)]
    store.save("s", messages)
    changes = inner._connection().total_changes
    store.save("s", [*messages, agent.Message.assistant("one more")])
    assert inner._connection().total_changes - changes == 2  # one message row, one session row
    # A wrapper that reads the session first (a resumed run) saves incrementally too.
    other = encrypted(sqlite.open(path), KEYRING.rotated("k2", NEW))
    grown = [*other.messages("s"), agent.Message.user("and another")]
    changes = other.inner._connection().total_changes  # type: ignore[attr-defined]
    other.save("s", grown)
    assert other.inner._connection().total_changes - changes == 2  # type: ignore[attr-defined]
    assert encrypted(sqlite.open(path), KEYRING.rotated("k2", NEW)).messages("s") == grown
    with contextlib.closing(sqlite3.connect(path)) as watcher:
        bodies = [body for (body,) in watcher.execute("SELECT body FROM agentsessions_messages ORDER BY position")]
    assert [Sealer.message_key(load_message(body)) for body in bodies] == ["k1"] * 51 + ["k2"]


class Recording(MemoryStore):
    """A memory store that keeps every transcript handed to it."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: list[list[agent.Message]] = []

    def save_run(self, claim: Any, messages: Sequence[agent.Message], **kwargs: Any) -> Any:
        self.saved.append(list(messages))
        return super().save_run(claim, messages, **kwargs)


def test_a_run_hands_the_store_the_same_ciphertext_for_messages_already_saved() -> None:
    inner = Recording()
    store = encrypted(inner, KEYRING)

    @agent.tool
    def lookup(n: int) -> str:
        """Look n up."""
        return f"found {n}"

    calls = [
        agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use(f"c{i}", "lookup", f'{{"n":{i}}}')])
        for i in range(5)
    ]
    spec = agent.Spec(session=agent.open("s", store), tools=[lookup], max_steps=10)
    agent.Runner().run(spec, [agent.Message.user("look")], ScriptedEndpoint([*calls, agent.Message.assistant("ok")]))
    assert len(inner.saved) >= 6
    for before, after in zip(inner.saved, inner.saved[1:], strict=False):
        shared = min(len(before), len(after)) - 1  # the last message of a save may grow (tool results)
        assert all(a is b for a, b in zip(before[:shared], after[:shared], strict=True))


# --- Forks, steers left twice by rekey ------------------------------------------------------


def test_a_fork_is_re_encrypted_for_its_own_id() -> None:
    inner = MemoryStore()
    store = encrypted(inner, KEYRING)
    store.save("a", conversation())
    store.fork("a", "b", at=2)
    assert store.messages("b") == conversation()[:2] and store.messages("a") == conversation()
    assert inner.messages("b")[0] != inner.messages("a")[0]
    assert store.info("b").state is agent.RunState.IDLE
    with pytest.raises(agent.ConflictError):
        store.fork("a", "b")
    with pytest.raises(ValueError):
        store.fork("a", "c", at=5)
    assert store.messages("c") == [] and not inner.info("c").updated_at


def test_a_steer_left_twice_by_an_interrupted_rekey_reaches_the_run_once() -> None:
    inner = MemoryStore()
    old = Sealer(KEYRING)
    new = Sealer(KEYRING.rotated("k2", NEW))
    first = old.seal_steer("s", "only once")
    steer_id, _ = old.open_steer("s", first)
    inner.add_steer("s", first)
    inner.add_steer("s", new.seal_steer("s", "only once", steer_id))  # the copy; the original not yet deleted
    inner.add_steer("s", new.seal_steer("s", "only once"))  # the same words sent again: a steer of its own
    store = encrypted(inner, KEYRING.rotated("k2", NEW))
    claim = store.claim("s", replica="r", lease=30)
    peeked = store.peek_steers("s")
    assert [s.text for s in peeked] == ["only once", "only once"] and peeked[0].seq == 1
    store.save_run(claim, [agent.Message.user("only once\nonly once")], taken=[s.seq for s in peeked])
    assert inner.peek_steers("s") == []  # the copy went with the steer it copies
    inner.add_steer("t", old.seal_steer("t", "taken once", b"x" * 16))
    inner.add_steer("t", new.seal_steer("t", "taken once", b"x" * 16))
    assert store.take_steers("t") == ["taken once"] and inner.peek_steers("t") == []


def test_an_encrypted_store_is_reported_as_such() -> None:
    store = encrypted(MemoryStore(), KEYRING)
    assert isinstance(store, EncryptedStore) and "k1" in repr(store) and OLD.hex() not in repr(store)
    assert store.keyring is KEYRING and store.allow_plaintext is False


def test_metadata_stays_clear_under_encryption(tmp_path: Path) -> None:
    store = encrypted(sqlite.open(tmp_path / "s.db"), KEYRING)
    assert isinstance(store, agent.MetadataStore)
    session = agent.open("s", store)
    session.save([agent.Message.user("a secret question")])
    session.set_metadata({"user": "42"})
    assert [info.id for info in store.sessions(metadata={"user": "42"})] == ["s"]
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        assert db.execute("SELECT mkey, mvalue FROM agentsessions_metadata").fetchall() == [("user", "42")]
        bodies = " ".join(body for (body,) in db.execute("SELECT body FROM agentsessions_messages"))
    assert "a secret question" not in bodies
