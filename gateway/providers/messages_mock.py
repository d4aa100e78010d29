"""The Messages API to the built-in `mock` provider: its chat answer, translated."""

from __future__ import annotations

from gateway.providers.chat_mock import MockChat
from gateway.providers.convert.messages_chat_bridge import MessagesViaChat
from gateway.providers.settings import ProviderConfig


class MockMessages(MessagesViaChat):
    """Provider type `mock`: the built-in demo answer, translated like any chat stream."""

    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(MockChat(provider))
