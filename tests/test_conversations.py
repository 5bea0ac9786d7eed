"""Continuing a conversation: ``Resume`` and ``Runner.send``, on every store, with the races a chat view meets."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Sequence

import pytest

import agentsessions as agent
from agentsessions.codec import encode_text
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runs import Steer
from agentsessions.stores.memory import MemoryStore
from tests.support.backends import Opener
from tests.support.waiting import wait_for


class Echo:
    """A model that answers each request by quoting the user's last words."""

    def complete(self, request: agent.ModelRequest) -> agent.ModelResponse:
        return agent.ModelResponse(agent.Message.assistant(f"you said: {request.messages[-1].text}"))


def user_texts(messages: list[agent.Message]) -> list[str]:
    """Every text block users wrote, in order."""
    return [
        block.text
        for message in messages
        if message.role is agent.Role.USER
        for block in message.content
        if block.type is agent.ContentType.TEXT
    ]


def test_two_runs_with_resume_keep_both_turns() -> None:
    session = agent.open("chat", MemoryStore())
    spec = agent.Spec(session=session)
    runner = agent.Runner()
    runner.run(spec, agent.Resume("What is the capital of France?"), Echo())
    result = runner.run(spec, agent.Resume(agent.Message.user("And of Italy?")), Echo())
    assert user_texts(result.messages) == ["What is the capital of France?", "And of Italy?"]
    assert [m.role for m in session.messages()] == [agent.Role.USER, agent.Role.ASSISTANT] * 2
    assert result.text == "you said: And of Italy?"


def test_resume_joins_the_words_to_a_trailing_user_message_and_can_add_none() -> None:
    store = MemoryStore()
    call = agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c1", "lookup", "{}")])
    answered = agent.Message(agent.Role.USER, [agent.Content.tool_result("c1", "42")])
    store.save("s", [agent.Message.user("look it up"), call, answered])
    model = ScriptedEndpoint([agent.Message.assistant("It is 42.")])
    agent.Runner().run(agent.Spec(session=agent.open("s", store)), agent.Resume("quickly"), model)
    sent = model.requests[0].messages
    assert sent[-1] == agent.Message(agent.Role.USER, [*answered.content, agent.Content.of_text("quickly")])
    again = ScriptedEndpoint([agent.Message.assistant("Still 42.")])
    agent.Runner().run(agent.Spec(session=agent.open("s", store)), agent.Resume(), again)
    assert again.requests[0].messages == tuple(store.messages("s")[:-1])


def test_resume_needs_a_session_and_user_words() -> None:
    with pytest.raises(ValueError, match="needs a session"):
        agent.Runner().run(agent.Spec(), agent.Resume("hi"), Echo())
    with pytest.raises(TypeError, match=r"Resume\.message"):
        agent.Resume(agent.Message.assistant("not the user's"))
    with pytest.raises(ValueError, match="send needs a Spec with a session"):
        agent.Runner().send(agent.Spec(), "hi", Echo())


def test_send_starts_a_run_steers_its_own_and_reaches_one_held_elsewhere() -> None:
    store = MemoryStore()
    spec = agent.Spec(session=agent.open("s", store), max_steps=4)
    entered, release = threading.Event(), threading.Event()

    def slow(request: agent.ModelRequest) -> agent.Message:
        entered.set()
        assert release.wait(5)
        return agent.Message.assistant(f"you said: {request.messages[-1].text}")

    here, elsewhere = agent.Runner(replica="here"), agent.Runner(replica="elsewhere")
    run = here.send(spec, "first", ScriptedEndpoint([slow, slow]))
    assert run is not None and entered.wait(5)
    assert here.send(spec, "second", Echo()) is run  # its own live run takes it
    # In the store before send returned, even for this runner's own run: a kill now loses nothing.
    assert [steer.text for steer in store.peek_steers("s")] == ["second"]
    assert elsewhere.send(spec, "third", Echo()) is None  # held by another runner: through the store
    release.set()
    result = run.wait(5)
    assert user_texts(result.messages) == ["first", "second", "third"]
    assert store.info("s").pending_steers == 0 and store.info("s").state is agent.RunState.FINISHED


