"""A local OpenAI Responses API: the real wire format, the real checks, a scripted model.

    with FakeResponsesAPI([Answer("Hi")], api_key=KEY) as fake:
        endpoint = OpenAIResponsesEndpoint("gpt-test", api_key=KEY, base_url=fake.url)

An answer is a response object whose ``output`` holds, in order, a reasoning item (with
``encrypted_content`` when the request's ``include`` asks for it), any extra item, a
``message`` item and ``function_call`` items. Streamed, it goes out as the API's events,
each with its ``event:`` line and ``sequence_number``: ``response.created``,
``response.in_progress``, then per item ``response.output_item.added``, its parts and
deltas (text and arguments in pieces, a reasoning summary's delta), its ``.done`` events
and ``response.output_item.done``, and last ``response.completed`` (or
``response.incomplete``) with the whole response.

The checks are the ones the real API makes on what a stateless client sends (``store:
false``): a Bearer key; user parts are ``input_*`` and assistant parts ``output_text``;
a ``function_call_output`` answers a ``function_call`` sent before it; a reasoning item
comes back with the ``encrypted_content`` it was given (nothing is stored to look it up
by id); and a ``function_call`` this server made after a reasoning item comes back after
that reasoning item, in the same turn of the model, else the API's 400 (``Item 'fc_…' of type
'function_call' was provided without its required 'reasoning' item: 'rs_…'.``).

``count_tokens`` and ``context_window`` work as in Chat Completions' fake, the prompt being
the instructions, tools and input items (:func:`chat_prompt_tokens`; usage as
``input_tokens`` and ``input_tokens_details.cached_tokens``). A prompt over the window is
refused with ``Your input exceeds the context window of this model. Please adjust your input
and try again.`` (``invalid_request_error``, ``code: "context_length_exceeded"``, ``param:
"input"``): whole, as an HTTP 400; streamed, as the API does it, after ``response.created``
and ``response.in_progress``, an ``error`` event holding that error object
(``sequence_number`` 2), then the end of the stream.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from agentsessions.testing.fakes.chat_completions import Call, FakeChatCompletionsAPI
from agentsessions.testing.fakes.prompt_cache import chat_prompt_tokens
from agentsessions.testing.fakes.server import FAKE_KEY, Handler, Rejected, pieces

TOO_LONG = "Your input exceeds the context window of this model. Please adjust your input and try again."
USER_PARTS = frozenset({"input_text", "input_image", "input_file"})
ASSISTANT_PARTS = frozenset({"output_text", "refusal"})


@attrs.frozen
class Answer:
    """What the scripted model answers.

    ``reasoning`` is the summary of a reasoning item that comes first; ``extra`` is another
    output item (a server tool's call) sent as it is. ``incomplete`` is an
    ``incomplete_details.reason``. ``cut_after``, ``error_after`` and ``fail_after`` break a
    stream after that many events: a dropped connection, an ``error`` event, a
    ``response.failed``. ``bare_completed`` sends ``response.completed`` without its output,
    as some compatible servers do. ``phase`` and ``annotations`` go on the message item.
    ``model`` is the model the answer names (the one asked for when ``None``).
    """

    text: str | None = None
    calls: Sequence[Call] = ()
    reasoning: str | None = None
    extra: Mapping[str, Any] | None = None
    refusal: str | None = None
    incomplete: str | None = None
    input_tokens: int = 13
    output_tokens: int = 5
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cut_after: int | None = None
    error_after: int | None = None
    fail_after: int | None = None
    bare_completed: bool = False
    phase: str | None = None
    annotations: Sequence[Mapping[str, Any]] = ()
    model: str | None = None


def invalid(message: str, param: str | None = None) -> Rejected:
    """The API's 400 for a request it refuses."""
    return Rejected(400, "invalid_request_error", message, param)


class FakeResponsesAPI(FakeChatCompletionsAPI):
    """The Responses API under ``url`` (``origin + "/v1"``); see the module docstring."""

    path = "/v1/responses"

    def __init__(
        self,
        script: Sequence[object] = (),
        *,
        api_key: str = FAKE_KEY,
        count_tokens: bool = False,
        context_window: int | None = None,
    ) -> None:
        super().__init__(script, api_key=api_key, count_tokens=count_tokens, context_window=context_window)
        self.answered = 0
        self.reasoning_items: dict[str, dict[str, Any]] = {}  # by id, as this server sent them
        self.reasoning_of_call: dict[str, tuple[str, str]] = {}  # call_id: (the call's item id, its reasoning's id)
        self._count_lock = threading.Lock()

    def check(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        """The real API's refusals, for what a stateless client can get wrong."""
        self.check_key(headers)
        if not isinstance(body.get("model"), str):
            raise invalid("Missing required parameter: 'model'.", "model")
        items = body.get("input")
        if not isinstance(items, (list, str)):
            raise invalid("Invalid type for 'input': expected a string or an array of input items.", "input")
        for banned in ("messages", "max_tokens", "max_completion_tokens"):
            if banned in body:
                raise invalid(f"Unsupported parameter: '{banned}'.", banned)
        for index, tool in enumerate(body.get("tools", [])):
            if tool.get("type") != "function" or not isinstance(tool.get("name"), str):
                raise invalid(f"Missing required parameter: 'tools[{index}].name'.", f"tools[{index}].name")
        if isinstance(items, list):
            self._check_items(items, stored=body.get("store", True) is not False)
        if self.context_window is not None and chat_prompt_tokens(body) > self.context_window:
            raise Rejected(400, "invalid_request_error", TOO_LONG, "input", "context_length_exceeded")

    def refuse(self, handler: Handler, body: object, rejected: Rejected, request_id: str) -> None:
        """A prompt over the window, asked for as a stream, is refused inside the stream, as the API does."""
        if rejected.fail.code != "context_length_exceeded" or not isinstance(body, dict) or not body.get("stream"):
            return super().refuse(handler, body, rejected, request_id)
        handler.start_stream()
        head = {**self._response(body, Answer(), 0), "status": "in_progress", "output": [], "usage": None}
        for sequence, kind in enumerate(("response.created", "response.in_progress")):
            handler.send_event(json.dumps({"type": kind, "response": head, "sequence_number": sequence}), kind)
        error = {"type": rejected.fail.type, "code": rejected.fail.code, "message": rejected.fail.message}
        handler.send_event(
            json.dumps({"type": "error", "sequence_number": 2, "error": {**error, "param": "input"}}), "error"
        )
        handler.end_stream()

    def _check_items(self, items: list[Any], *, stored: bool) -> None:
        calls: set[str] = set()
        turn: set[str] = set()  # the reasoning items of the model's turn so far
        for index, item in enumerate(items):
            kind = item.get("type", "message") if isinstance(item, dict) else None
            if kind == "message":
                _check_message(index, item)
                turn = turn if item.get("role") == "assistant" else set()
            elif kind == "function_call":
                if not isinstance(item.get("arguments"), str) or not isinstance(item.get("call_id"), str):
                    raise invalid(f"Invalid type for 'input[{index}].arguments'.", f"input[{index}].arguments")
                self._check_reasoning_before(index, item, turn)
                calls.add(item["call_id"])
            elif kind == "function_call_output":
                turn = set()
                if item.get("call_id") not in calls:
                    raise invalid(
                        f"No tool call found for function call output with call_id {item.get('call_id')}.", "input"
                    )
            elif kind == "reasoning":
                self._check_reasoning(index, item, stored=stored)
                turn.add(item["id"])
            elif kind is None:
                raise invalid(f"Invalid type for 'input[{index}]': expected an object.", f"input[{index}]")

    def _check_reasoning(self, index: int, item: dict[str, Any], *, stored: bool) -> None:
        sent = self.reasoning_items.get(str(item.get("id")))
        if sent is None or (not stored and item.get("encrypted_content") != sent.get("encrypted_content")):
            raise invalid(
                f"Item with id '{item.get('id')}' not found. Items are not persisted when `store` is set to false. "
                "Try again with `store` set to true, or remove this item from your input.",
                f"input[{index}]",
            )
        if item != sent:
            raise invalid(f"The encrypted content for item {item['id']} could not be verified.", f"input[{index}]")

    def _check_reasoning_before(self, index: int, item: dict[str, Any], turn: set[str]) -> None:
        made = self.reasoning_of_call.get(item["call_id"])
        if made is None:
            return
        call_id, reasoning_id = made
        if reasoning_id not in turn:
            raise invalid(
                f"Item '{call_id}' of type 'function_call' was provided without its required 'reasoning' item: "
                f"'{reasoning_id}'.",
                f"input[{index}]",
            )

    def reply(self, handler: Handler, body: dict[str, Any], answer: object) -> None:
        """Answer with a response object, or stream it as events."""
        assert isinstance(answer, Answer), f"not an answer this fake knows: {answer!r}"
        with self._count_lock:
            self.answered += 1
            number = self.answered
        response = self._response(body, answer, number)
        if not body.get("stream"):
            handler.send_json(200, response)
            return
        handler.start_stream()
        for sequence, (kind, data) in enumerate(events(response, answer)):
            if sequence == answer.cut_after:
                return self.drop(handler)
            if sequence == answer.error_after:
                data = {"type": "error", "code": "server_error", "message": "The server had an error.", "param": None}
                handler.send_event(json.dumps({**data, "sequence_number": sequence}), "error")
                return handler.end_stream()
            if sequence == answer.fail_after:
                failed = {**response, "status": "failed", "output": []}
                failed["error"] = {"code": "server_error", "message": "Something went wrong while processing."}
                data, kind = {"type": "response.failed", "response": failed}, "response.failed"
                handler.send_event(json.dumps({**data, "sequence_number": sequence}), kind)
                return handler.end_stream()
            handler.send_event(json.dumps({**data, "sequence_number": sequence}, ensure_ascii=False), kind)
        handler.end_stream()

    def _response(self, body: dict[str, Any], answer: Answer, number: int) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        reasoning_id = ""
        if answer.reasoning is not None:
            reasoning_id = f"rs_{number:04d}"
            item: dict[str, Any] = {
                "id": reasoning_id,
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": answer.reasoning}],
            }
            if "reasoning.encrypted_content" in (body.get("include") or []):
                item["encrypted_content"] = f"gAAAAB{number:04d}-sealed-thoughts=="
            output.append(item)
            self.reasoning_items[reasoning_id] = item
        if answer.extra is not None:
            output.append(dict(answer.extra))
        if answer.text is not None or answer.refusal is not None:
            part: dict[str, Any] = (
                {
                    "type": "output_text",
                    "annotations": [dict(a) for a in answer.annotations],
                    "logprobs": [],
                    "text": answer.text,
                }
                if answer.refusal is None
                else {"type": "refusal", "refusal": answer.refusal}
            )
            message = {"id": f"msg_{number:04d}", "type": "message", "status": "completed", "role": "assistant",
                       "content": [part]}  # fmt: skip
            output.append(message if answer.phase is None else {**message, "phase": answer.phase})
        for index, call in enumerate(answer.calls):
            item_id = f"fc_{number:04d}_{index}"
            output.append(
                {"id": item_id, "type": "function_call", "status": "completed", "call_id": call.id,
                 "name": call.name, "arguments": call.arguments}
            )  # fmt: skip
            if reasoning_id:
                self.reasoning_of_call[call.id] = (item_id, reasoning_id)
        prompt, cached = answer.input_tokens, answer.cached_tokens
        if self.cache is not None and number:  # number 0: the head of a refused stream, nothing billed
            with self._lock:
                prompt, cached = self.cache.account(body)
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": answer.cache_write_tokens},
            "output_tokens": answer.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 2 if answer.reasoning is not None else 0},
            "total_tokens": prompt + answer.output_tokens,
        }
        if number:
            self.usages.append(usage)
        return {
            "id": f"resp_{number:04d}", "object": "response", "created_at": 1754925861,
            "status": "incomplete" if answer.incomplete else "completed", "error": None,
            "incomplete_details": {"reason": answer.incomplete} if answer.incomplete else None,
            "instructions": body.get("instructions"), "model": answer.model or body["model"], "output": output,
            "store": body.get("store", True), "usage": usage, "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [{**tool, "strict": False} for tool in body.get("tools", [])],
        }  # fmt: skip


