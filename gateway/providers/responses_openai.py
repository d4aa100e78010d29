"""The Responses API (`POST /v1/responses`) to OpenAI (`{base_url}/responses`): passed through
(`convert.responses_pass_through`); to an `openai`-type server without it (`responses: false`), the
Responses bridge on its chat cell (`convert.responses_chat_bridge`).
"""

from __future__ import annotations

from gateway.providers.chat_openai import OpenAIChat
from gateway.providers.convert.responses_chat_bridge import ResponsesViaChat
from gateway.providers.convert.responses_pass_through import ResponsesPassThrough
from gateway.providers.settings import ProviderConfig


def openai_responses(provider: ProviderConfig) -> ResponsesPassThrough | ResponsesViaChat:
    """Provider type `openai`: the chat cell's headers and errors, `{base_url}/responses`; a server
    configured with `responses: false` (chat only: vLLM, Ollama, llama.cpp, ...) is bridged through its
    chat cell instead (docs/responses-bridge.md)."""
    chat = OpenAIChat(provider)
    return ResponsesPassThrough(chat) if provider.responses else ResponsesViaChat(chat)
