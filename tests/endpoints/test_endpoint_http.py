"""What both endpoints share: retries, timeouts, errors, SSE parsing, secrecy of the key, by_name."""

from __future__ import annotations

import logging
import pickle
import re
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
import requests

import agentsessions as agent
from agentsessions import events as ev
from agentsessions.endpoints import AnthropicEndpoint, EndpointError, EndpointTimeoutError, OpenAIEndpoint, by_name
from agentsessions.testing.fakes.chat_completions import Call, FakeChatCompletionsAPI
from agentsessions.testing.fakes.chat_completions import Reply as OpenAIReply
from agentsessions.testing.fakes.messages import FakeMessagesAPI, text
from agentsessions.testing.fakes.messages import Reply as AnthropicReply
from agentsessions.testing.fakes.server import Drop, Fail, FakeServer, RawServer, Stall

KEY = "sk-test-4b1d-6e2f-never-print-me-0a9c"
HI = agent.ModelRequest("", (agent.Message.user("Hi"),))
OK = AnthropicReply([text("ok")])


@pytest.fixture
def fake() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(api_key=KEY) as server:
        yield server


def claude(fake: FakeMessagesAPI, **options: Any) -> AnthropicEndpoint:
    """An endpoint on ``fake`` that retries twice (the default), without waiting."""
    return AnthropicEndpoint("claude-test", api_key=KEY, base_url=fake.origin, **{"backoff": 0, **options})


# Retries


def test_overloaded_is_retried_until_it_answers(fake: FakeMessagesAPI) -> None:
    fake.add(Fail(529, "overloaded_error", "Overloaded"), Fail(529, "overloaded_error", "Overloaded"), OK)
    assert claude(fake).complete(HI).message.text == "ok"
    assert fake.attempts == 3


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 529])
def test_each_transient_status_is_retried(fake: FakeMessagesAPI, status: int) -> None:
    fake.add(Fail(status, "api_error", "try again"), OK)
    assert claude(fake).complete(HI).message.text == "ok"


def test_when_retries_run_out_the_last_error_reaches_the_caller_intact(fake: FakeMessagesAPI) -> None:
    fake.add(*[Fail(529, "overloaded_error", "Overloaded")] * 3)
    with pytest.raises(EndpointError) as caught:
        claude(fake).complete(HI)
    assert (caught.value.status, caught.value.type, caught.value.message) == (529, "overloaded_error", "Overloaded")
    assert str(caught.value) == "529 overloaded_error: Overloaded"
    assert fake.attempts == 3


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
def test_client_errors_are_never_retried(fake: FakeMessagesAPI, status: int) -> None:
    fake.add(Fail(status, "invalid_request_error", "no", retry_after="0"), OK)
    with pytest.raises(EndpointError) as caught:
        claude(fake).complete(HI)
    assert caught.value.status == status and fake.attempts == 1


def test_retry_after_is_honoured_up_to_max_retry_wait(fake: FakeMessagesAPI) -> None:
    fake.add(Fail(429, "rate_limit_error", "slow down", retry_after="3600"), OK)
    started = time.monotonic()
    assert claude(fake, max_retry_wait=1).complete(HI).message.text == "ok"
    # backoff is 0, so the wait is Retry-After's, capped at one second.
    assert 1 <= time.monotonic() - started < 5


def test_a_dropped_connection_is_retried(fake: FakeMessagesAPI) -> None:
    fake.add(Drop(), OK)
    assert claude(fake).complete(HI).message.text == "ok"
    assert fake.attempts == 2


def test_a_connection_that_keeps_dropping_is_an_error_without_status(fake: FakeMessagesAPI) -> None:
    fake.add(Drop(), Drop())
    with pytest.raises(EndpointError) as caught:
        claude(fake, max_retries=1).complete(HI)
    assert caught.value.status == 0
    assert isinstance(caught.value.__cause__, requests.RequestException)


# Timeouts and unreachable servers


def test_a_post_slower_than_the_read_timeout_is_not_sent_again(fake: FakeMessagesAPI) -> None:
    # The request went out: the provider may be doing, and billing, the work already.
    fake.add(Stall(5), OK)
    with pytest.raises(EndpointTimeoutError, match="timed out") as caught:
        claude(fake, timeout=(1, 0.2)).complete(HI)
    assert caught.value.status == 0 and isinstance(caught.value.__cause__, requests.ReadTimeout)
    assert fake.attempts == 1


def test_read_timeout_retries_are_opt_in(fake: FakeMessagesAPI) -> None:
    fake.add(Stall(5), Stall(5), OK)
    assert claude(fake, timeout=(1, 0.2), retry_read_timeouts=True).complete(HI).message.text == "ok"
    assert fake.attempts == 3
    fake.add(Stall(5), Stall(5))
    with pytest.raises(EndpointTimeoutError):
        claude(fake, timeout=(1, 0.2), retry_read_timeouts=True, max_retries=1).complete(HI)
    assert fake.attempts == 5


