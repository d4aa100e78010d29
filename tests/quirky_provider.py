"""A newcomer's provider type, scripted for tests: `quirky`, an OpenAI-compatible server with quirks (its
key goes in `x-quirk-key`, and it knows `max_tokens` but not `max_completion_tokens`), with no Responses
API. Written as docs/architecture.md's "Adding a provider type" says: a chat cell that subclasses
`OpenAIChat`, the Responses and Messages bridges on it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.providers.base import UpstreamRequest
from gateway.providers.chat_openai import OpenAIChat
from gateway.providers.convert.messages_chat_bridge import MessagesViaChat
from gateway.providers.convert.responses_chat_bridge import ResponsesViaChat
from gateway.providers.registry import ProviderKind
from gateway.providers.settings import ProviderConfig

KIND = ProviderKind(genai_name="quirky")


class QuirkyChat(OpenAIChat):
    def _base_headers(self) -> dict[str, str]:
        headers = super()._base_headers()
        headers.pop("authorization", None)
        headers["x-quirk-key"] = self.provider.api_key or ""
        return headers

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        out = dict(body)
        if "max_completion_tokens" in out:
            out["max_tokens"] = out.pop("max_completion_tokens")
        return super().request(out, model, stream=stream, client_headers=client_headers,
                               send_stream_options=send_stream_options)


class QuirkyResponses(ResponsesViaChat):
    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(QuirkyChat(provider))


class QuirkyMessages(MessagesViaChat):
    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(QuirkyChat(provider))


CELLS = {"chat": QuirkyChat, "responses": QuirkyResponses, "messages": QuirkyMessages}
