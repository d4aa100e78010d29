"""Chat Completions to the Gemini API (`type: gemini`, docs/cloud-providers.md): `POST {base}/v1beta/models/{model}
:generateContent`, or `:streamGenerateContent?alt=sse` for a stream, the key in `x-goog-api-key`.

The translator is `convert.google_chat.GoogleChat` on the Gemini API's models URL.
"""

from __future__ import annotations

import time

from gateway.providers.convert.google_chat import GEMINI_API, Clock, GoogleChat
from gateway.providers.settings import ProviderConfig


def gemini_models_url(base_url: str) -> str:
    """The Gemini API's models collection: `base_url` given with or without its version."""
    base = (base_url or GEMINI_API).rstrip("/")
    return f"{base}/models" if base.rsplit("/", 1)[-1] in ("v1", "v1beta", "v1alpha") else f"{base}/v1beta/models"


class GeminiChat(GoogleChat):
    """Translator for provider type `gemini`."""

    def __init__(self, provider: ProviderConfig, clock: Clock = time.time) -> None:
        headers = {"x-goog-api-key": provider.api_key} if provider.api_key else {}
        super().__init__(gemini_models_url(provider.base_url), {**headers, **provider.headers}, clock)
        self.provider = provider
