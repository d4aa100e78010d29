"""The Messages API (`POST /v1/messages`) to Vertex AI. `claude-*` models natively: the client's body
as it came (every field, `thinking` and `tools` included) with `anthropic_version: vertex-2023-10-16` and
no `model`, to `:rawPredict` / `:streamRawPredict`, the client's `anthropic-beta` passed on, and
Anthropic's events read as they are (`AnthropicMessagesStreamParser`). Other models through the
Google translator (`MessagesViaGoogle` on the chat cell). URLs, headers and error classification are
the chat cell's (`chat_vertex`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.events import Failure
from gateway.core.messages.stream import MessagesStreamParser
from gateway.providers.base import SSE, AddsBreakpoints, ParsedBody, UpstreamRequest
from gateway.providers.chat_vertex import VertexChat
from gateway.providers.convert.anthropic_messages import AnthropicMessagesStreamParser, parse_messages_body
from gateway.providers.convert.cache_markers import fit
from gateway.providers.convert.messages_chat_bridge import MessagesViaGoogle
from gateway.providers.convert.vertex_endpoint import ByFirstEvent, claude_body, is_anthropic_body, is_claude
from gateway.providers.settings import ProviderConfig


class VertexMessages(AddsBreakpoints):
    """Provider type `vertex`."""

    framing = SSE
    sends_stream_options = False

    def __init__(self, provider: ProviderConfig) -> None:
        self.chat = VertexChat(provider)
        self.gemini = MessagesViaGoogle(self.chat.gemini)

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        if not is_claude(model):
            return self.gemini.request(body, model, stream=stream, client_headers=client_headers,
                                       send_stream_options=False)
        endpoint = self.chat.endpoint
        headers = endpoint.claude_headers(stream)
        beta = client_headers.get("anthropic-beta")
        if beta:
            headers["anthropic-beta"] = beta  # Claude Code's betas, as on Anthropic's own API
        out = dict(body)
        dropped = fit(out, auto=self.breakpoints.auto, scan=self.breakpoints.scan)
        return UpstreamRequest("POST", endpoint.claude_url(model, stream), headers, claude_body(out, stream),
                               stream, dropped)

    def stream_parser(self) -> MessagesStreamParser:
        parser: MessagesStreamParser = ByFirstEvent(AnthropicMessagesStreamParser, self.gemini.stream_parser)
        return parser

    def parse_body(self, body: bytes) -> ParsedBody:
        return parse_messages_body(body) if is_anthropic_body(body) else self.gemini.parse_body(body)

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return self.chat.classify_http_error(status, headers, body)

    def count_tokens_request(self, body: Mapping[str, Any], model: str,
                             client_headers: Mapping[str, str]) -> UpstreamRequest | None:
        return None  # the route answers with an estimate

