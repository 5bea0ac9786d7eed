"""The EndpointError tree: which branch each failure of a real HTTP exchange lands in, and what it carries."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import requests

import agentsessions as agent
import agentsessions.endpoints as endpoints
from agentsessions.endpoints import (
    AnthropicEndpoint,
    EndpointDecodingError,
    EndpointError,
    EndpointStatusError,
    EndpointTimeoutError,
    EndpointTransportError,
    OpenAIEndpoint,
)
from agentsessions.testing.fakes.chat_completions import FakeChatCompletionsAPI
from agentsessions.testing.fakes.chat_completions import Reply as OpenAIReply
from agentsessions.testing.fakes.messages import FakeMessagesAPI, text
from agentsessions.testing.fakes.messages import Reply as AnthropicReply
from agentsessions.testing.fakes.server import Drop, Fail, RawServer, Stall

KEY = "sk-test-errors-1f2e3d4c"
HI = agent.ModelRequest("", (agent.Message.user("Hi"),))


@pytest.fixture
def fake() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(api_key=KEY) as server:
        yield server


def claude(origin: str, **options: Any) -> AnthropicEndpoint:
    return AnthropicEndpoint("claude-test", api_key=KEY, base_url=origin, **{"backoff": 0, **options})


def test_the_tree_is_httpx_like_and_all_of_it_is_endpoint_error() -> None:
    assert issubclass(EndpointTransportError, ConnectionError)
    assert issubclass(EndpointTimeoutError, EndpointTransportError) and issubclass(EndpointTimeoutError, TimeoutError)
    for kind in (EndpointTransportError, EndpointTimeoutError, EndpointStatusError, EndpointDecodingError):
        assert issubclass(kind, EndpointError) and issubclass(kind, agent.AgentSessionsError)
        assert getattr(agent, kind.__name__) is kind is getattr(endpoints, kind.__name__)
        assert kind.__name__ in agent.__all__ and kind.__name__ in endpoints.__all__
    assert not issubclass(EndpointStatusError, OSError) and not issubclass(EndpointDecodingError, OSError)


def test_nobody_listening_is_a_transport_error_and_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ConnectionError) as caught:
        claude(f"http://127.0.0.1:{port}", max_retries=0).complete(HI)
    assert type(caught.value) is EndpointTransportError and caught.value.status == 0
    assert isinstance(caught.value.__cause__, requests.ConnectionError)


def test_a_run_against_a_dead_port_fails_with_one_readable_line() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(agent.RunError) as caught:
        agent.Runner().run(agent.Spec(), [agent.Message.user("hi")], claude(f"http://127.0.0.1:{port}", max_retries=0))
    # Not requests' wrapper quoting urllib3's quoting the socket's, each as a repr.
    assert str(caught.value) == (
        f"the run failed in step 1: EndpointTransportError: the request to http://127.0.0.1:{port}/v1/messages "
        "failed: the connection was refused: nothing listens there (check base_url, and that the server is running)"
    )
    assert isinstance(caught.value.__cause__, EndpointTransportError)


def test_a_host_name_that_does_not_resolve_says_so() -> None:
    with pytest.raises(EndpointTransportError) as caught:
        claude("http://no-such-host.invalid", max_retries=0).complete(HI)
    message = str(caught.value)
    assert "the host name does not resolve (" in message and "check base_url" in message, message
    assert "NameResolutionError" not in message and "HTTPConnectionPool" not in message, message


def test_a_connection_that_keeps_dropping_is_a_transport_error(fake: FakeMessagesAPI) -> None:
    fake.add(Drop(), Drop())
    with pytest.raises(EndpointTransportError) as caught:
        claude(fake.origin, max_retries=1).complete(HI)
    assert not isinstance(caught.value, TimeoutError)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_silent_server_is_a_timeout_error(fake: FakeMessagesAPI, stream: bool) -> None:
    fake.add(Stall(5))
    with pytest.raises(TimeoutError) as caught:
        claude(fake.origin, stream=stream, timeout=(1, 0.2)).complete(HI)
    assert isinstance(caught.value, EndpointTimeoutError) and isinstance(caught.value, ConnectionError)


def test_a_stream_cut_short_is_a_transport_error(fake: FakeMessagesAPI) -> None:
    fake.add(AnthropicReply([text("partial answer")], cut_after=4))
    with pytest.raises(EndpointTransportError) as caught:
        claude(fake.origin, stream=True, max_retries=0).complete(HI)
    assert not isinstance(caught.value, TimeoutError) and caught.value.status == 0


def test_anthropics_error_answer_is_a_status_error_with_its_request_id(fake: FakeMessagesAPI) -> None:
    fake.add(*[Fail(529, "overloaded_error", "Overloaded")] * 3)
    with pytest.raises(EndpointStatusError) as caught:
        claude(fake.origin).complete(HI)
    error = caught.value
    assert (error.status, error.type, error.message, error.request_id) == (
        529,
        "overloaded_error",
        "Overloaded",
        "req_fake0003",  # the last attempt's request-id header
    )
    assert str(error) == "529 overloaded_error: Overloaded"


def test_openais_error_answer_carries_its_x_request_id() -> None:
    with FakeChatCompletionsAPI(api_key=KEY) as fake:
        wrong = OpenAIEndpoint("gpt-test", api_key="sk-wrong", base_url=fake.url)
        with pytest.raises(EndpointStatusError) as caught:
            wrong.complete(HI)
    assert (caught.value.status, caught.value.type, caught.value.request_id) == (
        401,
        "invalid_request_error",
        "req_fake0001",
    )


def test_an_error_event_inside_a_stream_is_a_status_error(fake: FakeMessagesAPI) -> None:
    fake.add(AnthropicReply([text("partial answer")], error_after=4))
    with pytest.raises(EndpointStatusError) as caught:
        claude(fake.origin, stream=True).complete(HI)
    error = caught.value
    assert (error.status, error.type, error.request_id) == (200, "overloaded_error", "req_fake0001")


def test_an_error_chunk_inside_an_openai_stream_is_a_status_error() -> None:
    with (
        FakeChatCompletionsAPI([OpenAIReply("partial", error_after=2)], api_key=KEY) as fake,
        pytest.raises(EndpointStatusError) as caught,
    ):
        OpenAIEndpoint("gpt-test", api_key=KEY, base_url=fake.url, stream=True).complete(HI)
    assert (caught.value.type, caught.value.request_id) == ("server_error", "req_fake0001")


def raw_error(status: int, body: bytes, headers: dict[str, str] | None = None) -> EndpointError:
    with RawServer(status, body, headers, path="/v1/messages") as server, pytest.raises(EndpointError) as caught:
        claude(server.origin, max_retries=0).complete(HI)
    return caught.value


def test_a_request_id_only_in_the_error_body_is_found() -> None:
    body = b'{"type": "error", "error": {"type": "not_found_error", "message": "no"}, "request_id": "req_body"}'
    error = raw_error(404, body)
    assert isinstance(error, EndpointStatusError) and error.request_id == "req_body"
    assert raw_error(502, b"<html>Bad gateway</html>").request_id == ""


@pytest.mark.parametrize(
    "body", [b"not json", b"[1, 2]", b'{"content": "not a list of blocks"}', b'{"id": "msg_1"}'], ids=repr
)
def test_a_2xx_answer_that_makes_no_sense_is_a_decoding_error(body: bytes) -> None:
    error = raw_error(200, body, {"request-id": "req_x"})
    assert type(error) is EndpointDecodingError and error.status == 200
    assert "cannot read" in error.message


def test_a_stream_event_that_makes_no_sense_is_a_decoding_error() -> None:
    stream = b"event: message_start\ndata: {not json\n\n"
    headers = {"content-type": "text/event-stream", "request-id": "req_y"}
    with (
        RawServer(200, stream, headers, path="/v1/messages") as server,
        pytest.raises(EndpointDecodingError, match="message_start event whose data is not JSON"),
    ):
        claude(server.origin, stream=True).complete(HI)
