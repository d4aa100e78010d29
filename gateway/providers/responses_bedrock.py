"""The Responses API (`POST /v1/responses`) to provider type `bedrock`, which has none: bridged through its chat
cell (`convert.responses_chat_bridge`), Responses -> Chat Completions -> the provider's API and back
(docs/responses-bridge.md)."""

from __future__ import annotations

from gateway.providers.chat_bedrock import BedrockChat
from gateway.providers.convert.responses_chat_bridge import ResponsesViaChat
from gateway.providers.settings import ProviderConfig


class BedrockResponses(ResponsesViaChat):
    """Provider type `bedrock`."""

    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(BedrockChat(provider))
