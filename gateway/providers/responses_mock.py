"""The Responses API to the built-in `mock` provider."""

from __future__ import annotations

from gateway.providers.chat_mock import MockChat
from gateway.providers.responses_openai import ResponsesRequests


class MockResponses(MockChat, ResponsesRequests):
    """Provider type `mock`: the built-in demo answer, in the Responses API's shape."""
