"""Chat Completions to the Gemini API (`type: gemini`, docs/cloud-providers.md): `POST {base}/v1beta/models/{model}
:generateContent`, or `:streamGenerateContent?alt=sse` for a stream, the key in `x-goog-api-key`.

`GoogleChat` is the Google translator on any generateContent URL: this cell and Vertex AI's Gemini models
(`chat_vertex`) share it; the request is `convert.google_request`'s, the answer `convert.google_stream`'s,
errors `convert.google_errors`'.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gateway.core.events import Failure
from gateway.providers.base import SSE, ParsedBody, UpstreamRequest
from gateway.providers.convert.google_errors import classify_google_http_error
from gateway.providers.convert.google_request import google_body
from gateway.providers.convert.google_stream import GoogleStreamParser, parse_google_body
from gateway.providers.settings import ProviderConfig

GEMINI_API = "https://generativelanguage.googleapis.com"

Clock = Callable[[], float]


def method_url(models_url: str, model: str, stream: bool) -> str:
    """`{models_url}/{model}:generateContent`, or the SSE stream's method."""
    model = model.removeprefix("models/")
    return f"{models_url}/{model}:streamGenerateContent?alt=sse" if stream else f"{models_url}/{model}:generateContent"


class GoogleChat:
    """Chat Completions on a generateContent endpoint: `models_url` is the URL the model's name follows."""

    framing = SSE
    sends_stream_options = False  # every Google response carries usageMetadata: nothing to ask

    def __init__(self, models_url: str, headers: Mapping[str, str], clock: Clock = time.time) -> None:
        self.models_url = models_url
        self._headers = {"content-type": "application/json", **headers}
        self._clock = clock  # only for the `created` field OpenAI shapes carry

    def headers_for(self, stream: bool) -> dict[str, str]:
        return {**self._headers, "accept": "text/event-stream" if stream else "application/json"}

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        return UpstreamRequest("POST", method_url(self.models_url, model, stream), self.headers_for(stream),
                               orjson.dumps(google_body(body)), stream)

    def stream_parser(self) -> GoogleStreamParser:
        return GoogleStreamParser(int(self._clock()))

    def parse_body(self, body: bytes) -> ParsedBody:
        return parse_google_body(body, int(self._clock()))

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return classify_google_http_error(status, headers, body)


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
