"""A local OpenAI Chat Completions API: the real wire format, the real checks, a scripted model.

    with FakeChatCompletionsAPI([Reply("Hi")], api_key=KEY) as fake:
        endpoint = OpenAIEndpoint("gpt-test", api_key=KEY, base_url=fake.url)

Streamed, a reply goes out as the API's chunks: a first chunk with the role, text
pieces, tool calls by index (id and name first, then argument pieces), a chunk with the
finish reason, a usage chunk with no choices when ``stream_options.include_usage`` is
set, and ``data: [DONE]``. Arguments are strings both ways, never re-serialised.

The checks are the ones the real API makes on what this library sends: a Bearer key
(a wrong one is echoed masked, as OpenAI does), tool messages that answer the
``tool_calls`` of the assistant message before them, every call answered before the
conversation goes on, ``stream_options`` only with ``stream``, one token limit.

``count_tokens=True`` makes ``usage.prompt_tokens`` the fake's own count and
``prompt_tokens_details.cached_tokens`` what the API's automatic prompt cache would read
(see :class:`PrefixCache`). ``context_window=M`` refuses, after every other check, a
request whose prompt counts more than ``M`` tokens, as the API does: HTTP 400,
``invalid_request_error``, ``param: "messages"``, ``code: "context_length_exceeded"``,
``This model's maximum context length is M tokens. However, your messages resulted in N
tokens. Please reduce the length of the messages.`` The count is
:func:`chat_prompt_tokens`: one token per four bytes of the JSON of each tool and each
message, at least one apiece; deterministic, and the same count the usage reports (a
window turns ``count_tokens`` on).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from agentsessions.testing.fakes.prompt_cache import PrefixCache, chat_prompt_tokens
from agentsessions.testing.fakes.server import FAKE_KEY, Fail, FakeServer, Handler, Rejected, pieces

NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using "
    "Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if "
    "you're accessing the API from your browser and are prompted for a username and password. You can "
    "obtain an API key from https://platform.openai.com/account/api-keys."
)
TOOL_WITHOUT_CALL = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
)


@attrs.frozen
class Call:
    """A tool call the scripted model makes; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@attrs.frozen
class Reply:
    """What the scripted model answers; ``cut_after``/``error_after`` break a stream after that many chunks.

    ``model`` is the model the answer names (the one asked for when ``None``).
    """

    content: str | None = None
    tool_calls: Sequence[Call] = ()
    refusal: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 13
    completion_tokens: int = 5
    cached_tokens: int | None = None  # prompt_tokens_details.cached_tokens, when set
    reasoning_content: str | None = None  # as vLLM and DeepSeek send a reasoning model's thoughts
    cut_after: int | None = None
    error_after: int | None = None
    repeat_call_head: bool = False  # send each call's id and name again with every piece, as some servers do
    model: str | None = None


def _invalid(message: str, param: str | None = None) -> Rejected:
    return Rejected(400, "invalid_request_error", message, param)


def mask(key: str) -> str:
    """A key as OpenAI's 401 message shows it: the start, stars, the last four."""
    return key[:3] + "*" * max(len(key) - 7, 0) + key[-4:]