def _check_message(index: int, item: dict[str, Any]) -> None:
    """A user (or system) message takes ``input_*`` parts, an assistant message ``output_text`` and ``refusal``."""
    role, content = item.get("role"), item.get("content")
    if role not in ("user", "assistant", "system", "developer"):
        raise invalid(
            f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', 'developer', and 'user'.",
            f"input[{index}].role",
        )
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise invalid(f"Invalid type for 'input[{index}].content'.", f"input[{index}].content")
    allowed = ASSISTANT_PARTS if role == "assistant" else USER_PARTS
    for number, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            supported = " and ".join(f"'{name}'" for name in sorted(allowed))
            raise invalid(
                f"Invalid value: '{kind}'. Supported values are: {supported}.", f"input[{index}].content[{number}]"
            )
        if kind == "input_image" and not str(part.get("image_url", "")).startswith(("data:image/", "http")):
            raise invalid(f"Invalid 'input[{index}].content[{number}].image_url'.", f"input[{index}].content")


def _start(item: dict[str, Any]) -> dict[str, Any]:
    """An item as ``response.output_item.added`` shows it: nothing generated yet."""
    if item["type"] == "message":
        return {**item, "status": "in_progress", "content": []}
    if item["type"] == "function_call":
        return {**item, "status": "in_progress", "arguments": ""}
    if item["type"] == "reasoning":
        return {key: value for key, value in item.items() if key != "encrypted_content"} | {"summary": []}
    return item


