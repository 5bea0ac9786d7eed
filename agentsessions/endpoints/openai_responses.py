"""OpenAI's Responses API (``POST {base_url}/responses``) as an :class:`~agentsessions.Endpoint`.

    endpoint = OpenAIResponsesEndpoint("gpt-5", reasoning={"effort": "low"}, stream=True)  # OPENAI_API_KEY

Stateless: every request sends the whole transcript with ``store: false`` and asks for
``include: ["reasoning.encrypted_content"]``, so the reasoning items a reasoning model
returns can be sent back with the tool calls they led to, which is what keeps its
reasoning across tool calls when nothing is stored at OpenAI. How the transcript maps onto
the wire:

- The system prompt is ``instructions``; the transcript is ``input``, a list of items.
- An assistant message's text is a ``message`` item of ``output_text`` parts; each
  ``TOOL_USE`` a ``function_call`` item whose ``arguments`` is our ``input`` byte for
  byte, both ways; each ``RAW`` block of provider ``"openai"`` (reasoning items, server
  tools' calls, anything this library does not model) goes back verbatim, in its place.
- A user message becomes one ``function_call_output`` item per ``TOOL_RESULT`` (the images
  and documents a tool returned go inside its ``output``, after the text), then a ``user``
  ``message`` item with its text, ``input_image`` and ``input_file`` parts, if any.
- ``THINKING`` and ``REDACTED_THINKING`` blocks (another provider's reasoning) and other
  providers' ``RAW`` blocks are left out; a ``RAW`` block's text, if any, goes as text.
- Coming back, a ``message`` item is one ``TEXT`` block per ``output_text`` (or
  ``refusal``) part, a ``function_call`` a ``TOOL_USE`` (its ``call_id`` is the block's
  id), and every other item a ``RAW`` block holding the item as compact JSON: the same
  text for a whole and a streamed answer, sent back as it is stored. A message with a
  ``phase`` (``commentary``, ``final_answer``: newer models want it back) or with
  citations is such a ``RAW`` block too, its text the block's text (so in
  ``Message.text``, and sent as text to other providers).
- Stop reasons: an answer with calls is ``tool_use``, a completed one ``end_turn``, an
  incomplete one its ``incomplete_details.reason`` (``max_output_tokens`` is
  ``max_tokens``). A failed response, or an ``error`` event, is
  :class:`~agentsessions.errors.EndpointStatusError`.
- Usage: ``input_tokens_details.cached_tokens`` are ``cache_read_tokens`` and its
  ``cache_write_tokens`` (newer answers carry them) ``cache_write_tokens``; the API's
  ``input_tokens`` less both is ``input_tokens``, as the other endpoints count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Unpack

from agentsessions.endpoint import ModelRequest, ModelResponse
from agentsessions.endpoints._http import HTTPEndpoint, HTTPOptions, Verbatim
from agentsessions.endpoints._responses_read import PROVIDER, Stream, read_response
from agentsessions.endpoints.openai import DEFAULT_BASE_URL
from agentsessions.messages import MEDIA, Content, ContentType, Message, Role, summary_text
from agentsessions.tools import Tool

INCLUDE = ["reasoning.encrypted_content"]

__all__ = ["PROVIDER", "OpenAIResponsesEndpoint", "read_response", "request_body", "wire_input"]


class OpenAIResponsesEndpoint(HTTPEndpoint):
    """A model behind OpenAI's Responses API, stateless (see the module docstring).

    ``api_key`` defaults to ``$OPENAI_API_KEY`` and ``base_url`` to OpenAI's, as for
    :class:`~agentsessions.endpoints.OpenAIEndpoint`. ``reasoning`` is sent as the API's
    ``reasoning`` object: a ``dict`` as it is (``{"effort": "low", "summary": "auto"}``),
    a ``str`` as its effort. The token limit goes as ``max_output_tokens``. ``extra_body``
    adds body fields such as ``temperature``, ``tool_choice`` or ``text``; the other
    options are :class:`~agentsessions.endpoints._http.HTTPEndpoint`'s.
    """

    provider = "OpenAI"
    key_variable = "OPENAI_API_KEY"
    default_base_url = DEFAULT_BASE_URL
    path = "/responses"
    last_event = "response.completed"
    owned_keys: ClassVar[Mapping[str, str]] = {
        "model": "its model argument",
        "input": "the transcript",
        "instructions": "Spec.system",
        "tools": "Spec.tools",
        "stream": "its stream option",
        "store": "the endpoint being stateless (store is always false)",
        "include": "the endpoint being stateless (it asks for reasoning.encrypted_content)",
        "max_output_tokens": "Spec.max_tokens (or its max_tokens option)",
        "reasoning": "its reasoning option",
    }

    def __init__(
        self, model: str, *, reasoning: Mapping[str, Any] | str | None = None, **options: Unpack[HTTPOptions]
    ) -> None:
        super().__init__(model, **options)
        self.reasoning = _reasoning(reasoning)

    def _body(self, request: ModelRequest, max_tokens: int) -> dict[str, Any]:
        body = request_body(self.model, request, max_tokens, stream=self.stream)
        if self.reasoning is not None:
            body["reasoning"] = self.reasoning
        return body

    def _auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._key.reveal()}"}

    def _read(self, body: Mapping[str, Any]) -> ModelResponse:
        return read_response(body)

    def _assembly(self) -> Stream:
        return Stream()


def _reasoning(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str) and value:
        return {"effort": value}
    if isinstance(value, Mapping) and all(isinstance(key, str) for key in value):
        return dict(value)
    raise TypeError(f"reasoning is the API's reasoning object (dict) or an effort such as 'low', got {value!r:.80}")


def request_body(model: str, request: ModelRequest, max_tokens: int, *, stream: bool) -> dict[str, Any]:
    """The JSON body of a Responses API call for ``request``."""
    body: dict[str, Any] = {
        "model": model,
        "input": wire_input(request.messages),
        "store": False,
        "include": list(INCLUDE),
        "max_output_tokens": max_tokens,
    }
    if request.system:
        body["instructions"] = request.system
    if request.tools:
        body["tools"] = [wire_tool(tool) for tool in request.tools]
    if stream:
        body["stream"] = True
    return body


def wire_tool(tool: Tool) -> dict[str, Any]:
    """A function tool as the API takes it."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.input_schema),
    }


