"""The Messages API to Azure OpenAI: translated to and from Chat Completions, as for OpenAI."""

from __future__ import annotations

from gateway.providers.chat_azure import AzureChat
from gateway.providers.convert.messages_chat_bridge import MessagesViaChat
from gateway.providers.settings import ProviderConfig


class AzureMessages(MessagesViaChat):
    """Provider type `azure`: Azure's deployment path, api-version and `api-key` header."""

    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(AzureChat(provider))