def events(response: dict[str, Any], answer: Answer) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(event name, data)`` for a streamed response, in the API's order."""
    head = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    yield "response.created", {"type": "response.created", "response": head}
    yield "response.in_progress", {"type": "response.in_progress", "response": head}
    for index, item in enumerate(response["output"]):
        at = {"output_index": index, "item_id": item.get("id")}
        yield "response.output_item.added", {"type": "response.output_item.added", "output_index": index,
                                              "item": _start(item)}  # fmt: skip
        if item["type"] == "message":
            yield from _message_events(item, at)
        elif item["type"] == "function_call":
            for piece in pieces(item["arguments"], 5):
                yield (
                    "response.function_call_arguments.delta",
                    {"type": "response.function_call_arguments.delta", **at, "delta": piece},
                )
            yield (
                "response.function_call_arguments.done",
                {"type": "response.function_call_arguments.done", **at, "arguments": item["arguments"]},
            )
        elif item["type"] == "reasoning":
            for summary in item["summary"]:
                yield (
                    "response.reasoning_summary_text.delta",
                    {
                        "type": "response.reasoning_summary_text.delta",
                        **at,
                        "summary_index": 0,
                        "delta": summary["text"],
                    },
                )
        yield "response.output_item.done", {"type": "response.output_item.done", "output_index": index, "item": item}
    output = [] if answer.bare_completed else response["output"]
    kind = "response.incomplete" if answer.incomplete else "response.completed"
    yield kind, {"type": kind, "response": {**response, "output": output}}


def _message_events(item: dict[str, Any], at: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for content_index, part in enumerate(item["content"]):
        where = {**at, "content_index": content_index}
        key = "text" if part["type"] == "output_text" else "refusal"
        name = "output_text" if key == "text" else "refusal"
        logprobs: dict[str, list[Any]] = {"logprobs": []} if key == "text" else {}
        start = {**part, key: ""} | ({"annotations": []} if key == "text" else {})
        yield "response.content_part.added", {"type": "response.content_part.added", **where, "part": start}
        for piece in pieces(part[key]):
            yield f"response.{name}.delta", {"type": f"response.{name}.delta", **where, "delta": piece, **logprobs}
        for number, annotation in enumerate(part.get("annotations") or []):
            yield "response.output_text.annotation.added", {
                "type": "response.output_text.annotation.added", **where, "annotation_index": number,
                "annotation": annotation,
            }  # fmt: skip
        yield f"response.{name}.done", {"type": f"response.{name}.done", **where, key: part[key], **logprobs}
        yield "response.content_part.done", {"type": "response.content_part.done", **where, "part": part}
