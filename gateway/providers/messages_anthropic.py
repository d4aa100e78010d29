"""The Messages API (`POST /v1/messages`) to Anthropic (`{base_url}/v1/messages`): native, no translation.

The request goes as the client sent it: `model` rewritten to the deployment's, `stream` set as the
pipeline needs, every other field (`system`, `tools`, `thinking`, `metadata`, `context_management`,
`output_config`, new ones) untouched. Of the client's headers only `anthropic-version` and
`anthropic-beta` pass through (Claude Code's betas); the client's key never does: the provider's own
`x-api-key` and configured headers are the translator's. The stream is parsed (the core holds the
preamble, redacts, judges, counts) and an unchanged event leaves as Anthropic's own bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.events import Failure
from gateway.core.json_body import encode
from gateway.providers.base import SSE, AddsBreakpoints, ParsedBody, UpstreamRequest
from gateway.providers.chat_anthropic import AnthropicChat
from gateway.providers.convert.anthropic_messages import AnthropicMessagesStreamParser, parse_messages_body
from gateway.providers.convert.cache_markers import fit
from gateway.providers.settings import ProviderConfig

PASSTHROUGH_HEADERS = ("anthropic-version", "anthropic-beta")


def passthrough_headers(client_headers: Mapping[str, str]) -> dict[str, str]:
    """The client's Anthropic protocol headers (lower-case names), and nothing else of them."""
    return {h: client_headers[h] for h in PASSTHROUGH_HEADERS if client_headers.get(h)}


class AnthropicMessages(AddsBreakpoints):
    """Provider type `anthropic`: the chat cell's headers, root URL and error classification."""

    framing = SSE
    sends_stream_options = False  # Anthropic streams always carry usage: nothing to ask

    def __init__(self, provider: ProviderConfig) -> None:
        self.endpoint = AnthropicChat(provider)

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        out = dict(body)  # Anthropic streams always carry usage: nothing to ask
        dropped = fit(out, auto=self.breakpoints.auto, scan=self.breakpoints.scan)
        out["model"] = model
        if stream:
            out["stream"] = True
        else:
            out.pop("stream", None)
        headers = {**self.endpoint.headers_for(stream), **passthrough_headers(client_headers)}
        return UpstreamRequest("POST", f"{self.endpoint.root}/v1/messages", headers, encode(out), stream,
                               dropped)

    def stream_parser(self) -> AnthropicMessagesStreamParser:
        return AnthropicMessagesStreamParser()

    def parse_body(self, body: bytes) -> ParsedBody:
        return parse_messages_body(body)

    def count_tokens_request(self, body: Mapping[str, Any], model: str,
                             client_headers: Mapping[str, str]) -> UpstreamRequest | None:
        out = {k: v for k, v in body.items() if k != "stream"}
        out["model"] = model
        headers = {**self.endpoint.headers_for(False), **passthrough_headers(client_headers)}
        url = f"{self.endpoint.root}/v1/messages/count_tokens"
        return UpstreamRequest("POST", url, headers, encode(out), False)

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return self.endpoint.classify_http_error(status, headers, body)
