"""The Messages API (`POST /v1/messages`) to the Gemini API: on top of the chat cell (`MessagesViaChat`),
with the client's `thinking` carried to the Google request (its budget becomes `thinkingConfig`; Chat
Completions has no field for it), and thoughts coming back as `thinking` blocks."""

from __future__ import annotations

from gateway.providers.chat_gemini import GeminiChat
from gateway.providers.convert.messages_chat_bridge import MessagesViaGoogle
from gateway.providers.settings import ProviderConfig


class GeminiMessages(MessagesViaGoogle):
    """Provider type `gemini`."""

    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(GeminiChat(provider))
