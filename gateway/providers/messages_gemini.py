"""The Messages API (`POST /v1/messages`) to the Gemini API: on top of the chat cell (`MessagesViaChat`),
with the client's `thinking` carried to the Google request (its budget becomes `thinkingConfig`; Chat
Completions has no field for it), and thoughts coming back as `thinking` blocks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.providers.base import Translator, UpstreamRequest
from gateway.providers.chat_gemini import GeminiChat
from gateway.providers.convert.messages_chat_request import chat_body
from gateway.providers.messages_openai import MessagesViaChat
from gateway.providers.settings import ProviderConfig


class MessagesViaGoogle(MessagesViaChat):
    """`MessagesViaChat` on a Google chat cell, `thinking` included."""

    def __init__(self, chat: Translator) -> None:
        super().__init__(chat)

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        out = chat_body(body)
        if isinstance(body.get("thinking"), dict):
            out["thinking"] = body["thinking"]  # read by `convert.google_request` only
        return self.chat.request(out, model, stream=stream, client_headers=client_headers,
                                 send_stream_options=send_stream_options)


class GeminiMessages(MessagesViaGoogle):
    """Provider type `gemini`."""

    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(GeminiChat(provider))
