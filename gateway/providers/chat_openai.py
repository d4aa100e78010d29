"""Chat Completions to any OpenAI-compatible `/chat/completions` server (OpenAI, vLLM, Ollama, Groq, ...).

Nothing is translated: the request passes through with `model` rewritten and usage asked for; chunks
pass through as the upstream's own bytes unless the gateway has to change them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.events import Failure
from gateway.core.json_body import encode
from gateway.providers.base import SSE, ParsedBody, UpstreamRequest
from gateway.providers.convert.openai_chat import OpenAIStreamParser, classify_openai_http_error, parse_openai_body
from gateway.providers.convert.pass_through import passed_through
from gateway.providers.settings import ProviderConfig


class OpenAIChat:
    """Translator for provider type `openai`."""

    framing = SSE

    def __init__(self, provider: ProviderConfig) -> None:
        self.provider = provider
        self._headers = self._base_headers()

    def _base_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.provider.api_key:
            headers["authorization"] = f"Bearer {self.provider.api_key}"
        headers.update(self.provider.headers)
        return headers

    def url(self, path: str, model: str) -> str:
        return f"{self.provider.base_url}{path}"

    def headers_for(self, stream: bool) -> dict[str, str]:
        h = dict(self._headers)
        h["accept"] = "text/event-stream" if stream else "application/json"
        return h

    @property
    def sends_stream_options(self) -> bool:
        return True

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        out = passed_through(body, model, stream=stream)
        if stream and send_stream_options:
            opts = out.get("stream_options")
            out["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
        elif stream:
            out.pop("stream_options", None)
        return UpstreamRequest("POST", self.url("/chat/completions", model), self.headers_for(stream),
                               encode(out), stream)

    def embeddings_request(self, body: Mapping[str, Any], model: str) -> UpstreamRequest:
        out = dict(body)
        out["model"] = model
        return UpstreamRequest("POST", self.url("/embeddings", model), self.headers_for(False),
                               encode(out), False)

    def stream_parser(self) -> OpenAIStreamParser:
        return OpenAIStreamParser()

    def parse_body(self, body: bytes) -> ParsedBody:
        return parse_openai_body(body)

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return classify_openai_http_error(status, headers, body)