class PausesAfterStoring(MemoryStore):
    """A store that holds the caller of ``add_steer`` for one text, after storing it, until told to go on."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.stored, self.go_on = text, threading.Event(), threading.Event()

    def add_steer(
        self, session_id: str, text: str, *, key: str | None = None, if_busy: str = "steer"
    ) -> agent.RunState:
        state = super().add_steer(session_id, text, key=key, if_busy=if_busy)
        if text == self.text:
            self.stored.set()
            assert self.go_on.wait(5)
        return state


def test_a_send_whose_text_another_run_answered_first_asks_the_model_nothing() -> None:
    # B stores its text and, before B starts a run, A's run takes both texts, answers and
    # finishes. B's run then finds nothing waiting: it must not answer the answer again.
    store = PausesAfterStoring("B")
    spec = agent.Spec(session=agent.open("chat", store))
    model = ScriptedEndpoint([agent.Message.assistant("the answer"), agent.Message.assistant("again")])
    sent_b: list[agent.Run | None] = []
    b = threading.Thread(target=lambda: sent_b.append(agent.Runner(replica="b").send(spec, "B", model)))
    b.start()
    assert store.stored.wait(5)
    run_a = agent.Runner(replica="a").send(spec, "A", model)
    assert run_a is not None and run_a.wait(5).text == "the answer"
    store.go_on.set()
    b.join(5)
    run_b = sent_b[0]
    assert run_b is not None
    result = run_b.wait(5)
    assert (result.steps, result.stop_reason, result.text) == (0, agent.StopReason.END_TURN, "the answer")
    assert len(model.requests) == 1
    assert [m.text for m in store.messages("chat")] == ["BA", "the answer"]
    assert store.info("chat").state is agent.RunState.FINISHED


class CountsPeeks(MemoryStore):
    """Counts the reads of the session's steers."""

    def __init__(self) -> None:
        super().__init__()
        self.peeks = 0

    def peek_steers(self, session_id: str) -> list[Steer]:
        self.peeks += 1
        return super().peek_steers(session_id)


def test_a_send_reads_the_stored_steers_once_before_its_first_request() -> None:
    # The check that nobody answered the text first collects the steers; step 1 follows at
    # once and asks the box only (a steer stored in between is step 2's or the release's).
    store = CountsPeeks()
    spec = agent.Spec(session=agent.open("chat", store))
    model = ScriptedEndpoint([agent.Message.assistant("one"), agent.Message.assistant("two")])
    for text in ("first", "second"):
        store.peeks = 0
        run = agent.Runner().send(spec, text, model)
        assert run is not None and run.wait(5).steps == 1
        assert store.peeks == 1
    assert [m.text for m in store.messages("chat")] == ["first", "one", "second", "two"]


def test_many_sends_from_two_replicas_are_each_answered_once(opener: Opener) -> None:
    texts = [f"message {replica}-{thread}-{n}" for replica in range(2) for thread in range(3) for n in range(4)]
    runs: list[agent.Run] = []
    lock = threading.Lock()
    with opener() as first, opener() as second:
        replicas = [(agent.Runner(replica="r0"), first), (agent.Runner(replica="r1"), second)]

        def sender(replica: int, thread: int) -> None:
            runner, store = replicas[replica]
            spec = agent.Spec(session=agent.open("chat", store), max_steps=100, lease=5.0)
            for n in range(4):
                run = runner.send(spec, f"message {replica}-{thread}-{n}", Echo())
                if run is not None:
                    with lock:
                        runs.append(run)

        threads = [threading.Thread(target=sender, args=(r, t)) for r in range(2) for t in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        for run in runs:
            run.wait(60)
        transcript = first.messages("chat")
        info = first.info("chat")
    said = user_texts(transcript)
    assert sorted(said) == sorted(texts), "every text exactly once"
    assert (info.state, info.pending_steers) == (agent.RunState.FINISHED, 0)
    assert transcript[-1].role is agent.Role.ASSISTANT


class SeedStoreWhoseSteersFail:
    """A store with only the seed's four methods, whose database fails when steers are taken the second time."""

    def __init__(self) -> None:
        self.transcripts: dict[str, list[agent.Message]] = {}
        self.takes = 0

    def save(self, session_id: str, messages: Sequence[agent.Message]) -> None:
        self.transcripts[session_id] = list(messages)

    def messages(self, session_id: str) -> list[agent.Message]:
        return list(self.transcripts.get(session_id, []))

    def add_steer(self, session_id: str, text: str) -> None:
        raise AssertionError("not used")

    def take_steers(self, session_id: str) -> list[str]:
        self.takes += 1
        if self.takes > 1:
            raise agent.StoreError("the database went away")
        return []


def test_a_steer_given_to_the_run_is_reported_when_taking_the_sessions_steers_fails() -> None:
    store = SeedStoreWhoseSteersFail()
    entered, release = threading.Event(), threading.Event()

    def calls_a_tool(_: agent.ModelRequest) -> agent.Message:
        entered.set()
        assert release.wait(5)
        return agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("c1", "missing", "{}")])

    spec = agent.Spec(session=agent.open("s", store))
    run = agent.Runner().start(spec, [agent.Message.user("hi")], ScriptedEndpoint([calls_a_tool]))
    assert entered.wait(5)
    run.steer("do not lose me")
    release.set()
    with pytest.raises(agent.RunError) as failed:
        run.wait(5)
    assert failed.value.result.unapplied_steers == ["do not lose me"]


