"""``agentsessions prune`` on SQLite, through the command's ``main``: what it counts, deletes and refuses."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsessions as agent
from agentsessions.approvals import Approval
from agentsessions.cli import CliError, Exit, Streams, parser
from agentsessions.cli._prune import prune
from agentsessions.runs import exists, utcnow
from agentsessions.stores.sqlite import SQLiteStore
from tests.support.backends import Opener, store_url
from tests.support.command import cli
from tests.support.servers import skip_without

ENDED = ("idle", "finished-1", "finished-2", "failed", "cancelled", "tagged")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[tuple[str, SQLiteStore]]:
    path = tmp_path / "sessions.db"
    with contextlib.closing(SQLiteStore(path)) as store:
        yield f"sqlite://{path}", store


def population(store: SQLiteStore) -> None:
    """Six ended sessions (one tagged), a waiting one and one a live run holds."""
    store.save("idle", [agent.Message.user("idle")])
    for session_id, end in [
        ("finished-1", agent.RunState.FINISHED),
        ("finished-2", agent.RunState.FINISHED),
        ("failed", agent.RunState.FAILED),
        ("cancelled", agent.RunState.CANCELLED),
        ("tagged", agent.RunState.FINISHED),
    ]:
        claim = store.claim(session_id, replica="web-1", lease=30)
        store.save_run(claim, [agent.Message.user(session_id)], end=end)
    store.set_metadata("tagged", {"user": "42"})
    claim = store.claim("waiting", replica="web-1", lease=30)
    store.save_run(claim, [agent.Message.user("may I?")])
    store.wait(claim, [Approval("call-1", "refund", "{}", utcnow())])
    store.save("live", [agent.Message.user("live")])
    store.claim("live", replica="web-2", lease=60)  # a live run: never pruned
    assert store.info("waiting").state is agent.RunState.WAITING


def left(store: SQLiteStore) -> set[str]:
    return {info.id for info in store.sessions()}


def test_dry_run_counts_and_deletes_nothing(sqlite_url: tuple[str, SQLiteStore]) -> None:
    url, store = sqlite_url
    population(store)
    counted = cli("--store", url, "prune", "--older-than", "0s", "--dry-run")
    assert counted.code == Exit.OK and counted.out.startswith("would prune 6 sessions last updated before ")
    assert counted.err == ""
    tagged = cli("--store", url, "prune", "--older-than", "0s", "--metadata", "user=42", "--dry-run")
    assert tagged.out.startswith("would prune 1 session last updated before ")
    waiting = cli("--store", url, "prune", "--older-than", "0s", "--state", "waiting", "--state", "idle", "--dry-run")
    assert waiting.out.startswith("would prune 2 sessions ")
    assert cli("--store", url, "prune", "--older-than", "1h", "--dry-run").out.startswith("would prune 0 sessions ")
    assert left(store) == {*ENDED, "waiting", "live"}


def test_prune_deletes_the_ended_sessions_in_batches_with_progress(sqlite_url: tuple[str, SQLiteStore]) -> None:
    url, store = sqlite_url
    population(store)
    assert cli("--store", url, "prune", "--older-than", "1h").out.startswith("pruned 0 sessions last updated before ")
    assert left(store) == {*ENDED, "waiting", "live"}  # none is an hour old
    done = cli("--store", url, "prune", "--older-than", "0s", "--batch", "4")
    assert done.code == Exit.OK and done.out.startswith("pruned 6 sessions last updated before ")
    progress = done.err.splitlines()
    assert progress[0] == "agentsessions: prune: 6 sessions to delete, in batches of 4"
    assert progress[-1] == "agentsessions: prune: 6 of 6 deleted"
    counts = [int(line.split()[2]) for line in progress[1:]]
    assert counts == sorted(counts) and 1 < len(counts) <= 3  # a line per call: 6 sessions, 4 a call
    assert left(store) == {"waiting", "live"}
    for gone in ENDED:
        assert not exists(store.info(gone)) and store.messages(gone) == []
    assert store.messages("live") == [agent.Message.user("live")]  # the live run's session is whole
    again = cli("--store", url, "prune", "--older-than", "0s")
    assert again.out.startswith("pruned 0 sessions ") and again.err.splitlines()[-1].endswith("0 of 0 deleted")


def test_state_and_metadata_narrow_what_goes(sqlite_url: tuple[str, SQLiteStore]) -> None:
    url, store = sqlite_url
    population(store)
    assert cli("--store", url, "prune", "--older-than", "0s", "--metadata", "user=7").out.startswith("pruned 0 ")
    assert cli("--store", url, "prune", "--older-than", "0s", "--metadata", "user=42").out.startswith("pruned 1 ")
    assert cli("--store", url, "prune", "--older-than", "0s", "--state", "failed").out.startswith("pruned 1 ")
    assert left(store) == {"idle", "finished-1", "finished-2", "cancelled", "waiting", "live"}
    waiting = cli("--store", url, "prune", "--older-than", "0s", "--state", "waiting", "--batch", "1")
    assert waiting.out.startswith("pruned 1 session ")  # named, a waiting session goes too
    assert left(store) == {"idle", "finished-1", "finished-2", "cancelled", "live"}


def test_bad_arguments_exit_2_and_delete_nothing(sqlite_url: tuple[str, SQLiteStore]) -> None:
    url, store = sqlite_url
    population(store)
    for bad in (
        [],  # --older-than is required
        ["--older-than", "30 days"],
        ["--older-than", "1x"],
        ["--older-than", "-1d"],
        ["--older-than", "1d", "--state", "asleep"],
        ["--older-than", "1d", "--batch", "0"],
        ["--older-than", "1d", "--metadata", "user"],
    ):
        outcome = cli("--store", url, "prune", *bad)
        assert outcome.code == Exit.USAGE and outcome.out == "", bad
    running = cli("--store", url, "prune", "--older-than", "0s", "--state", "running")
    assert running.code == Exit.USAGE and running.out == ""
    assert running.err == "agentsessions: prune never deletes a session under a live lease: state cannot name RUNNING\n"
    long_value = cli("--store", url, "prune", "--older-than", "0s", "--metadata", f"user={'x' * 300}", "--dry-run")
    assert long_value.code == Exit.USAGE and long_value.err.count("\n") == 1
    assert left(store) == {*ENDED, "waiting", "live"}


class CannotPrune(SQLiteStore):
    """A SQLite store without ``prune`` (hidden the only way a class can hide a method)."""

    prune = None  # type: ignore[assignment]


def test_a_store_without_prune_is_a_usage_error(tmp_path: Path) -> None:
    for flags in ([], ["--dry-run"]):
        args = parser().parse_args(["prune", "--older-than", "1d", *flags])
        with (
            contextlib.closing(CannotPrune(tmp_path / "plain.db")) as store,
            pytest.raises(CliError, match=r"^CannotPrune cannot prune: it has no prune method$") as caught,
        ):
            prune(args, store, Streams(io.StringIO(), io.StringIO()))
        assert caught.value.code == Exit.USAGE


def test_prune_runs_on_an_encrypted_store_given_its_keys(sqlite_url: tuple[str, SQLiteStore], tmp_path: Path) -> None:
    skip_without("cryptography", extra="crypto")
    from agentsessions.crypto import Keyring, encrypted

    url, store = sqlite_url
    keyring = Keyring({"k1": Keyring.new_key()}, "k1")
    keys = tmp_path / "keys.json"
    keys.write_text(keyring.to_json())
    encrypted(store, keyring).save("sealed", [agent.Message.user("my diagnosis")])
    done = cli("--store", url, "--keys", str(keys), "prune", "--older-than", "0s")  # records only: no key is used
    assert done.code == Exit.OK and done.out.startswith("pruned 1 session ")
    assert left(store) == set()


def test_prune_on_every_persistent_store_or_a_clear_refusal(opener: Opener) -> None:
    with opener() as store:
        url = store_url(opener)
        for n in range(5):
            claim = store.claim(f"old-{n}", replica="web-1", lease=30)
            store.save_run(claim, [agent.Message.user(str(n))], end=agent.RunState.FINISHED)
        store.save("live", [agent.Message.user("live")])
        store.claim("live", replica="web-2", lease=60)
        done = cli("--store", url, "prune", "--older-than", "0s", "--batch", "2")
        if not callable(getattr(store, "prune", None)):  # PostgreSQL, MySQL, MongoDB and Redis until they prune
            assert done.code == Exit.USAGE and done.out == ""
            assert done.err == f"agentsessions: {type(store).__name__} cannot prune: it has no prune method\n"
            assert len(list(store.sessions())) == 6
            return
        assert done.code == Exit.OK and done.out.startswith("pruned 5 sessions "), done
        assert done.err.splitlines()[-1] == "agentsessions: prune: 5 of 5 deleted"
        assert [info.id for info in store.sessions()] == ["live"]
