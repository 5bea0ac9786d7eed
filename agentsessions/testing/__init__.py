"""What tests are written with.

- :class:`FakeMessagesAPI`, :class:`FakeChatCompletionsAPI`, :class:`FakeResponsesAPI`:
  local servers speaking the providers' wire formats, so an agent is tested offline with
  the real endpoint classes (:mod:`agentsessions.testing.fakes`; the standard library and
  attrs only).
- :mod:`agentsessions.testing.storetest`: the conformance suite for store authors. Importing
  it needs Hypothesis (``pip install agentsessions[storetest]``); nothing else here imports a
  driver.
"""

from agentsessions.testing.fakes import FakeChatCompletionsAPI, FakeMessagesAPI, FakeResponsesAPI

__all__ = ["FakeChatCompletionsAPI", "FakeMessagesAPI", "FakeResponsesAPI"]
