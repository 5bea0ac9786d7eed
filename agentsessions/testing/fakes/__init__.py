"""Local HTTP servers that speak the providers' wire formats, for testing agents offline with the real endpoints.

    from agentsessions.endpoints import AnthropicEndpoint
    from agentsessions.testing import FakeMessagesAPI
    from agentsessions.testing.fakes.messages import Reply, text

    with FakeMessagesAPI([Reply([text("Hi")])]) as api:
        claude = AnthropicEndpoint("claude-test", api_key=api.api_key, base_url=api.base_url)

Each is a real HTTP server on a free port of 127.0.0.1 (a context manager) that answers
each request it accepts with the next answer of its script, whole or streamed as the
request asks, and refuses what the real API refuses (a wrong key, roles that do not
alternate, tool results that answer no call, thinking sent back without its signature,
reasoning items out of place...) with the provider's own error. Every request is kept in
``requests`` (path, headers, JSON body).

- :class:`~agentsessions.testing.fakes.messages.FakeMessagesAPI`: Anthropic's Messages API;
  replies are :class:`~agentsessions.testing.fakes.messages.Reply` objects of the API's
  content blocks (``text``, ``tool_use``, ``thinking`` build them).
- :class:`~agentsessions.testing.fakes.chat_completions.FakeChatCompletionsAPI`: OpenAI's
  Chat Completions; replies are :class:`~agentsessions.testing.fakes.chat_completions.Reply`
  (text, :class:`~agentsessions.testing.fakes.chat_completions.Call` tool calls).
- :class:`~agentsessions.testing.fakes.responses.FakeResponsesAPI`: OpenAI's Responses API;
  replies are :class:`~agentsessions.testing.fakes.responses.Answer`.

Any script may also hold :class:`Fail` (an error answer: status, the provider's error
type, message, ``Retry-After``), :class:`Drop` (the connection closed without a word) and
:class:`Stall` (silence, then a drop), to test how an agent meets a failing provider.
"""

from agentsessions.testing.fakes.chat_completions import FakeChatCompletionsAPI
from agentsessions.testing.fakes.messages import FakeMessagesAPI
from agentsessions.testing.fakes.responses import FakeResponsesAPI
from agentsessions.testing.fakes.server import FAKE_KEY, Drop, Fail, Seen, Stall

__all__ = ["FAKE_KEY", "Drop", "Fail", "FakeChatCompletionsAPI", "FakeMessagesAPI", "FakeResponsesAPI", "Seen", "Stall"]