def test_what_is_safe_is_still_retried_without_the_option(fake: FakeMessagesAPI) -> None:
    fake.add(Drop(), Fail(529, "overloaded_error", "Overloaded", retry_after="0"), OK)
    assert claude(fake).complete(HI).message.text == "ok"
    assert fake.attempts == 3


def test_a_stream_that_stalls_times_out(fake: FakeMessagesAPI) -> None:
    fake.add(Stall(5))
    with pytest.raises(EndpointError, match="timed out"):
        claude(fake, timeout=0.2, max_retries=0, stream=True).complete(HI)


def test_nobody_listening_is_an_error_without_status() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = AnthropicEndpoint("claude-test", api_key=KEY, base_url=f"http://127.0.0.1:{port}", max_retries=0)
    with pytest.raises(EndpointError) as caught:
        endpoint.complete(HI)
    assert caught.value.status == 0 and f"127.0.0.1:{port}/v1/messages" in caught.value.message
    assert isinstance(caught.value.__cause__, requests.ConnectionError)


@pytest.mark.parametrize("timeout", [None, 0, -1, float("inf"), (1, None), (1, 2, 3), "5"])
def test_timeouts_must_be_finite(timeout: object) -> None:
    with pytest.raises(ValueError, match="timeout"):
        AnthropicEndpoint("claude-test", api_key=KEY, timeout=timeout)  # type: ignore[arg-type]


# Error bodies that are not the provider's JSON


def raw(status: int, body: bytes, headers: dict[str, str] | None = None) -> RawServer:
    return RawServer(status, body, headers, path="/v1/chat/completions")


@pytest.mark.parametrize(
    ("status", "body", "message", "kind"),
    [
        (502, b"<html><body>Bad gateway</body></html>", "<html><body>Bad gateway</body></html>", ""),
        (404, b'{"error": "model \'qwen\' not found"}', "model 'qwen' not found", ""),
        (400, b'{"object": "error", "message": "too long", "type": "BadRequestError"}', "too long", "BadRequestError"),
        (422, b'{"detail": "nope"}', '{"detail": "nope"}', ""),
    ],
)
def test_compatible_servers_errors_keep_their_message(status: int, body: bytes, message: str, kind: str) -> None:
    with raw(status, body) as server:
        endpoint = OpenAIEndpoint("qwen", api_key=KEY, base_url=server.origin + "/v1", max_retries=0)
        with pytest.raises(EndpointError) as caught:
            endpoint.complete(HI)
    assert (caught.value.status, caught.value.message, caught.value.type) == (status, message, kind)


def test_an_answer_that_is_not_the_provider_s_format_is_an_endpoint_error() -> None:
    with raw(200, b'{"choices": []}') as server, pytest.raises(EndpointError, match="cannot read"):
        OpenAIEndpoint("qwen", api_key=KEY, base_url=server.origin + "/v1").complete(HI)


def test_an_answer_without_a_finish_reason_has_no_stop_reason() -> None:
    body = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}'
    with raw(200, body) as server:
        response = OpenAIEndpoint("qwen", api_key=KEY, base_url=server.origin + "/v1").complete(HI)
    assert (response.message.text, response.stop_reason) == ("hi", "")


def test_a_redirect_is_reported_not_followed(fake: FakeMessagesAPI) -> None:
    # Following it would carry x-api-key to another host (requests strips only Authorization).
    with (
        RawServer(307, b"", {"location": fake.origin + "/v1/messages"}, path="/v1/messages") as redirecting,
        pytest.raises(EndpointError, match=re.escape(f"redirected to {fake.origin}/v1")) as caught,
    ):
        AnthropicEndpoint("m", api_key=KEY, base_url=redirecting.origin).complete(HI)
    assert caught.value.status == 307 and fake.attempts == 0


# Sessions


def test_a_callers_session_is_used_as_it_is_and_left_open(fake: FakeMessagesAPI) -> None:
    session = requests.Session()
    fake.add(Fail(529, "overloaded_error", "Overloaded"), OK)
    with claude(fake, session=session) as endpoint, pytest.raises(EndpointError):
        endpoint.complete(HI)  # the caller's session has no retrying adapter: one attempt
    assert fake.attempts == 1
    assert endpoint.complete(HI).message.text == "ok"  # close() left the caller's session usable


# The key stays secret


def run_everything(make: Callable[[str], agent.Endpoint], fake: FakeServer, replies: list[object]) -> list[str]:
    """A full run, a provider error and a network error; everything they show, as text."""
    seen: list[str] = []
    recorded: list[ev.Event] = []

    @agent.tool
    def echo(word: str) -> str:
        """Echo a word."""
        return word

    fake.add(*replies, Fail(500, "api_error", "boom"), Fail(500, "api_error", "boom"), Fail(500, "api_error", "boom"))
    endpoint = make(fake.origin)
    result = agent.Runner().run(agent.Spec(tools=[echo]), [agent.Message.user("hi")], endpoint, recorded.append)
    seen += [repr(endpoint), str(endpoint), repr(result), *map(repr, recorded)]
    for broken in (endpoint, make("http://127.0.0.1:9")):
        try:
            agent.Runner().run(agent.Spec(), [agent.Message.user("hi")], broken, recorded.append)
        except agent.RunError as error:
            seen += ["".join(traceback.format_exception(error)), repr(error), repr(error.__cause__)]
    seen += map(repr, recorded)
    return seen


