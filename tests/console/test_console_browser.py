"""The console in a real headless browser (Debian's chromium and chromedriver, driven by selenium).

A run lives in a background thread; its scripted model waits on a gate before each reply,
so the test decides when the transcript grows and watches the page follow it without a
reload. Every wait is a WebDriverWait on what the page shows, never a fixed sleep.
Missing chromium fails in CI and skips elsewhere, saying how to install it.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("selenium", "waitress")  # before the imports that need them

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as shows
from selenium.webdriver.support.ui import WebDriverWait

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.messages import Message
from agentsessions.runs import RunState
from agentsessions.stores import sqlite
from tests.support.console_server import TOKEN, Waiting, served, sqlite_store
from tests.support.scripts import call, double
from tests.support.waiting import wait_for

pytestmark = pytest.mark.browser

GATE_TIMEOUT = 60.0
"""Seconds a scripted reply waits for its gate before it fails, as a provider's timeout would."""


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        message = "chromium and chromedriver are missing: apt-get install -y chromium chromium-driver"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(argument)
    opened = webdriver.Chrome(service=webdriver.ChromeService(driver), options=options)
    try:
        yield opened
    finally:
        opened.quit()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[sqlite.SQLiteStore]:
    with sqlite_store(tmp_path) as opened:
        yield opened


@pytest.fixture
def base(store: sqlite.SQLiteStore, browser: WebDriver) -> Iterator[str]:
    with served(store) as url:
        browser.delete_all_cookies()
        yield url


def wait(browser: WebDriver) -> WebDriverWait[WebDriver]:
    """A wait for what the page shows; an element of the page being left is looked up again."""
    return WebDriverWait(browser, 20, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))


def text_of(browser: WebDriver, css: str) -> Callable[[Any], str | bool]:
    """A condition: the text of the element ``css``, once it exists."""

    def probe(_: Any) -> str | bool:
        found = browser.find_elements(By.CSS_SELECTOR, css)
        return found[0].text if found else False

    return probe


def gated(reply: Message, gate: threading.Event) -> Callable[[agent.ModelRequest], Message]:
    """A scripted reply that waits for ``gate`` first."""

    def answer(_: agent.ModelRequest) -> Message:
        if not gate.wait(GATE_TIMEOUT):
            raise TimeoutError("the test never opened this reply's gate")
        return reply

    return answer


def test_the_list_shows_the_sessions_newest_first_and_opens_one(
    browser: WebDriver, base: str, store: sqlite.SQLiteStore
) -> None:
    for i in range(3):
        store.save(f"listed-{i}", [Message.user(f"hello {i} <script>window.pwned=1</script>")])
    browser.get(f"{base}/?token={TOKEN}")
    wait(browser).until(shows.presence_of_element_located((By.CSS_SELECTOR, "table.sessions tbody tr")))
    assert browser.current_url == f"{base}/"  # the token left the address bar
    rows = [row.text.split()[0] for row in browser.find_elements(By.CSS_SELECTOR, "table.sessions tbody tr")]
    assert rows == ["listed-2", "listed-1", "listed-0"]
    browser.find_element(By.LINK_TEXT, "listed-1").click()
    wait(browser).until(text_of(browser, "#m0"))
    assert "hello 1 <script>window.pwned=1</script>" in browser.find_element(By.ID, "m0").text
    assert browser.execute_script("return window.pwned === undefined") is True


def test_the_first_page_of_the_list_follows_the_store_without_a_reload(
    browser: WebDriver, base: str, store: sqlite.SQLiteStore
) -> None:
    store.save("first", [Message.user("one")])
    store.set_metadata("first", {"user": "42"})
    browser.get(f"{base}/?metadata=user%3D42&token={TOKEN}")
    wait(browser).until(lambda _: "first" in browser.find_element(By.CSS_SELECTOR, "table.sessions tbody").text)
    browser.execute_script("window.notReloaded = true")
    store.save("arrived <b>later</b>", [Message.user("two")])
    store.set_metadata("arrived <b>later</b>", {"user": "42"})
    store.save("someone else", [Message.user("three")])
    store.set_metadata("someone else", {"user": "7"})
    wait(browser).until(
        lambda _: "arrived <b>later</b>" in browser.find_element(By.CSS_SELECTOR, "table.sessions tbody").text
    )
    ids = [link.text for link in browser.find_elements(By.CSS_SELECTOR, "table.sessions tbody tr td:first-child a")]
    previews = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "table.sessions tbody .preview")]
    assert (ids, previews) == (["arrived <b>later</b>", "first"], ["two", "one"])
    assert browser.execute_script("return window.notReloaded === true") is True  # rows came in, no reload
    assert 'idle <span class="count">3</span>' in browser.page_source  # the counts followed too


