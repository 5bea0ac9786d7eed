"""The console over real HTTP (waitress on a free port): who gets in, what a page may contain, the actions.

Sessions are saved straight into a SQLite store (and one made by a real run); every request
goes through a socket to the server, as a browser's would.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("waitress", extra="console")  # before the imports that need them

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import pytest
import requests

import agentsessions as agent
from agentsessions.console._guard import SECURITY_HEADERS
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.loop import IN_DOUBT
from agentsessions.messages import Content, ContentType, Message, Role
from agentsessions.stores import sqlite
from tests.support.console_server import TOKEN, Waiting, served, sqlite_store
from tests.support.servers import POSTGRES_DSN, require_server

AUTH = {"Authorization": f"Bearer {TOKEN}"}
EVIL = "<script>alert(1)</script>"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="


@pytest.fixture
def store(tmp_path: Path) -> Iterator[sqlite.SQLiteStore]:
    with sqlite_store(tmp_path) as opened:
        yield opened


@pytest.fixture
def base(store: sqlite.SQLiteStore) -> Iterator[str]:
    with served(store) as url:
        yield url


def get(url: str, **options: object) -> requests.Response:
    return requests.get(url, headers=AUTH, allow_redirects=False, timeout=10, **options)  # type: ignore[arg-type]


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def post(base: str, action: str, session_id: str, token: str = "", **fields: str) -> requests.Response:
    token = token or csrf(get(f"{base}/session?id={quote(session_id, safe='')}").text)
    data = {"csrf": token, "id": session_id, **fields}
    return requests.post(f"{base}/{action}", data=data, headers=AUTH, allow_redirects=False, timeout=10)


def hostile(store: sqlite.SQLiteStore, session_id: str = f"id{EVIL}") -> str:
    """A session whose every block carries markup, as untrusted model and tool output may."""
    store.save(
        session_id,
        [
            Message.user(f"text {EVIL}", Content.image(media_type="image/png", data=PNG)),
            Message(
                Role.ASSISTANT,
                (
                    Content.thinking(f"thought {EVIL}", "sig"),
                    Content.redacted_thinking("opaque"),
                    Content.tool_use("c1", f"tool{EVIL}", f'{{"q": "{EVIL}"}}'),
                ),
            ),
            Message(
                Role.USER,
                (
                    Content.tool_result("c1", f"result {EVIL}", is_error=True),
                    Content(ContentType.IMAGE, url=f"javascript:alert(1)//{EVIL}", tool_use_id="c1"),
                    Content.image(media_type="text/html", data="PHNjcmlwdD4="),
                    Content.document(media_type="application/pdf", data="JVBERi0=", name=f"doc{EVIL}"),
                ),
            ),
            Message(Role.ASSISTANT, (Content.raw("anthropic", f'{{"type": "{EVIL}"}}', text=f"cited {EVIL}"),)),
        ],
    )
    store.add_steer(session_id, f"steer {EVIL}")
    return session_id


# --- Who gets in ----------------------------------------------------------------------------


def test_every_request_needs_the_token_and_a_refusal_says_nothing(base: str, store: sqlite.SQLiteStore) -> None:
    hostile(store)
    paths = ["/", "/session?id=x", "/session/poll?id=x&from=0&v=", "/delete?id=x", "/static/console.js", "/nope"]
    for path in paths:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": TOKEN},
            {"Cookie": "agentsessions_console=x"},
        ):
            refused = requests.get(base + path, headers=headers, allow_redirects=False, timeout=10)
            assert refused.status_code == 401, (path, headers)
            assert refused.text == "401 Unauthorized\n" and "Set-Cookie" not in refused.headers
    wrong = requests.get(f"{base}/?token=wrong", allow_redirects=False, timeout=10)
    assert wrong.status_code == 401 and "Set-Cookie" not in wrong.headers
    for action in ("steer", "cancel", "fork", "delete"):
        assert requests.post(f"{base}/{action}", data={"id": "x"}, timeout=10).status_code == 401
    assert get(f"{base}/").status_code == 200


def test_the_token_in_the_address_sets_a_strict_cookie_and_leaves_the_address(base: str) -> None:
    browser = requests.Session()
    opened = browser.get(f"{base}/?state=idle&token={TOKEN}", allow_redirects=False, timeout=10)
    assert opened.status_code == 303 and opened.headers["Location"] == "/?state=idle"
    cookie = opened.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie and TOKEN not in cookie
    assert browser.get(f"{base}/", allow_redirects=False, timeout=10).status_code == 200
    assert browser.get(f"{base}/static/console.css", timeout=10).status_code == 200
    elsewhere = requests.get(f"{base}//evil.example/?token={TOKEN}", allow_redirects=False, timeout=10)
    assert elsewhere.headers["Location"] == "/evil.example/"  # never //evil.example: no open redirect


def test_every_response_carries_the_security_headers(base: str, store: sqlite.SQLiteStore) -> None:
    session_id = hostile(store)
    responses = [
        requests.get(f"{base}/", timeout=10),
        get(f"{base}/"),
        get(f"{base}/session?id={quote(session_id, safe='')}"),
        get(f"{base}/session?id=missing"),
        get(f"{base}/static/console.js"),
    ]
    csp = responses[0].headers["Content-Security-Policy"]
    for part in ("default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:"):
        assert part in csp
    assert "form-action 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe" not in csp
    for response in responses:
        for name, value in SECURITY_HEADERS:
            assert response.headers[name] == value
    assert responses[3].status_code == 404
    assert responses[4].headers["Content-Type"].startswith("text/javascript")


def test_the_default_address_is_loopback() -> None:
    from agentsessions.cli import parser
    from agentsessions.console._serve import DEFAULT_BIND, parse_bind

    assert parser().parse_args(["console"]).bind == DEFAULT_BIND
    assert parse_bind(DEFAULT_BIND).loopback and parse_bind("[::1]:0").loopback
    assert not parse_bind("0.0.0.0:80").loopback
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_bind("8700")


def test_a_wildcard_bind_prints_addresses_others_can_open(tmp_path: Path) -> None:
    from agentsessions.console._serve import Bind, hosts_to_open

    sqlite.open(tmp_path / "console.db").close()
    url = f"sqlite://{tmp_path / 'console.db'}"
    command = [sys.executable, "-m", "agentsessions", "console", "--store", url, "--bind", "0.0.0.0:0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            process.stdout.readline()  # the store
            lines = [process.stdout.readline() for _ in hosts_to_open(Bind("0.0.0.0", 0))]
            # Each address (the name's resolution is the network's business) opens the console.
            for link in [line.split()[-1] for line in lines[1:]]:
                opened = requests.Session().get(link, timeout=10)
                assert opened.status_code == 200 and "Sessions" in opened.text, link
        finally:
            process.terminate()
            _, errors = process.communicate(timeout=10)
    assert lines[0].startswith("open http://") and all(line.startswith("  or http://") for line in lines[1:])
    links = [line.split()[-1] for line in lines]
    hosts = [urlsplit(link).hostname for link in links]
    assert "0.0.0.0" not in hosts and hosts[0] == socket.gethostname()
    assert len({parse_qs(urlsplit(link).query)["token"][0] for link in links}) == 1
    assert "beyond this machine, over plain HTTP" in errors


# --- What a page may contain --------------------------------------------------------------


def test_a_transcript_full_of_markup_stays_text(base: str, store: sqlite.SQLiteStore) -> None:
    session_id = hostile(store)
    page = get(f"{base}/session?id={quote(session_id, safe='')}").text
    listing = get(f"{base}/").text
    for text in (page, listing):
        assert "<script>alert" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
        # The only scripts are the console's own file; no inline script or style anywhere.
        assert re.findall(r"<script[^>]*>", text) == ['<script src="/static/console.js" defer>']
        assert " style=" not in text and "<style" not in text and " on" not in re.sub(r">[^<]*<", "><", text)
    assert page.count("&lt;script&gt;") >= 9  # text, thinking, tool name and input, result, doc, raw, steer, id
    assert "<details" in page and "thought &lt;script&gt;" in page  # thinking folded
    assert 'class="tool-result error"' in page and "redacted thinking (6 characters" in page
    assert f'src="data:image/png;base64,{PNG}"' in page  # an image/* with base64 data: shown
    assert "data:text/html" not in page and "javascript:" not in re.sub(r"<code>[^<]*</code>", "", page)
    assert '<ol class="steers"><li>steer &lt;script&gt;alert(1)&lt;/script&gt;</li></ol>' in page


def test_the_script_polls_for_new_messages(base: str, store: sqlite.SQLiteStore) -> None:
    store.save("grows", [Message.user("one")])
    page = get(f"{base}/session?id=grows").text
    version = re.search(r'data-version="([^"]+)"', page)
    assert version and 'data-length="1"' in page
    same = get(f"{base}/session/poll?id=grows&from=1&v={quote(version.group(1))}").json()
    assert "messages" not in same and same["gone"] is False and "idle" in same["status"]
    store.save("grows", [Message.user("one"), Message.assistant(f"two {EVIL}")])
    grown = get(f"{base}/session/poll?id=grows&from=1&v={quote(version.group(1))}").json()
    assert grown["start"] == 0 and grown["length"] == 2 and 'id="m1"' in grown["messages"]
    assert "two &lt;script&gt;" in grown["messages"] and EVIL not in grown["messages"]
    store.delete("grows")
    assert get(f"{base}/session/poll?id=grows&from=2&v=x").json()["gone"] is True


@pytest.mark.server
def test_no_store_password_on_any_page(tmp_path: Path) -> None:
    """The command over PostgreSQL with a password in the URL: its output and pages never show it."""
    from tests.support.backends import scratch_postgres

    secret = "Hunter2-S3cr3t-console"
    with require_server("PostgreSQL", lambda: scratch_postgres(POSTGRES_DSN)) as opener:
        schema = opener.args[1]  # type: ignore[attr-defined]
        url = f"postgresql://postgres:{secret}@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
        command = [sys.executable, "-m", "agentsessions", "console", "--store", url, "--bind", "127.0.0.1:0"]
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
            try:
                assert process.stdout is not None
                shown, address = process.stdout.readline(), process.stdout.readline()
                assert secret not in shown and "postgres:***@127.0.0.1" in shown, shown
                link = address.split()[-1]
                assert urlsplit(link).hostname == "127.0.0.1"
                token = parse_qs(urlsplit(link).query)["token"][0]
                assert len(token) >= 40
                browser = requests.Session()
                pages = [browser.get(link, timeout=10), browser.get(link.split("?")[0] + "delete?id=x", timeout=10)]
                assert pages[0].status_code == 200 and "Sessions" in pages[0].text
                assert all(secret not in page.text for page in pages)
            finally:
                process.terminate()
                _, errors = process.communicate(timeout=10)
        assert secret not in errors


# --- The list ---------------------------------------------------------------------------------


def test_the_list_pages_through_every_session_once_newest_first(base: str, store: sqlite.SQLiteStore) -> None:
    for i in range(120):
        store.save(f"s{i:03}", [Message.user(f"m{i}")])
    seen: list[str] = []
    url: str | None = f"{base}/"
    while url is not None:
        page = get(url).text
        seen += re.findall(r'<a href="/session\?id=([^"]+)">', page)
        found = re.search(r'<a class="next" href="([^"]+)">', page)
        url = base + found.group(1).replace("&amp;", "&") if found else None
    assert seen == [info.id for info in store.sessions()] and len(set(seen)) == 120
    assert seen[0] == "s119" and seen[-1] == "s000"
    assert 'all <span class="count">120</span>' in get(f"{base}/").text


def test_the_list_filters_by_state(base: str, store: sqlite.SQLiteStore) -> None:
    store.save("idle-one", [Message.user("x")])
    session = agent.open("finished-one", store)
    spec = agent.Spec(pattern=agent.Pattern.REACT, max_steps=4, session=session)
    agent.Runner().run(spec, [Message.user("hi")], ScriptedEndpoint([Message.assistant("hello")]))
    finished = get(f"{base}/?state=finished").text
    assert "finished-one" in finished and "idle-one" not in finished
    both = get(f"{base}/?state=finished&state=idle").text
    assert "finished-one" in both and "idle-one" in both
    assert 'finished <span class="count">1</span>' in both
    assert get(f"{base}/?state=bogus").status_code == 400


def test_the_list_filters_by_metadata_and_keeps_the_filter_across_states_and_pages(
    base: str, store: sqlite.SQLiteStore
) -> None:
    for i in range(120):
        store.save(f"u{i:03}", [Message.user(f"m{i}")])
        store.set_metadata(f"u{i:03}", {"user": "42" if i % 2 else "7"})
    store.save("other", [Message.user("x")])
    seen: list[str] = []
    url: str | None = f"{base}/?metadata=user%3D42"
    while url is not None:
        page = get(url).text
        seen += re.findall(r'<a href="/session\?id=([^"]+)">', page)
        found = re.search(r'<a class="next" href="([^"]+)">', page)
        url = base + found.group(1).replace("&amp;", "&") if found else None
    assert seen == [f"u{i:03}" for i in range(119, 0, -2)]  # 60 sessions over two pages, newest first
    first = get(f"{base}/?metadata=user%3D42").text
    assert 'href="/?state=idle&amp;metadata=user%3D42"' in first  # a state filter keeps the metadata one
    assert 'name="metadata" placeholder="user=42" value="user=42"' in first
    both = get(f"{base}/?metadata=user%3D42&state=idle&metadata=").text  # an emptied box is no filter
    assert "u119" in both and "u118" not in both and "other" not in both
    for bad in ("user", "=42", "user=" + "x" * 300):
        assert get(f"{base}/?metadata={bad}").status_code == 400, bad


# --- Actions ----------------------------------------------------------------------------------


def test_a_post_without_the_csrf_token_or_from_another_site_is_refused(base: str, store: sqlite.SQLiteStore) -> None:
    store.save("target", [Message.user("x")])
    token = csrf(get(f"{base}/session?id=target").text)
    form = {"id": "target", "text": "injected"}
    attempts = [
        ({}, form),
        ({}, {**form, "csrf": "0" * 64}),
        ({"Origin": "http://evil.example"}, {**form, "csrf": token}),
        ({"Origin": "null"}, {**form, "csrf": token}),
        ({"Sec-Fetch-Site": "cross-site"}, {**form, "csrf": token}),
        ({"Sec-Fetch-Site": "same-site"}, {**form, "csrf": token}),
    ]
    for headers, data in attempts:
        refused = requests.post(f"{base}/steer", data=data, headers={**AUTH, **headers}, timeout=10)
        assert refused.status_code == 403, headers
    assert store.peek_steers("target") == []
    own = {"Origin": base, "Sec-Fetch-Site": "same-origin"}
    done = requests.post(
        f"{base}/steer", data={**form, "csrf": token}, headers={**AUTH, **own}, allow_redirects=False, timeout=10
    )
    assert done.status_code == 303 and [s.text for s in store.peek_steers("target")] == ["injected"]


def test_a_steer_form_sent_twice_stores_its_steer_once(base: str, store: sqlite.SQLiteStore) -> None:
    store.save("work", [Message.user("a")])
    page = get(f"{base}/session?id=work").text
    found = re.search(r'name="key" value="([^"]+)"', page)
    assert found, page
    key, token = found.group(1), csrf(page)
    for _ in range(2):  # a double click, or a request the browser sends again
        sent = post(base, "steer", "work", token, text="look again", key=key)
        assert sent.status_code == 303 and "notice=steer-waits" in sent.headers["Location"]
    assert [s.text for s in store.peek_steers("work")] == ["look again"]
    reused = post(base, "steer", "work", token, text="something else", key=key)
    assert reused.status_code == 409 and "another text" in reused.text
    assert [s.text for s in store.peek_steers("work")] == ["look again"]
    next_page = get(f"{base}/session?id=work").text
    assert f'value="{key}"' not in next_page  # each page its own key: its form is a new steer


def test_steer_cancel_fork_and_delete_go_through_the_store(base: str, store: sqlite.SQLiteStore) -> None:
    store.save("work", [Message.user("a"), Message.assistant("b"), Message.user("c")])
    token = csrf(get(f"{base}/session?id=work").text)
    steered = post(base, "steer", "work", text="look again")
    assert steered.status_code == 303 and "notice=steer-waits" in steered.headers["Location"]
    assert [s.text for s in store.peek_steers("work")] == ["look again"]
    cancelled = post(base, "cancel", "work")
    assert "notice=no-run" in cancelled.headers["Location"]
    assert "No live run holds this session" in get(base + cancelled.headers["Location"].removeprefix("")).text
    forked = post(base, "fork", "work", new="work-2", at="2")
    assert forked.headers["Location"] == "/session?id=work-2&notice=forked"
    assert store.messages("work-2") == store.messages("work")[:2]
    again = post(base, "fork", "work", new="work-2", at="1")
    assert again.status_code == 409 and "work-2" in again.text
    assert post(base, "fork", "work", new="w3", at="9").status_code == 400
    confirm = get(f"{base}/delete?id=work")
    assert confirm.status_code == 200 and "cannot be undone" in confirm.text and store.info("work").length == 3
    deleted = post(base, "delete", "work")
    assert deleted.headers["Location"] == "/?notice=deleted" and store.info("work").length == 0
    assert post(base, "delete", "work-2").status_code == 303
    assert post(base, "steer", "missing", token, text="x").status_code == 404
    assert store.peek_steers("missing") == []
    assert get(f"{base}/session?id=missing").status_code == 404


def test_mounted_under_a_prefix_links_and_cookie_follow_it(store: sqlite.SQLiteStore) -> None:
    store.save("p", [Message.user("x")])
    with served(store, prefix="/ops/console") as base:
        opened = requests.get(f"{base}/?token={TOKEN}", allow_redirects=False, timeout=10)
        assert opened.headers["Location"] == "/ops/console/" and "Path=/ops/console;" in opened.headers["Set-Cookie"]
        page = get(f"{base}/").text
        assert 'href="/ops/console/session?id=p"' in page and 'src="/ops/console/static/console.js"' in page
        form = get(f"{base}/session?id=p").text
        assert 'action="/ops/console/steer"' in form


def test_any_session_id_round_trips_through_links_and_forms(base: str, store: sqlite.SQLiteStore) -> None:
    odd = "support/ünïcode 🙂?&id=other#x"
    store.save(odd, [Message.user("x")])
    listing = get(f"{base}/").text
    link = re.search(r'<a href="(/session\?id=[^"]+)">', listing)
    assert link and get(base + link.group(1).replace("&amp;", "&")).status_code == 200
    steered = post(base, "steer", odd, text="hello")
    assert steered.status_code == 303 and [s.text for s in store.peek_steers(odd)] == ["hello"]
    assert post(base, "steer", odd, text="   ").status_code == 400
    assert get(base + steered.headers["Location"]).status_code == 200


# --- What the session page offers, as the session changes ------------------------------------


def test_waiting_steers_are_listed_in_order_by_their_text_not_by_store_numbers(
    base: str, store: sqlite.SQLiteStore
) -> None:
    store.save("queue", [Message.user("a")])
    for text in ("first", "second"):
        store.add_steer("queue", text)
    for status in (
        get(f"{base}/session?id=queue").text,
        get(f"{base}/session/poll?id=queue&from=1&v=x").json()["status"],
    ):
        assert '<ol class="steers"><li>first</li><li>second</li></ol>' in status
        assert not re.search(r"\[\d+\]", status)  # no store sequence number anywhere


def test_cancel_is_offered_only_while_a_run_holds_the_session(base: str, store: sqlite.SQLiteStore) -> None:
    store.save("ended", [Message.user("a"), Message.assistant("b")])
    assert '<form method="post" action="/cancel" id="cancel" hidden>' in get(f"{base}/session?id=ended").text
    claim = store.claim("held", replica="replica-a", lease=30)
    page = get(f"{base}/session?id=held").text
    assert '<form method="post" action="/cancel" id="cancel">' in page
    assert "<dt>now</dt>" in page  # what the run is doing, while one holds it
    assert get(f"{base}/session/poll?id=held&from=0&v=x").json()["state"] == "running"
    store.save_run(claim, [Message.user("a")], end=agent.RunState.FINISHED)
    assert get(f"{base}/session/poll?id=held&from=0&v=x").json()["state"] == "finished"
    assert '<form method="post" action="/cancel" id="cancel" hidden>' in get(f"{base}/session?id=held").text


def test_a_journal_call_in_the_last_message_is_marked_as_possibly_under_way(
    base: str, store: sqlite.SQLiteStore
) -> None:
    doubt = Content.tool_result("c2", IN_DOUBT, is_error=True)
    calls = Message(Role.ASSISTANT, (Content.tool_use("c1", "fetch", "{}"), Content.tool_use("c2", "send", "{}")))
    store.save("journal", [Message.user("go"), calls, Message(Role.USER, (Content.tool_result("c1", "ok"), doubt))])
    page = get(f"{base}/session?id=journal").text
    (marked,) = re.findall(r'<div class="tool-result error in-doubt" data-tool="([^"]*)">', page)
    assert marked == "send"
    assert "send is running; its result shows here when it returns" in page  # shown while a run holds it
    assert 'data-state="idle"' in page  # and the stylesheet shows the in-doubt side instead
    # Once the transcript moves on, the mark is a call in doubt, never one under way.
    store.save("journal", [*store.messages("journal"), Message.assistant("sent, maybe")])
    assert "in-doubt" not in get(f"{base}/session?id=journal").text


# --- Approvals ----------------------------------------------------------------------------------


def test_a_waiting_session_shows_its_calls_and_the_decisions_go_through_the_store(
    base: str, store: sqlite.SQLiteStore
) -> None:
    wait = Waiting(store, "tidy", first=f"a{EVIL}.txt")
    page = get(f"{base}/session?id=tidy").text
    panel = page.split('<div id="approvals">')[1].split('<section class="panel"><h2>Steer')[0]
    assert panel.count('<button type="submit" name="do" value="approve">') == 2
    assert panel.count('<button type="submit" name="do" value="reject" class="danger">') == 2
    assert EVIL not in page and "a&lt;script&gt;" in panel  # the model's input is text, in a form too
    assert '<dt>approvals</dt><dd><span class="pending-approvals">2 pending</span></dd>' in page
    token = csrf(page)
    seen = json.dumps({"path": f"a{EVIL}.txt"})
    approved = post(base, "approve", "tidy", token, call="c1", seen=seen, by="ann")
    assert approved.status_code == 303 and approved.headers["Location"] == "/session?id=tidy&notice=approved"
    assert store.info("tidy").pending_approvals == 1
    again = post(base, "approve", "tidy", token, call="c1", seen=seen, by="ann")  # a resent form: no change
    assert again.status_code == 303
    rejected = post(base, "reject", "tidy", token, call="c2", reason="keep <b>", by="bob")
    assert rejected.status_code == 303 and "notice=rejected" in rejected.headers["Location"]
    calls = {call.call_id: call for call in store.approvals("tidy")}
    assert (calls["c1"].decision, calls["c1"].by) == ("approved", "ann")
    assert (calls["c2"].decision, calls["c2"].reason, calls["c2"].by) == ("rejected", "keep <b>", "bob")
    shown = get(f"{base}/session?id=tidy&notice=rejected").text
    assert "the model reads the reason" in shown and 'value="approve"' not in shown  # nothing left to decide
    assert "approved by ann" in shown and "rejected by bob" in shown and "keep &lt;b&gt;" in shown
    read = wait.resume()
    assert wait.ran == [f"a{EVIL}.txt"]
    answered = {c.tool_use_id: c for c in read[0].messages[-1].content}
    assert answered["c2"].is_error and "keep <b>" in answered["c2"].text
    assert 'value="approve"' not in get(f"{base}/session?id=tidy").text  # the wait is over: no panel


def test_the_poll_sends_the_approvals_panel_when_the_wait_changed(base: str, store: sqlite.SQLiteStore) -> None:
    Waiting(store, "tidy")
    first = get(f"{base}/session/poll?id=tidy&from=0&v=x&a=").json()
    assert first["state"] == "waiting" and first["approvals"] and first["approvals_html"].count('value="reject"') == 2
    mark = first["approvals"]
    assert "approvals_html" not in get(f"{base}/session/poll?id=tidy&from=0&v=x&a={quote(mark)}").json()
    store.decide("tidy", {"c2": agent.Decision.reject(reason="no", by="elsewhere")})
    changed = get(f"{base}/session/poll?id=tidy&from=0&v=x&a={quote(mark)}").json()
    assert changed["approvals"] != mark and changed["approvals_html"].count('value="reject"') == 1
    store.save("plain", [Message.user("a")])
    assert get(f"{base}/session/poll?id=plain&from=0&v=x&a=").json()["approvals"] == ""


def test_a_call_decided_elsewhere_meanwhile_is_a_conflict_page_showing_the_wait(
    base: str, store: sqlite.SQLiteStore
) -> None:
    Waiting(store, "tidy")
    token = csrf(get(f"{base}/session?id=tidy").text)
    store.decide("tidy", {"c1": agent.Decision.reject(reason="not that one", by="carol")})  # another process
    late = post(base, "approve", "tidy", token, call="c1", seen='{"path": "a.txt"}', by="ann")
    assert late.status_code == 409 and "Not recorded" in late.text and "Traceback" not in late.text
    assert "rejected by carol" in late.text and "not that one" in late.text and "waiting" in late.text
    assert "c1" in late.text and 'href="/session?id=tidy"' in late.text  # the way back to the page
    assert store.approvals("tidy")[0].decision == "rejected"
    changed = post(base, "reject", "tidy", token, call="c2", seen='{"path": "elsewhere"}')
    assert changed.status_code == 409 and "another input than the page showed" in changed.text
    unknown = post(base, "approve", "tidy", token, call="c9")
    assert unknown.status_code == 409 and "Not recorded" in unknown.text
    assert store.info("tidy").pending_approvals == 1  # c2: none of the refused forms decided it
    refused = requests.post(
        f"{base}/approve", data={"id": "tidy", "call": "c2"}, headers=AUTH, allow_redirects=False, timeout=10
    )
    assert refused.status_code == 403 and store.info("tidy").pending_approvals == 1
    store.save("plain", [Message.user("a")])
    idle = post(base, "approve", "plain", token, call="c1")
    assert idle.status_code == 409 and "idle" in idle.text


def test_the_list_filters_waiting_sessions_and_shows_their_pending_approvals(
    base: str, store: sqlite.SQLiteStore
) -> None:
    Waiting(store, "tidy")
    store.save("plain", [Message.user("a")])
    listed = get(f"{base}/?state=waiting").text
    assert "tidy" in listed and "plain" not in listed
    assert '<span class="pending-approvals">2 pending</span>' in listed
    assert 'waiting <span class="count">1</span>' in listed
    store.decide("tidy", {"c1": agent.Decision.approve()})
    assert '<span class="pending-approvals">1 pending</span>' in get(f"{base}/").text


def test_cancel_on_a_waiting_session_ends_the_wait(base: str, store: sqlite.SQLiteStore) -> None:
    wait = Waiting(store, "tidy")
    page = get(f"{base}/session?id=tidy").text
    assert '<button type="submit" name="do" value="end-wait" class="danger">' in page
    ended = post(base, "cancel", "tidy", csrf(page))
    assert ended.status_code == 303 and "notice=wait-ended" in ended.headers["Location"]
    assert "The wait ended" in get(base + ended.headers["Location"]).text
    assert store.info("tidy").state is agent.RunState.CANCELLED and wait.ran == []
    answered = [c for c in store.messages("tidy")[-1].content if c.type is ContentType.TOOL_RESULT]
    assert [(c.tool_use_id, c.is_error) for c in answered] == [("c1", True), ("c2", True)]
    assert "notice=no-run" in post(base, "cancel", "tidy", csrf(page)).headers["Location"]  # nothing left to end


def test_an_approval_with_an_edited_input_runs_the_edit_and_a_bad_edit_is_refused_naming_the_field(
    base: str, store: sqlite.SQLiteStore
) -> None:
    wait = Waiting(store, "tidy")
    token = csrf(get(f"{base}/session?id=tidy").text)
    seen = '{"path": "a.txt"}'
    wrong = post(base, "approve", "tidy", token, call="c1", seen=seen, input='{"path": 3}')
    assert wrong.status_code == 400 and "path" in wrong.text and 'href="/session?id=tidy"' in wrong.text
    not_json = post(base, "approve", "tidy", token, call="c1", seen=seen, input='{"path": ')
    assert not_json.status_code == 400 and "not valid JSON" in not_json.text
    assert store.info("tidy").pending_approvals == 2  # neither refused edit decided anything
    looked_at = post(base, "approve", "tidy", token, call="c2", seen='{"path": "b.txt"}', input='{"path": "b.txt"}')
    assert looked_at.status_code == 303
    edit = '{\r\n  "path": "a-copy.txt"\r\n}'  # as a browser sends a textarea's line breaks
    approved = post(base, "approve", "tidy", token, call="c1", seen=seen, input=edit, by="ann")
    assert approved.status_code == 303 and "notice=approved" in approved.headers["Location"]
    again = post(base, "approve", "tidy", token, call="c1", seen=seen, input=edit, by="ann")  # a resent form
    assert again.status_code == 303
    calls = {call.call_id: call for call in store.approvals("tidy")}
    assert (calls["c1"].input, calls["c1"].original_input) == ('{\n  "path": "a-copy.txt"\n}', seen)
    assert (calls["c2"].input, calls["c2"].original_input) == ('{"path": "b.txt"}', None)
    page = get(f"{base}/session?id=tidy").text
    assert "the model asked: <code>{&quot;path&quot;: &quot;a.txt&quot;}</code>" in page
    wait.resume()
    assert wait.ran == ["a-copy.txt", "b.txt"]


def test_the_list_shows_each_sessions_last_words_and_its_page_the_tokens(base: str, store: sqlite.SQLiteStore) -> None:
    reply = agent.ModelResponse(
        Message.assistant("Your order <b>ships</b> tomorrow."), usage=agent.Usage(1200, 80, 3000)
    )
    agent.Runner().run(
        agent.Spec(session=agent.open("order", store)), [Message.user("when?")], ScriptedEndpoint([reply])
    )
    listing = get(f"{base}/").text
    assert '<div class="preview">Your order &lt;b&gt;ships&lt;/b&gt; tomorrow.</div>' in listing
    page = get(f"{base}/session?id=order").text
    assert '<dd class="usage">4,200 in (3,000 from the cache), 80 out</dd>' in page
