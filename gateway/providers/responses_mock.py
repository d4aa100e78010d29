"""The Responses API to the built-in `mock` provider."""

from __future__ import annotations

from gateway.providers.chat_mock import MockChat
from gateway.providers.convert.responses_pass_through import ResponsesPassThrough
from gateway.providers.settings import ProviderConfig


class MockResponses(ResponsesPassThrough):
    """Provider type `mock`: the built-in demo answer, in the Responses API's shape."""

    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(MockChat(provider))
