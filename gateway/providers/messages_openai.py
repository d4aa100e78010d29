"""The Messages API (`POST /v1/messages`) to OpenAI-compatible servers (provider type `openai`): the
Messages bridge on the chat cell (`convert.messages_chat_bridge`)."""

from __future__ import annotations

from gateway.providers.chat_openai import OpenAIChat
from gateway.providers.convert.messages_chat_bridge import MessagesViaChat
from gateway.providers.settings import ProviderConfig


class OpenAIMessages(MessagesViaChat):
    """Provider type `openai`."""

    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(OpenAIChat(provider))
