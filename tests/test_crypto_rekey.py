"""``agentsessions rekey``: every session moved to the current key, under claims, resumable, beside live runs.

On every persistent store, through the command as a user runs it. The kill test runs the
command in a real process and kills it with SIGKILL after a random number of its progress
lines plus a random few milliseconds (seeded; the seed and trial are in every failure),
then runs it again: every session ends on the new key, readable without the old one, with
its transcript and steers exactly as before. ``AGENTSESSIONS_CRASH_TRIALS`` sets the count.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("cryptography", extra="crypto")  # before the imports that need it

import base64
import contextlib
import json
import os
import random
import secrets
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentsessions as agent
from agentsessions.cli import Exit
from agentsessions.crypto import Keyring, RekeyProgress, encrypted, rekey
from agentsessions.crypto._rekey import REPLICA
from agentsessions.crypto._sealing import Sealer
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runs import ENDINGS
from agentsessions.stores.memory import MemoryStore
from tests.support.backends import Opener, store_url
from tests.support.command import cli
from tests.support.waiting import wait_for

OLD = Keyring({"k1": Keyring.new_key()}, "k1")
NEW = OLD.rotated("k2")
RETIRED = NEW.without("k1")  # what is left once rekey is done: the old key is gone
TRIALS = int(os.environ.get("AGENTSESSIONS_CRASH_TRIALS", "3"))


def keys_file(tmp_path: Path, keyring: Keyring = NEW) -> str:
    path = tmp_path / f"keys-{secrets.token_hex(4)}.json"
    path.write_text(keyring.to_json())
    return str(path)


def fill(store: Any, count: int, tag: str) -> dict[str, tuple[list[agent.Message], list[str]]]:
    """``count`` sessions under the old key: runs, plain saves and waiting steers. Their transcripts and steers."""
    old = encrypted(store, OLD)
    made = {}
    for n in range(count):
        session_id = f"{tag}-{n}"
        if n % 3 == 0:  # a finished run
            endpoint = ScriptedEndpoint([agent.Message.assistant(f"answer {n}")])
            spec = agent.Spec(session=agent.open(session_id, old))
            agent.Runner(replica="app").run(spec, [agent.Message.user(f"question {n}")], endpoint)
        else:  # saved outside a run: idle
            old.save(session_id, [agent.Message.user(f"note {n} {i}") for i in range(n % 5 + 1)])
        steers = [f"steer {n} {i}" for i in range(2 if n % 4 == 1 else 0)]
        for text in steers:
            old.add_steer(session_id, text)
        made[session_id] = (old.messages(session_id), steers)
    return made


def check_rekeyed(store: Any, made: dict[str, tuple[list[agent.Message], list[str]]]) -> None:
    """Every session on the new key only, readable without the old one, as it was; released."""
    reader = encrypted(store, RETIRED)
    for session_id, (transcript, steers) in made.items():
        where = f"session {session_id}"
        assert {Sealer.message_key(row) for row in store.messages(session_id)} <= {"k2"}, where
        assert {Sealer.steer_key(s.text) for s in store.peek_steers(session_id)} <= {"k2"}, where
        assert reader.messages(session_id) == transcript, where
        assert [s.text for s in reader.peek_steers(session_id)] == steers, where
        assert store.info(session_id).state in ENDINGS, where


# --- The command on every store -----------------------------------------------------------------


def test_rekey_moves_every_session_to_the_current_key_in_batches(opener: Opener, tmp_path: Path) -> None:
    with opener() as store:
        made = fill(store, 14, "rekey")
        url, keys = store_url(opener), keys_file(tmp_path)
        done = cli("--store", url, "--keys", keys, "rekey", "--batch", "4")
        assert done.code == Exit.OK, done
        progress = [line for line in done.err.splitlines() if line.startswith("agentsessions: rekey: ")]
        assert len(progress) == 4 and progress[-1].startswith("agentsessions: rekey: 14 sessions seen"), done.err
        assert "rekey to key 'k2': 14 sessions seen: 14 re-encrypted, 0 already current, 0 busy" in done.out
        check_rekeyed(store, made)
        again = cli("--store", url, "--keys", keys, "rekey")
        assert again.code == Exit.OK and "0 re-encrypted, 14 already current" in again.out, again
        # Every other command reads the encrypted store through the same keys file.
        shown = cli("--store", url, "--keys", keys, "show", "rekey-0")
        assert shown.code == Exit.OK and "question 0" in shown.out and "answer 0" in shown.out
        assert "question 0" not in cli("--store", url, "show", "rekey-0").out


def test_a_live_run_keeps_running_while_rekey_passes_over_other_sessions(opener: Opener, tmp_path: Path) -> None:
    with opener() as store:
        made = fill(store, 6, "beside")
        encrypted(store, OLD).save("live", [agent.Message.user("before the rotation")])
        entered, release = threading.Event(), threading.Event()

        def slow(_: agent.ModelRequest) -> agent.Message:
            entered.set()
            assert release.wait(60), "the test never let the model answer"
            return agent.Message.assistant("answered while rekey ran")

        app = encrypted(store, NEW)  # the application runs with the new keyring from the first step
        spec = agent.Spec(session=agent.open("live", app), lease=1.0)
        run = agent.Runner(replica="app").start(spec, agent.Resume("a question"), ScriptedEndpoint([slow]))
        try:
            assert entered.wait(30)
            url, keys = store_url(opener), keys_file(tmp_path)
            passed = cli("--store", url, "--keys", keys, "rekey", "--batch", "2")
            assert passed.code == Exit.CONFLICT, passed
            assert (
                "busy: a run holds 'live'" in passed.err and "6 re-encrypted" in passed.out and "1 busy" in passed.out
            )
            check_rekeyed(store, made)
            info = store.info("live")
            assert (info.state, info.holder) == (agent.RunState.RUNNING, "app")  # the run's claim, renewed
        finally:
            release.set()
        result = run.wait(30)
        assert result.text == "answered while rekey ran"
        assert cli("--store", url, "--keys", keys, "rekey").code == Exit.OK
        assert encrypted(store, RETIRED).messages("live") == result.messages


def test_rekey_encrypts_a_plaintext_store_only_when_asked(tmp_path: Path) -> None:
    from agentsessions.stores import sqlite

    path = tmp_path / "plain.db"
    store = sqlite.open(path)
    for n in range(3):
        store.save(f"plain-{n}", [agent.Message.user(f"written before encryption {n}")])
    store.add_steer("plain-1", "a plaintext steer")
    url, keys = f"sqlite://{path}", keys_file(tmp_path)
    refused = cli("--store", url, "--keys", keys, "rekey")
    assert refused.code == Exit.USAGE and "3 failed" in refused.out and "plaintext" in refused.err, refused
    done = cli("--store", url, "--keys", keys, "rekey", "--allow-plaintext")
    assert done.code == Exit.OK and "3 re-encrypted" in done.out, done
    reader = encrypted(store, RETIRED)  # plaintext refused from now on: none is left
    assert [reader.messages(f"plain-{n}")[0].text for n in range(3)] == [
        f"written before encryption {n}" for n in range(3)
    ]
    assert reader.take_steers("plain-1") == ["a plaintext steer"]
    # Rewritten rows leave their old bytes in free pages until SQLite reuses or drops them.
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert b"written before encryption" not in b"".join(p.read_bytes() for p in tmp_path.glob("plain.db*"))


def test_a_keys_file_of_wrapped_keys_is_read_with_unwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentsessions.stores import sqlite

    key = Keyring.new_key()
    (tmp_path / "toy_kms.py").write_text(  # a "KMS" whose wrapping is a byte-wise NOT, for the test
        "def unwrap(key_id, stored):\n    assert key_id == 'k1'\n    return bytes(255 - b for b in stored)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    wrapped = base64.b64encode(bytes(255 - b for b in key)).decode()
    (tmp_path / "wrapped.json").write_text(json.dumps({"current": "k1", "keys": {"k1": wrapped}}))
    store = sqlite.open(tmp_path / "s.db")
    encrypted(store, Keyring({"k1": key}, "k1")).save("s", [agent.Message.user("wrapped away")])
    url, keys = f"sqlite://{tmp_path / 's.db'}", str(tmp_path / "wrapped.json")
    shown = cli("--store", url, "--keys", keys, "show", "s", "--unwrap", "toy_kms:unwrap")
    assert shown.code == Exit.OK and "wrapped away" in shown.out, shown
    unwrapped_wrong = cli("--store", url, "--keys", keys, "show", "s")  # the wrapped bytes taken as the key
    assert unwrapped_wrong.code == Exit.USAGE and "does not decrypt with key 'k1'" in unwrapped_wrong.err
    missing = cli("--store", url, "--keys", keys, "show", "s", "--unwrap", "no_such_module:f")
    assert missing.code == Exit.USAGE and "--unwrap 'no_such_module:f'" in missing.err


def test_the_command_explains_what_it_needs(tmp_path: Path) -> None:
    from agentsessions.stores import sqlite

    sqlite.open(tmp_path / "x.db").close()
    url = f"sqlite://{tmp_path / 'x.db'}"
    missing = cli("--store", url, "rekey")
    assert missing.code == Exit.USAGE and "rekey needs the keyring" in missing.err
    (tmp_path / "bad.json").write_text('{"current": "k1", "keys": {"k1": "c2hvcnQ="}}')
    bad = cli("--store", url, "--keys", str(tmp_path / "bad.json"), "list")
    assert bad.code == Exit.USAGE and "32 bytes" in bad.err and "c2hvcnQ" not in bad.err
    absent = cli("--store", url, "--keys", str(tmp_path / "none.json"), "list")
    assert absent.code == Exit.USAGE and "cannot read the keys file" in absent.err


# --- Steers, and sessions rekey must not touch ----------------------------------------------------


class SteeredWhileHeld(MemoryStore):
    """A memory store in which a user steers each session the instant rekey claims it."""

    told: Any = None

    def claim(self, session_id: str, *, replica: str, lease: float) -> Any:
        claim = super().claim(session_id, replica=replica, lease=lease)
        if replica.startswith(REPLICA):
            self.told = encrypted(self, NEW).add_steer(session_id, "sent while rekey held it")
        return claim


def test_a_steer_sent_while_rekey_holds_a_session_is_left_for_a_resumer() -> None:
    store = SteeredWhileHeld()
    encrypted(store, OLD).save("s", [agent.Message.user("hello"), agent.Message.assistant("hi")])
    done = rekey(store, NEW, lease=0.2)
    assert done.rekeyed == 1 and store.told is agent.RunState.RUNNING
    # Not released: its lease lapses, and the resumer answers the steer as it would a run's.
    wait_for("the lease to lapse", lambda: store.info("s").state is agent.RunState.STALLED)
    assert store.info("s").pending_steers == 1
    assert [m.text for m in encrypted(store, RETIRED).messages("s")] == ["hello", "hi"]
    assert rekey(store, NEW).current == 1  # a later pass finds it current and leaves it for the resumer
    assert store.info("s").state is agent.RunState.STALLED


def test_a_run_s_stalled_session_is_left_for_the_resumer_and_reported() -> None:
    store = MemoryStore()
    encrypted(store, OLD).save("stalled", [agent.Message.user("a turn under way")])
    store.claim("stalled", replica="dead-process", lease=0.05)
    wait_for("the lease to lapse", lambda: store.info("stalled").state is agent.RunState.STALLED)
    seen: list[RekeyProgress] = []
    done = rekey(encrypted(store, NEW), NEW, progress=seen.append)
    assert (done.busy, done.rekeyed, done.done, len(seen)) == (("stalled",), 0, False, 1)
    assert store.info("stalled").holder == "dead-process"
    with pytest.raises(TypeError, match="RunStore"):
        rekey(object(), NEW)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch"):
        rekey(store, NEW, batch=0)


def test_steers_copied_by_a_killed_rekey_are_finished_once() -> None:
    store = MemoryStore()
    encrypted(store, OLD).save("s", [agent.Message.user("hello")])
    old, new = Sealer(OLD), Sealer(NEW)
    originals = [old.seal_steer("s", text) for text in ("first", "second", "third")]
    for text in originals:
        store.add_steer("s", text)
    steer_id, _ = old.open_steer("s", originals[0])
    store.add_steer("s", new.seal_steer("s", "first", steer_id))  # killed after copying only the first
    assert [s.text for s in encrypted(store, NEW).peek_steers("s")] == ["first", "second", "third"]
    assert rekey(store, NEW).rekeyed == 1
    assert {Sealer.steer_key(s.text) for s in store.peek_steers("s")} == {"k2"}
    assert encrypted(store, RETIRED).take_steers("s") == ["first", "second", "third"]


# --- Killed half-way ---------------------------------------------------------------------------


@pytest.mark.crash
def test_rekey_killed_half_way_and_run_again_finishes_every_session(opener: Opener, tmp_path: Path) -> None:
    seed = int(os.environ.get("AGENTSESSIONS_CRASH_SEED", secrets.randbits(32)))
    rng = random.Random(seed)
    with opener() as store:
        url = store_url(opener)
        keyring = OLD
        made = fill(store, 24, "killed")
        held = 0
        for trial in range(TRIALS):
            where = f"seed {seed}, trial {trial} (AGENTSESSIONS_CRASH_SEED={seed} repeats it)"
            rotated = keyring.rotated(f"t{trial}")
            keys = keys_file(tmp_path, rotated)
            kill_after = rng.randint(1, 10)  # of 12 progress lines (batches of 2)
            argv = [sys.executable, "-m", "agentsessions", "--store", url, "--keys", keys, "rekey", "--batch", "2"]
            process = subprocess.Popen(
                [*argv, "--lease", "2"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
            )
            lines = _progress_lines(process)
            for _ in range(kill_after):
                assert next(lines, None) is not None, f"rekey ended before {kill_after} batches; {where}"
            time.sleep(rng.uniform(0, 0.01))  # a few milliseconds more: inside a batch
            process.send_signal(signal.SIGKILL)
            assert process.wait(30) == -signal.SIGKILL, f"rekey finished before the kill; {where}"
            held += any(
                (i.holder or "").startswith(REPLICA) and i.state is agent.RunState.RUNNING for i in store.sessions()
            )
            again = cli("--store", url, "--keys", keys, "rekey", "--lease", "2")
            assert again.code == Exit.OK, f"{again}; {where}"
            _check_on(store, made, rotated, where)
            keyring = rotated.without(keyring.current)
    print(f"rekey killed {TRIALS} times (seed {seed}): {held} kills left a session held; all finished on rerun")


def _progress_lines(process: subprocess.Popen[str]) -> Iterator[str]:
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("agentsessions: rekey: "):
            yield line


def _check_on(store: Any, made: dict[str, tuple[list[agent.Message], list[str]]], keyring: Keyring, where: str) -> None:
    alone = Keyring({keyring.current: _key_of(keyring)}, keyring.current)
    reader = encrypted(store, alone)
    for session_id, (transcript, steers) in made.items():
        at = f"session {session_id}; {where}"
        assert {Sealer.message_key(row) for row in store.messages(session_id)} <= {keyring.current}, at
        assert {Sealer.steer_key(s.text) for s in store.peek_steers(session_id)} <= {keyring.current}, at
        assert reader.messages(session_id) == transcript, at
        assert [s.text for s in reader.peek_steers(session_id)] == steers, at
        info = store.info(session_id)
        assert info.state in ENDINGS, f"{info}; {at}"


def _key_of(keyring: Keyring) -> bytes:
    import base64
    import json

    return base64.b64decode(json.loads(keyring.to_json())["keys"][keyring.current])
