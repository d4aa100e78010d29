"""Chat Completions to Anthropic's native Messages API (`POST {base_url}/v1/messages`), both ways.

The request is translated by `convert.anthropic_request`, the stream and the body back by
`convert.anthropic_stream`, errors classified by `convert.anthropic_errors`; this module is the
translator the registry builds for provider type `anthropic`. Clients only ever see OpenAI shapes
(docs/reference.md, "Routes").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from gateway.core.events import Failure
from gateway.core.json_body import encode
from gateway.providers.base import SSE, AddsBreakpoints, ParsedBody, UpstreamRequest
from gateway.providers.convert.anthropic_errors import classify_anthropic_http_error
from gateway.providers.convert.anthropic_request import anthropic_body
from gateway.providers.convert.anthropic_stream import (
    AnthropicStreamParser,
    parse_anthropic_body,
)
from gateway.providers.convert.cache_markers import fit
from gateway.providers.settings import ProviderConfig


class AnthropicChat(AddsBreakpoints):
    """Translator for provider type `anthropic`."""

    framing = SSE

    def __init__(self, provider: ProviderConfig, clock: Callable[[], float] = time.time) -> None:
        self.provider = provider
        self._clock = clock  # only for the `created` field OpenAI shapes carry
        base = provider.base_url.rstrip("/")
        # accept a base_url given with or without the /v1 suffix
        self.root = base[:-3] if base.endswith("/v1") else base
        headers = {"content-type": "application/json", "anthropic-version": provider.anthropic_version}
        if provider.api_key:
            headers["x-api-key"] = provider.api_key
        headers.update(provider.headers)
        self._headers = headers

    def headers_for(self, stream: bool) -> dict[str, str]:
        return {**self._headers, "accept": "text/event-stream" if stream else "application/json"}

    @property
    def sends_stream_options(self) -> bool:
        return False  # Anthropic always reports usage in a stream

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        # Anthropic always reports usage in a stream: there is no stream_options to send
        out = anthropic_body(body, model, stream=stream)
        dropped = fit(out, auto=self.breakpoints.auto, scan=self.breakpoints.scan)
        return UpstreamRequest("POST", f"{self.root}/v1/messages", self.headers_for(stream),
                               encode(out), stream, dropped)

    def embeddings_request(self, body: Mapping[str, Any], model: str) -> UpstreamRequest:
        """Anthropic serves no embeddings. The request goes to the configured host anyway, so the
        client gets Anthropic's own 404 passed through instead of a gateway-made guess."""
        out = {**body, "model": model}
        return UpstreamRequest("POST", f"{self.root}/v1/embeddings", self.headers_for(False),
                               encode(out), False)

    def stream_parser(self) -> AnthropicStreamParser:
        return AnthropicStreamParser(int(self._clock()))

    def parse_body(self, body: bytes) -> ParsedBody:
        return parse_anthropic_body(body, int(self._clock()))

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return classify_anthropic_http_error(status, headers, body)


