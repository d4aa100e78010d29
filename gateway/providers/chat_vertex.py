"""Chat Completions to Vertex AI (`type: vertex`, docs/cloud-providers.md), signed with a Google OAuth2 bearer token
(`upstream.google`).

`claude-*` models are Anthropic's on Vertex: `POST {base}/v1/projects/{project}/locations/{location}/
publishers/anthropic/models/{model}:rawPredict` (`:streamRawPredict` for a stream) with Anthropic's
Messages body, `anthropic_version: vertex-2023-10-16` in it and no `model` (it is in the URL), answered
in Anthropic's own shapes. Every other model is Google's: `…/publishers/google/models/{model}
:generateContent` (`:streamGenerateContent?alt=sse`), through the Google translator (`GoogleChat`).

The cell serves both families, and a stream parser is made before the request is: `ByFirstEvent` reads
the first event to tell them apart (Anthropic's events carry a `type`, Google's responses never do).
Errors are Google's shape (`error.status`) from Vertex itself, Anthropic's (`error.type`) from Claude.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from gateway.core.events import Failure
from gateway.providers.base import SSE, AddsBreakpoints, ParsedBody, UpstreamRequest
from gateway.providers.convert.anthropic_request import anthropic_body
from gateway.providers.convert.anthropic_stream import AnthropicStreamParser, parse_anthropic_body
from gateway.providers.convert.cache_markers import fit
from gateway.providers.convert.google_chat import Clock, GoogleChat
from gateway.providers.convert.google_stream import GoogleStreamParser, parse_google_body
from gateway.providers.convert.vertex_endpoint import (
    ByFirstEvent,
    VertexEndpoint,
    classify_vertex_http_error,
    claude_body,
    is_anthropic_body,
    is_claude,
)
from gateway.providers.settings import ProviderConfig


class VertexChat(AddsBreakpoints):
    """Translator for provider type `vertex`."""

    framing = SSE
    sends_stream_options = False  # both families always report usage in a stream

    def __init__(self, provider: ProviderConfig, clock: Clock = time.time) -> None:
        self.provider = provider
        self.endpoint = VertexEndpoint(provider)
        self.gemini = GoogleChat(f"{self.endpoint.publishers}/google/models", provider.headers, clock)
        self._clock = clock

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        if not is_claude(model):
            return self.gemini.request(body, model, stream=stream, client_headers=client_headers,
                                       send_stream_options=False)
        anthropic = anthropic_body(body, model, stream=stream)
        dropped = fit(anthropic, auto=self.breakpoints.auto, scan=self.breakpoints.scan)
        return UpstreamRequest("POST", self.endpoint.claude_url(model, stream), self.endpoint.claude_headers(stream),
                               claude_body(anthropic, stream), stream, dropped)

    def stream_parser(self) -> ByFirstEvent:
        created = int(self._clock())
        return ByFirstEvent(lambda: AnthropicStreamParser(created), lambda: GoogleStreamParser(created))

    def parse_body(self, body: bytes) -> ParsedBody:
        """Claude's Message, Google's response, or (re-read by the pipeline) the chat.completion made of
        either: Anthropic's reader takes that too, cache writes included."""
        created = int(self._clock())
        if is_anthropic_body(body, also_completion=True):
            return parse_anthropic_body(body, created)
        return parse_google_body(body, created)

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return classify_vertex_http_error(status, headers, body)