def test_a_live_run_grows_takes_a_steer_and_is_cancelled(
    browser: WebDriver, base: str, store: sqlite.SQLiteStore
) -> None:
    gates = [threading.Event() for _ in range(4)]
    replies = [
        call("double", "c1", n=1),
        call("double", "c2", n=2),
        call("double", "c3", n=3),
        Message.assistant("done"),
    ]
    model = ScriptedEndpoint([gated(reply, gate) for reply, gate in zip(replies, gates, strict=True)])
    spec = agent.Spec(max_steps=8, session=agent.open("live", store), tools=[double], lease=5)
    run = agent.Runner(replica="replica-a").start(spec, [Message.user("begin")], model)
    try:
        wait_for("the run to hold the session", lambda: store.info("live").state is RunState.RUNNING)
        browser.get(f"{base}/session?id=live&token={TOKEN}")
        wait(browser).until(lambda _: "replica-a" in browser.find_element(By.ID, "status").text)
        browser.execute_script("window.notReloaded = true")
        gates[0].set()  # the model calls double(1): a tool call and its result join the transcript
        wait(browser).until(text_of(browser, "#m2"))
        assert "double" in browser.find_element(By.ID, "m1").text and "2" in browser.find_element(By.ID, "m2").text

        assert browser.execute_script("return window.notReloaded === true") is True
        browser.find_element(By.NAME, "text").send_keys("use the larger number")
        browser.find_element(By.CSS_SELECTOR, 'button[value="steer"]').click()
        wait(browser).until(lambda _: "the live run takes it" in browser.find_element(By.CLASS_NAME, "notice").text)
        assert "use the larger number" in browser.find_element(By.ID, "status").text  # waiting, shown
        gates[1].set()  # the next request carries the steer: the page shows it in the transcript
        wait(browser).until(lambda _: "use the larger number" in browser.find_element(By.ID, "transcript").text)

        browser.find_element(By.CSS_SELECTOR, 'button[value="cancel"]').click()
        wait(browser).until(lambda _: "Cancel requested" in browser.find_element(By.CLASS_NAME, "notice").text)
        gates[2].set()
        wait(browser).until(lambda _: "cancelled" in browser.find_element(By.ID, "status").text)
        assert store.info("live").state is RunState.CANCELLED
    finally:
        for gate in gates:
            gate.set()
        run.wait(30)


def test_fork_at_a_message_then_delete_after_confirming(
    browser: WebDriver, base: str, store: sqlite.SQLiteStore
) -> None:
    store.save("original", [Message.user("one"), Message.assistant("two"), Message.user("three")])
    browser.get(f"{base}/session?id=original&token={TOKEN}")
    new = browser.find_element(By.NAME, "new")
    new.clear()
    new.send_keys("branch")
    at = browser.find_element(By.NAME, "at")
    at.clear()
    at.send_keys("2")
    browser.find_element(By.CSS_SELECTOR, 'button[value="fork"]').click()
    wait(browser).until(lambda _: "Forked" in browser.find_element(By.CLASS_NAME, "notice").text)
    assert browser.find_element(By.CSS_SELECTOR, "h1 .session-id").text == "branch"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#transcript article")) == 2
    assert store.messages("branch") == store.messages("original")[:2]

    browser.find_element(By.LINK_TEXT, "Delete…").click()
    wait(browser).until(shows.presence_of_element_located((By.CSS_SELECTOR, 'button[value="delete"]')))
    assert store.info("branch").length == 2  # the confirmation page deleted nothing
    browser.find_element(By.CSS_SELECTOR, 'button[value="delete"]').click()
    wait(browser).until(lambda _: "Deleted" in browser.find_element(By.CLASS_NAME, "notice").text)
    listed = browser.find_element(By.CSS_SELECTOR, "table.sessions").text
    assert "branch" not in listed and "original" in listed
    assert store.info("branch").length == 0


