"""The Responses API (`POST /v1/responses`) to provider type `vertex`, which has none: bridged through its chat
cell (`convert.responses_chat_bridge`), Responses -> Chat Completions -> the provider's API and back
(docs/responses-bridge.md)."""

from __future__ import annotations

from gateway.providers.chat_vertex import VertexChat
from gateway.providers.convert.responses_chat_bridge import ResponsesViaChat
from gateway.providers.settings import ProviderConfig


class VertexResponses(ResponsesViaChat):
    """Provider type `vertex`."""

    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(VertexChat(provider))
