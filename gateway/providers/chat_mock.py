"""Chat Completions to the built-in `mock` provider: OpenAI's wire format, played in process (`demo`)."""

from __future__ import annotations

from gateway.providers.chat_openai import OpenAIChat


class MockChat(OpenAIChat):
    """The mock speaks OpenAI; requests go to the in-process transport instead of a socket."""

    def url(self, path: str, model: str) -> str:
        return f"mock://{self.provider.name}{path}"