@attrs.frozen
class Provider:
    server: type[FakeServer]
    make: Callable[[str], agent.Endpoint]
    replies: list[object]


PROVIDERS = {
    "anthropic": Provider(
        FakeMessagesAPI,
        lambda origin: AnthropicEndpoint("m", api_key=KEY, base_url=origin, stream=True, backoff=0),
        [
            AnthropicReply([{"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"word": "x"}}]),
            AnthropicReply([text("done")]),
        ],
    ),
    "openai": Provider(
        FakeChatCompletionsAPI,
        lambda origin: OpenAIEndpoint("m", api_key=KEY, base_url=origin + "/v1", stream=True, backoff=0),
        [OpenAIReply(None, [Call("call_1", "echo", '{"word": "x"}')]), OpenAIReply("done")],
    ),
}


@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_the_key_appears_in_no_event_log_repr_or_error(provider: Provider, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # urllib3's connection and retry lines included
    with provider.server(api_key=KEY) as fake:
        seen = run_everything(provider.make, fake, provider.replies)
    assert KEY in str(fake.requests[0].headers)  # it was sent, in its header
    logged = [caplog.text, *(str(record.__dict__) for record in caplog.records)]
    assert any("urllib3" in record.name for record in caplog.records)
    assert any("agentsessions.endpoints" in record.name for record in caplog.records)
    for text_ in [*seen, *logged]:
        assert KEY not in text_


BAD_KEYS = {
    "newline at the end": KEY + "\n",
    "CRLF at the end": KEY + "\r\n",
    "space at the start": " " + KEY,
    "tab inside": KEY[:10] + "\t" + KEY[10:],
    "DEL inside": KEY[:10] + "\x7f" + KEY[10:],
    "escape inside": KEY[:10] + "\x1b" + KEY[10:],
    "non-ASCII inside": KEY[:10] + "é" + KEY[10:],
}


def shows_the_key(text: str) -> bool:
    """Whether ``text`` holds the key or any six characters of it in a row."""
    return any(KEY[i : i + 6] in text for i in range(len(KEY) - 5))


@pytest.mark.parametrize("bad", BAD_KEYS.values(), ids=BAD_KEYS.keys())
@pytest.mark.parametrize(
    ("endpoint", "variable"), [(AnthropicEndpoint, "ANTHROPIC_API_KEY"), (OpenAIEndpoint, "OPENAI_API_KEY")]
)
def test_a_key_with_whitespace_or_control_characters_is_refused_by_name(
    endpoint: type[agent.Endpoint], variable: str, bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, bad)
    with pytest.raises(ValueError, match=f"^the environment variable {variable} holds an API key with ") as caught:
        endpoint("m")  # type: ignore[call-arg]
    from_environment = caught.value
    with pytest.raises(ValueError, match=r"^api_key holds an API key with ") as caught:
        endpoint("m", api_key=bad)  # type: ignore[call-arg]
    for error in (from_environment, caught.value):
        shown = "".join(traceback.format_exception(error)) + repr(error) + repr(error.args)
        assert not shows_the_key(shown), shown
    assert not shows_the_key("oops: api_key holds an API key with whitespace at its end")  # the check can fail


def test_a_header_value_that_requests_would_quote_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'x-portkey-api-key'") as caught:
        AnthropicEndpoint("m", api_key=KEY, headers={"x-portkey-api-key": KEY + "\n"})
    assert not shows_the_key("".join(traceback.format_exception(caught.value)))


def test_the_key_cannot_be_pickled_or_printed() -> None:
    endpoint = AnthropicEndpoint("m", api_key=KEY)
    assert KEY not in repr(vars(endpoint))
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(endpoint)


# by_name and the lazy imports


def test_by_name_builds_the_endpoint_it_names() -> None:
    claude = by_name("anthropic:claude-sonnet-4-5", api_key=KEY)
    assert isinstance(claude, AnthropicEndpoint) and claude.model == "claude-sonnet-4-5"
    local = by_name("openai:qwen3:8b", api_key=KEY, base_url="http://127.0.0.1:11434/v1")
    assert isinstance(local, OpenAIEndpoint) and local.model == "qwen3:8b"
    assert local.base_url == "http://127.0.0.1:11434/v1"


@pytest.mark.parametrize("name", ["claude-sonnet-4-5", "anthropic:", "gemini:pro", ":gpt", ""])
def test_by_name_refuses_what_it_does_not_know(name: str) -> None:
    with pytest.raises(ValueError, match="'anthropic:MODEL', 'openai:MODEL'"):
        by_name(name)


def test_importing_the_endpoints_package_does_not_import_requests() -> None:
    code = (
        "import sys, agentsessions, agentsessions.endpoints as e; assert 'requests' not in sys.modules; "
        "e.ScriptedEndpoint; e.EndpointError; e.OpenAIEndpoint; assert 'requests' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = agent.endpoints.Nope