def wire_input(messages: Sequence[Message]) -> list[Any]:
    """The transcript as input items."""
    items: list[Any] = []
    for message in messages:
        items.extend(_assistant(message) if message.role is Role.ASSISTANT else _user(message))
    return items


def _is_text(block: Content) -> bool:
    # Another provider's RAW block with text (its cited text) is text here; the rest of it is left out.
    return block.type is ContentType.TEXT or (block.type is ContentType.RAW and block.name != PROVIDER)


def _assistant(message: Message) -> list[Any]:
    """Text runs as ``message`` items, calls as ``function_call`` items, our raw items verbatim, in order."""
    items: list[Any] = []
    texts: list[dict[str, Any]] = []

    def flush() -> None:
        if texts:
            items.append({"type": "message", "role": "assistant", "content": list(texts)})
            texts.clear()

    for block in message.content:
        if _is_text(block):
            if block.text:
                texts.append({"type": "output_text", "text": block.text})
        elif block.type is ContentType.COMPACTION:
            texts.append({"type": "output_text", "text": summary_text(block)})
        elif block.type is ContentType.TOOL_USE:
            flush()
            items.append({"type": "function_call", "call_id": block.id, "name": block.name, "arguments": block.input})
        elif block.type is ContentType.RAW:
            flush()
            items.append(Verbatim(block.data))
    flush()
    return items


def _user(message: Message) -> list[Any]:
    """One ``function_call_output`` per result (with the media its tool returned), then a user message."""
    items: list[Any] = []
    outputs: dict[str, dict[str, Any]] = {}
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if block.type is ContentType.TOOL_RESULT:
            outputs[block.tool_use_id] = item = {
                "type": "function_call_output",
                "call_id": block.tool_use_id,
                "output": block.text,
            }
            items.append(item)
        elif block.part_of_result and block.tool_use_id in outputs:
            _attach(outputs[block.tool_use_id], _media_part(block))
        elif block.type is ContentType.RAW and block.name == PROVIDER:
            items.append(Verbatim(block.data))
        elif block.type in MEDIA:
            parts.append(_media_part(block))
        elif _is_text(block) and block.text:
            parts.append({"type": "input_text", "text": block.text})
        elif block.type is ContentType.COMPACTION:
            parts.append({"type": "input_text", "text": summary_text(block)})
    if parts or not items:
        items.append({"type": "message", "role": "user", "content": parts or [{"type": "input_text", "text": ""}]})
    return items


def _attach(item: dict[str, Any], part: dict[str, Any]) -> None:
    output = item["output"]
    if not isinstance(output, list):
        output = [{"type": "input_text", "text": output}] if output else []
        item["output"] = output
    output.append(part)


def _media_part(block: Content) -> dict[str, Any]:
    if block.type is ContentType.IMAGE:
        url = block.url or f"data:{block.media_type};base64,{block.data}"
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    if block.url:
        return {"type": "input_file", "file_url": block.url}
    file_data = f"data:{block.media_type};base64,{block.data}"
    return {"type": "input_file", "filename": block.name or "document", "file_data": file_data}