class FakeChatCompletionsAPI(FakeServer):
    """The Chat Completions API under ``url`` (``origin + "/v1"``); see the module docstring."""

    path = "/v1/chat/completions"
    request_id_header = "x-request-id"

    def __init__(
        self,
        script: Sequence[object] = (),
        *,
        api_key: str = FAKE_KEY,
        count_tokens: bool = False,
        context_window: int | None = None,
    ) -> None:
        super().__init__(script, api_key=api_key)
        self.context_window = context_window
        self.cache = PrefixCache() if count_tokens or context_window is not None else None
        self.usages: list[dict[str, Any]] = []  # the usage of each answer, in order

    @property
    def url(self) -> str:
        """The base URL a client is given."""
        return self.origin + "/v1"

    @property
    def base_url(self) -> str:
        """What to give the endpoint as its ``base_url`` (the API's ``/v1``)."""
        return self.url

    def error_body(self, fail: Fail, param: str | None, request_id: str) -> object:
        """``{"error": {"message", "type", "param", "code"}}``."""
        code = fail.code or ("invalid_api_key" if fail.status == 401 and fail.message != NO_KEY else None)
        return {"error": {"message": fail.message, "type": fail.type, "param": param, "code": code}}

    def check_key(self, headers: dict[str, str]) -> None:
        """A Bearer key, this server's: else the API's 401."""
        scheme, _, key = headers.get("authorization", "").partition(" ")
        if scheme != "Bearer" or not key:
            raise Rejected(401, "invalid_request_error", NO_KEY)
        if key != self.api_key:
            raise Rejected(
                401,
                "invalid_request_error",
                f"Incorrect API key provided: {mask(key)}. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
            )

    def check(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        """The real API's refusals, for what a client can get wrong."""
        self.check_key(headers)
        for field, kind in (("model", str), ("messages", list)):
            if not isinstance(body.get(field), kind):
                raise _invalid(f"Missing required parameter: '{field}'.", field)
        if "stream_options" in body and not body.get("stream"):
            raise _invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options")
        if "max_tokens" in body and "max_completion_tokens" in body:
            raise _invalid("max_tokens and max_completion_tokens cannot both be set.", "max_tokens")
        for index, tool in enumerate(body.get("tools", [])):
            if tool.get("type") != "function" or not isinstance(tool.get("function", {}).get("name"), str):
                raise _invalid(f"Missing required parameter: 'tools[{index}].function.name'.", f"tools[{index}]")
        self._check_messages(body["messages"])
        if self.context_window is not None and (size := chat_prompt_tokens(body)) > self.context_window:
            raise Rejected(
                400,
                "invalid_request_error",
                f"This model's maximum context length is {self.context_window} tokens. However, your messages "
                f"resulted in {size} tokens. Please reduce the length of the messages.",
                "messages",
                "context_length_exceeded",
            )

    @staticmethod
    def _check_messages(messages: list[Any]) -> None:
        if not messages:
            raise _invalid("[] is too short - 'messages'", "messages")
        pending: set[str] = set()  # calls of the last assistant message not yet answered
        callable_ids: set[str] = set()
        for index, message in enumerate(messages):
            role = message.get("role")
            if role not in ("system", "developer", "user", "assistant", "tool"):
                raise _invalid(
                    f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
                    "'tool', 'function' and 'developer'.",
                    f"messages[{index}].role",
                )
            if role == "tool":
                if message.get("tool_call_id") not in callable_ids:
                    raise _invalid(TOOL_WITHOUT_CALL, f"messages.[{index}].role")
                if not isinstance(message.get("content"), (str, list)):
                    raise _invalid(f"Invalid type for 'messages[{index}].content'.", f"messages[{index}].content")
                pending.discard(message["tool_call_id"])
                continue
            if pending:
                raise _invalid(
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have response messages: "
                    f"{', '.join(sorted(pending))}",
                    f"messages.[{index}].role",
                )
            FakeChatCompletionsAPI._check_content(index, message)
            calls = (message.get("tool_calls") or []) if role == "assistant" else []
            for call in calls:
                if not isinstance(call.get("function", {}).get("arguments"), str):
                    raise _invalid(f"Invalid type for 'messages[{index}].tool_calls.function.arguments'.")
            pending = callable_ids = {call["id"] for call in calls}

    @staticmethod
    def _check_content(index: int, message: dict[str, Any]) -> None:
        content = message.get("content")
        if content is None and message.get("tool_calls"):
            return
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        # Only a user message takes images and files; every other role takes text parts only.
        allowed = _USER_PARTS if message.get("role") == "user" else {"text": _is_text}
        if not isinstance(parts, list) or any(not allowed.get(p.get("type"), _never)(p) for p in parts):
            raise _invalid(f"Invalid type for 'messages[{index}].content'.", f"messages[{index}].content")

    def reply(self, handler: Handler, body: dict[str, Any], answer: object) -> None:
        """Answer with a chat.completion object, or stream it as chunks."""
        assert isinstance(answer, Reply), f"not an answer this fake knows: {answer!r}"
        finish_reason = answer.finish_reason or ("tool_calls" if answer.tool_calls else "stop")
        prompt, cached = answer.prompt_tokens, answer.cached_tokens
        if self.cache is not None:
            with self._lock:
                prompt, cached = self.cache.account(body)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": answer.completion_tokens,
            "total_tokens": prompt + answer.completion_tokens,
        }
        if cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
        self.usages.append(usage)
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": answer.content, "refusal": answer.refusal}
            if answer.reasoning_content is not None:
                message["reasoning_content"] = answer.reasoning_content
            if answer.tool_calls:
                message["tool_calls"] = [_call(call) for call in answer.tool_calls]
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
            handler.send_json(200, {**_head(body, answer, "chat.completion"), "choices": [choice], "usage": usage})
            return
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        handler.start_stream()
        for number, chunk in enumerate(_chunks(body, answer, finish_reason, usage if with_usage else None)):
            if number == answer.cut_after:
                return self.drop(handler)
            if number == answer.error_after:
                error = {"message": "The server had an error while processing your request.", "type": "server_error"}
                handler.send_event(json.dumps({"error": {**error, "param": None, "code": None}}))
                return handler.end_stream()
            handler.send_event(chunk)
        handler.end_stream()