def write_a_newer_run_state(store: agent.RunStore, session_id: str) -> None:
    """Make the record of ``session_id`` hold a run state from a newer version, as its replicas would write it."""
    key = encode_text(session_id)
    name = type(store).__name__
    if name == "SQLiteStore":
        with contextlib.closing(sqlite3.connect(store.path)) as db, db:  # type: ignore[attr-defined]
            db.execute("UPDATE agentsessions_sessions SET run_state = 'paused' WHERE id = ?", (key,))
    elif name == "PostgresStore":
        with store.pool.connection() as conn:  # type: ignore[attr-defined]
            # The newer version's migration widened the check on the column first.
            conn.execute("ALTER TABLE agentsessions_sessions DROP CONSTRAINT agentsessions_sessions_run_state_check")
            conn.execute("UPDATE agentsessions_sessions SET run_state = 'paused' WHERE id = %s", (key,))
    elif name == "MySQLStore":
        conn = store.connect()  # type: ignore[attr-defined]
        with conn.cursor() as cur:
            cur.execute("UPDATE agentsessions_sessions SET run_state = 'paused' WHERE id = %s", (key,))
        conn.commit()
    elif name == "RedisStore":
        store.client.hset(store._record(key), "st", "paused")  # type: ignore[attr-defined]
    else:
        from agentsessions.stores.mongodb._layout import key as mongo_key

        store._sessions.update_one({"_id": mongo_key(session_id)}, {"$set": {"run_state": "paused"}})  # type: ignore[attr-defined]


def test_a_record_from_a_newer_version_is_a_format_error_and_the_others_are_still_listed(
    opener: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    with opener() as store:
        for session_id in ("old-1", "from-the-future", "old-2"):
            agent.Runner().run(agent.Spec(session=agent.open(session_id, store)), agent.Resume("hi"), Echo())
        write_a_newer_run_state(store, "from-the-future")
        with pytest.raises(agent.FormatError, match=r"'from-the-future' has run state 'paused'.*upgrade"):
            store.info("from-the-future")
        with pytest.raises(agent.FormatError, match="from-the-future"):  # never taken over by this version
            store.claim("from-the-future", replica="old-replica", lease=5.0)
        with caplog.at_level(logging.WARNING, logger="agentsessions"):
            listed = [info.id for info in store.sessions()]
        assert sorted(listed) == ["old-1", "old-2"]
        assert "left out of the listing" in caplog.text and "from-the-future" in caplog.text


def test_a_steer_the_run_accepted_with_no_step_left_goes_to_the_store_for_the_next_run() -> None:
    store = MemoryStore()
    session = agent.open("s", store)
    entered, release = threading.Event(), threading.Event()

    def last_answer(_: agent.ModelRequest) -> agent.Message:
        entered.set()
        assert release.wait(5)
        return agent.Message.assistant("done")

    spec = agent.Spec(session=session, max_steps=1, lease=0.2)
    run = agent.Runner().send(spec, "first", ScriptedEndpoint([last_answer]))
    assert run is not None and entered.wait(5)
    run.steer("in its last step")  # accepted: the box is open until the run finishes
    release.set()
    assert run.wait(5).unapplied_steers == []  # not lost: handed to the store
    wait_for("the lease to lapse", lambda: store.info("s").state is agent.RunState.STALLED)
    assert store.info("s").pending_steers == 1
    result = agent.Runner().run(spec, agent.Resume(), Echo())
    assert result.text == "you said: in its last step" and store.info("s").pending_steers == 0
