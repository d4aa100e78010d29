"""The Messages API to Azure OpenAI: translated to and from Chat Completions, as for OpenAI."""

from __future__ import annotations

from gateway.providers.chat_azure import AzureChat
from gateway.providers.messages_openai import ChatMessages


class AzureMessages(AzureChat, ChatMessages):
    """Provider type `azure`: Azure's deployment path, api-version and `api-key` header."""
