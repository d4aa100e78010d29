"""The Messages API (`POST /v1/messages`) to AWS Bedrock Runtime (provider type `bedrock`, docs/cloud-providers.md).

Claude models are served natively: the client's body goes to InvokeModel as Bedrock takes it (no
`model` or `stream`, `anthropic_version: bedrock-2023-05-31`, the client's `anthropic-beta` header as
`anthropic_beta`; `convert.bedrock_endpoint.claude_body`), and the answer is Anthropic's own, its stream
events relayed as their bytes once the stream showed it is Claude's (`native`). Every other model goes
through Converse, translated to and from the Messages shape (`convert.bedrock_converse`).
`/v1/messages/count_tokens` goes to CountTokens for Claude foundation models (an inference profile is
counted with its model, a profile ARN and other models are estimated by the route): the InvokeModel body
it stands for, and Bedrock's `{"inputTokens"}` back as `{"input_tokens"}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core.events import Failure
from gateway.core.messages.wire import MessagesEvent, malformed, parse_event
from gateway.core.sse import SSEEvent
from gateway.providers.base import AddsBreakpoints, Framing, ParsedBody, UpstreamRequest
from gateway.providers.convert.anthropic_messages import AnthropicMessagesStreamParser, parse_messages_body
from gateway.providers.convert.bedrock_converse import (
    CONVERSE_EVENTS,
    ConverseStream,
    anthropic_answer,
    converse_body,
    unplaced_markers,
)
from gateway.providers.convert.bedrock_endpoint import (
    EVENTSTREAM,
    BedrockEndpoint,
    classify_bedrock_http_error,
    claude_body,
    count_model,
    count_tokens_body,
    is_claude,
)
from gateway.providers.convert.bedrock_endpoint import count_tokens_answer as bedrock_count_answer
from gateway.providers.convert.cache_markers import fit
from gateway.providers.settings import ProviderConfig


class BedrockMessagesStreamParser:
    """Claude's events read natively; ConverseStream's translated into Messages events. `native` turns
    on at Claude's first event (not before: a Converse stream must never be read by its bytes)."""

    __slots__ = ("_claude", "_converse", "native")

    def __init__(self) -> None:
        self.native = False
        self._claude = AnthropicMessagesStreamParser()
        self._converse = ConverseStream()

    def parse(self, event: SSEEvent) -> list[MessagesEvent]:
        name = event.event
        if name not in CONVERSE_EVENTS:
            if not self._converse.started and name != "error":
                self.native = True
            return self._claude.parse(event)
        events = self._converse.read(event)
        if events is None:
            return [malformed(event.data, name)]
        return [parse_event(e, None) for e in events]

    def finish(self) -> list[MessagesEvent]:
        return [parse_event(e, None) for e in self._converse.finish()]


class BedrockMessages(AddsBreakpoints):
    """Translator for provider type `bedrock`, Messages schema."""

    framing: Framing = EVENTSTREAM
    sends_stream_options = False

    def __init__(self, provider: ProviderConfig) -> None:
        self.endpoint = BedrockEndpoint(provider)

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        claude, anthropic = is_claude(model), dict(body)
        bp = self.breakpoints  # Converse's cachePoints are made of the markers; auto is for Claude only
        dropped = fit(anthropic, auto=bp.auto and claude, scan=bp.scan)
        out = claude_body(anthropic, client_headers) if claude else converse_body(anthropic)
        if not claude and bp.scan:  # and those Converse has no place for, dropped there
            dropped += unplaced_markers(anthropic)
        return UpstreamRequest("POST", self.endpoint.url(model, stream), self.endpoint.headers_for(stream),
                               orjson.dumps(out), stream, dropped)

    def stream_parser(self) -> BedrockMessagesStreamParser:
        return BedrockMessagesStreamParser()

    def parse_body(self, body: bytes) -> ParsedBody:
        return parse_messages_body(anthropic_answer(body))

    def count_tokens_request(self, body: Mapping[str, Any], model: str,
                             client_headers: Mapping[str, str]) -> UpstreamRequest | None:
        counted = count_model(model)
        if counted is None:
            return None
        out = count_tokens_body(body, client_headers)
        return UpstreamRequest("POST", self.endpoint.count_url(counted), self.endpoint.headers_for(False),
                               orjson.dumps(out), False)

    def count_tokens_answer(self, body: bytes) -> bytes:
        return bedrock_count_answer(body)

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return classify_bedrock_http_error(status, headers, body)