def _is_text(part: dict[str, Any]) -> bool:
    return isinstance(part.get("text"), str)


def _is_image(part: dict[str, Any]) -> bool:
    url = (part.get("image_url") or {}).get("url")
    return isinstance(url, str) and (url.startswith(("https://", "http://")) or url.startswith("data:image/"))


def _is_file(part: dict[str, Any]) -> bool:
    file = part.get("file") or {}
    return (isinstance(file.get("file_data"), str) and file["file_data"].startswith("data:")) or "file_id" in file


def _never(_: dict[str, Any]) -> bool:
    return False


_USER_PARTS = {"text": _is_text, "image_url": _is_image, "file": _is_file}


def _head(body: dict[str, Any], answer: Reply, kind: str) -> dict[str, Any]:
    return {"id": "chatcmpl-fake", "object": kind, "created": 1700000000, "model": answer.model or body["model"]}


def _call(call: Call) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _chunks(body: dict[str, Any], answer: Reply, finish_reason: str, usage: dict[str, Any] | None) -> Iterator[str]:
    """The ``data:`` payloads of a streamed reply, in the API's order."""
    extra = {"usage": None} if usage is not None else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return json.dumps(
            {**_head(body, answer, "chat.completion.chunk"), "choices": [choice], **extra}, ensure_ascii=False
        )

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in pieces(answer.reasoning_content or ""):
        yield chunk({"reasoning_content": piece})
    for piece in pieces(answer.content or ""):
        yield chunk({"content": piece})
    for piece in pieces(answer.refusal or ""):
        yield chunk({"refusal": piece})
    for index, call in enumerate(answer.tool_calls):
        first = {"index": index, **_call(call)}
        first["function"] = {"name": call.name, "arguments": ""}
        yield chunk({"tool_calls": [first]})
        for piece in pieces(call.arguments, 5):
            head = {"id": call.id, "type": "function"} if answer.repeat_call_head else {}
            function = {"name": call.name, "arguments": piece} if answer.repeat_call_head else {"arguments": piece}
            yield chunk({"tool_calls": [{"index": index, **head, "function": function}]})
    yield chunk({}, finish_reason)
    if usage is not None:
        yield json.dumps({**_head(body, answer, "chat.completion.chunk"), "choices": [], "usage": usage})
    yield "[DONE]"
