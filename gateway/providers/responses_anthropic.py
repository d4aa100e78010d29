"""The Responses API (`POST /v1/responses`) to Anthropic's Messages API: bridged through the chat cell
(`convert.responses_chat_bridge`), Responses -> Chat Completions -> Messages and back (docs/responses-bridge.md)."""

from __future__ import annotations

from gateway.providers.chat_anthropic import AnthropicChat
from gateway.providers.convert.responses_chat_bridge import ResponsesViaChat
from gateway.providers.settings import ProviderConfig


class AnthropicResponses(ResponsesViaChat):
    """Provider type `anthropic`."""

    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(AnthropicChat(provider))