def test_a_tool_call_under_way_shows_then_the_ended_session_offers_no_cancel_and_forks_at_its_end(
    browser: WebDriver, base: str, store: sqlite.SQLiteStore
) -> None:
    release = threading.Event()

    @agent.tool
    def ship(order: int) -> str:
        """Ship an order."""
        if not release.wait(GATE_TIMEOUT):
            raise TimeoutError("the test never let the tool return")
        return f"order {order} shipped"

    # With the journal, the call is saved just before the tool runs: the console can show it.
    spec = agent.Spec(session=agent.open("shipping", store), tools=[ship], journal=True, lease=5)
    model = ScriptedEndpoint([call("ship", "c1", order=7), Message.assistant("Shipped.")])
    run = agent.Runner(replica="replica-a").start(spec, [Message.user("ship order 7")], model)
    try:
        wait_for("the call to be saved as started", lambda: store.info("shipping").length == 3)
        browser.get(f"{base}/session?id=shipping&token={TOKEN}")
        wait(browser).until(lambda _: "running the tool ship" in browser.find_element(By.ID, "status").text)
        running = browser.find_element(By.CSS_SELECTOR, "#m2 .in-doubt")
        assert running.find_element(By.CSS_SELECTOR, ".badge.underway").is_displayed()
        assert not running.find_element(By.CSS_SELECTOR, ".badge.doubt").is_displayed()
        assert "ship is running" in running.text and "never recorded" not in running.text
        assert browser.find_element(By.CSS_SELECTOR, 'button[value="cancel"]').is_displayed()
        fork_at = browser.find_element(By.ID, "fork-at")
        assert (fork_at.get_attribute("value"), fork_at.get_attribute("max")) == ("3", "3")
        browser.execute_script("window.notReloaded = true")

        release.set()  # the tool returns, the model answers, the run finishes
        wait(browser).until(lambda _: "finished" in browser.find_element(By.ID, "status").text)
        wait(browser).until(text_of(browser, "#m3"))
        assert "order 7 shipped" in browser.find_element(By.ID, "m2").text
        assert browser.find_elements(By.CSS_SELECTOR, ".in-doubt") == []
        assert not browser.find_element(By.CSS_SELECTOR, 'button[value="cancel"]').is_displayed()
        wait(browser).until(lambda _: browser.find_element(By.ID, "fork-at").get_attribute("value") == "4")
        assert browser.execute_script("return window.notReloaded === true") is True

        new = browser.find_element(By.NAME, "new")
        new.clear()
        new.send_keys("shipping-again")
        browser.find_element(By.CSS_SELECTOR, 'button[value="fork"]').click()  # at the end, no reload needed
        wait(browser).until(lambda _: "Forked" in browser.find_element(By.CLASS_NAME, "notice").text)
        assert store.messages("shipping-again") == store.messages("shipping")
        assert len(store.messages("shipping-again")) == 4
    finally:
        release.set()
        run.wait(30)


def test_a_fork_count_someone_chose_is_kept_while_the_transcript_grows(
    browser: WebDriver, base: str, store: sqlite.SQLiteStore
) -> None:
    store.save("growing", [Message.user("one"), Message.assistant("two")])
    browser.get(f"{base}/session?id=growing&token={TOKEN}")
    fork_at = browser.find_element(By.ID, "fork-at")
    fork_at.clear()
    fork_at.send_keys("1")
    store.save("growing", [Message.user("one"), Message.assistant("two"), Message.user("three")])
    wait(browser).until(lambda _: browser.find_element(By.ID, "fork-at").get_attribute("max") == "3")
    assert browser.find_element(By.ID, "fork-at").get_attribute("value") == "1"


def approval_form(browser: WebDriver, call_id: str, action: str) -> Any:
    """The Approve or Reject form (``action``) of the waiting call ``call_id`` on the page."""
    return browser.find_element(
        By.CSS_SELECTOR, f'#approvals .approval[data-call="{call_id}"] form[action$="/{action}"]'
    )


def test_a_wait_is_decided_in_the_page_and_the_resumed_run_follows_the_decisions(
    browser: WebDriver, base: str, store: sqlite.SQLiteStore
) -> None:
    gate = threading.Event()
    asked = Message(
        agent.Role.ASSISTANT,
        [
            agent.Content.tool_use("c1", "delete", '{"path": "a.txt"}'),
            agent.Content.tool_use("c2", "delete", '{"path": "b.txt"}'),
        ],
    )
    ran: list[str] = []

    @agent.tool(needs_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    spec = agent.Spec(session=agent.open("tidy", store), tools=[delete], lease=5)
    run = agent.Runner(replica="replica-a").start(
        spec, [Message.user("tidy up")], ScriptedEndpoint([gated(asked, gate)])
    )
    try:
        wait_for("the run to hold the session", lambda: store.info("tidy").state is RunState.RUNNING)
        browser.get(f"{base}/session?id=tidy&token={TOKEN}")
        wait(browser).until(lambda _: "replica-a" in browser.find_element(By.ID, "status").text)
        assert browser.find_elements(By.CSS_SELECTOR, "#approvals .approval") == []
        browser.execute_script("window.notReloaded = true")
        gate.set()  # the model calls delete twice: the run stops waiting, and the panel appears
        wait(browser).until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, "#approvals .approval")) == 2)
        assert browser.execute_script("return window.notReloaded === true") is True
        assert "waiting" in browser.find_element(By.ID, "status").text
    finally:
        gate.set()
        stopped = run.wait(30)
    assert stopped.stop_reason == agent.StopReason.APPROVAL_REQUIRED
    shown = approval_form(browser, "c1", "approve").find_element(By.NAME, "input").get_attribute("value")
    assert shown == '{"path": "a.txt"}'

    approve = approval_form(browser, "c1", "approve")
    edited = approve.find_element(By.NAME, "input")
    edited.clear()
    edited.send_keys('{"path": "a-copy.txt"}')  # the person runs it on the copy instead
    by = approve.find_element(By.NAME, "by")
    by.clear()
    by.send_keys("ann")
    approve.find_element(By.CSS_SELECTOR, 'button[value="approve"]').click()
    wait(browser).until(lambda _: "Approved" in browser.find_element(By.CLASS_NAME, "notice").text)
    decided = browser.find_element(By.CSS_SELECTOR, '.approval[data-call="c1"]').text
    assert (
        "approved by ann" in decided and '"a-copy.txt"' in decided and 'the model asked: {"path": "a.txt"}' in decided
    )
    reject = approval_form(browser, "c2", "reject")
    reject.find_element(By.NAME, "reason").send_keys("keep b.txt, it is the backup")
    reject.find_element(By.CSS_SELECTOR, 'button[value="reject"]').click()
    wait(browser).until(lambda _: "Rejected" in browser.find_element(By.CLASS_NAME, "notice").text)
    assert browser.find_elements(By.CSS_SELECTOR, "#approvals .approval form") == []  # nothing left to decide
    assert "keep b.txt, it is the backup" in browser.find_element(By.CSS_SELECTOR, '.approval[data-call="c2"]').text

    calls = {call.call_id: call for call in store.approvals("tidy")}
    assert (calls["c1"].decision, calls["c1"].by) == ("approved", "ann")
    assert (calls["c1"].input, calls["c1"].original_input) == ('{"path": "a-copy.txt"}', '{"path": "a.txt"}')
    assert (calls["c2"].decision, calls["c2"].reason, calls["c2"].by) == (
        "rejected",
        "keep b.txt, it is the backup",
        "console",
    )
    read: list[agent.ModelRequest] = []

    def answer(request: agent.ModelRequest) -> Message:
        read.append(request)
        return Message.assistant("done")

    resumed = agent.Runner().run(spec, agent.Resume(), ScriptedEndpoint([answer]))
    assert resumed.stop_reason == "end_turn" and ran == ["a-copy.txt"]  # the edited input ran
    results = {c.tool_use_id: c for c in read[0].messages[-1].content}
    assert results["c1"].text == "deleted a-copy.txt" and not results["c1"].is_error
    uses = {c.id: c.input for c in read[0].messages[-2].content}
    assert uses["c1"] == '{"path": "a-copy.txt"}'  # the model reads the call that ran
    assert results["c2"].is_error and "keep b.txt, it is the backup" in results["c2"].text
    wait(browser).until(lambda _: "finished" in browser.find_element(By.ID, "status").text)
    assert browser.find_elements(By.CSS_SELECTOR, "#approvals .approval") == []  # the wait is over


def test_a_call_decided_in_another_process_while_the_page_is_open_is_a_conflict_in_the_page(
    browser: WebDriver, base: str, store: sqlite.SQLiteStore, tmp_path: Path
) -> None:
    Waiting(store, "tidy")
    browser.get(f"{base}/session?id=tidy&token={TOKEN}")
    wait(browser).until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, "#approvals .approval")) == 2)
    by = approval_form(browser, "c1", "approve").find_element(By.NAME, "by")
    by.clear()
    by.send_keys("ann")  # someone is filling in the form: the page keeps it while the wait changes
    command = [sys.executable, "-m", "agentsessions", "reject", "tidy", "c1", "--reason", "not now", "--by", "carol"]
    command += ["--store", f"sqlite:///{tmp_path / 'console.db'}"]
    subprocess.run(command, check=True, capture_output=True, timeout=60)
    wait(browser).until(lambda _: "changed elsewhere" in browser.find_element(By.ID, "approvals").text)
    approval_form(browser, "c1", "approve").find_element(By.CSS_SELECTOR, 'button[value="approve"]').click()
    wait(browser).until(lambda _: "Not recorded" in browser.find_element(By.CLASS_NAME, "problem").text)
    page = browser.find_element(By.TAG_NAME, "main").text
    assert "rejected by carol" in page and "not now" in page and "Traceback" not in page
    assert [(c.call_id, c.decision, c.by) for c in store.approvals("tidy")] == [
        ("c1", "rejected", "carol"),
        ("c2", None, ""),
    ]
    browser.find_element(By.LINK_TEXT, "back").click()  # the page again, as the wait stands
    wait(browser).until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, "#approvals .approval form")) == 2)  # c2's
