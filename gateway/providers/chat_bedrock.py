"""Chat Completions to AWS Bedrock Runtime (provider type `bedrock`, docs/cloud-providers.md), both ways.

Claude models (`anthropic.` in the id): the chat request becomes Anthropic's Messages body
(`convert.anthropic_request`) sent to InvokeModel as Bedrock takes it (`convert.bedrock_endpoint.claude_body`);
the answer is Anthropic's, read by `convert.anthropic_stream`. Every other model: the same Anthropic
body becomes a Converse body, and the Converse answer an Anthropic one (`convert.bedrock_converse`), so
one reader serves both. Streams are event-stream frames, transcoded to SSE by `core.eventstream`; the
parser tells the two shapes apart by their event names. Every request is SigV4-signed by `upstream.aws`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gateway.core.events import Failure, FailureKind, InbandError
from gateway.core.sse import SSEEvent
from gateway.providers.base import AddsBreakpoints, ChatChunk, Framing, ParsedBody, UpstreamRequest
from gateway.providers.convert.anthropic_request import anthropic_body
from gateway.providers.convert.anthropic_stream import AnthropicStreamParser, parse_anthropic_body
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
    is_claude,
)
from gateway.providers.convert.cache_markers import fit
from gateway.providers.settings import ProviderConfig

MALFORMED = Failure(FailureKind.MALFORMED, "upstream sent an event that is not a JSON object")


class BedrockChatStreamParser:
    """Claude's Anthropic events as they are; ConverseStream's translated to Anthropic's first."""

    __slots__ = ("_anthropic", "_converse")
    shape = None  # every event is parsed

    def __init__(self, created: int) -> None:
        self._anthropic = AnthropicStreamParser(created)
        self._converse = ConverseStream()

    def parse(self, event: SSEEvent) -> list[ChatChunk]:
        if event.event not in CONVERSE_EVENTS:
            return self._anthropic.parse(event)
        events = self._converse.read(event)
        if events is None:
            return [ChatChunk([InbandError(MALFORMED)], None)]
        out: list[ChatChunk] = []
        for e in events:
            out += self._anthropic.parse(SSEEvent(orjson.dumps(e), e["type"]))
        return out


class BedrockChat(AddsBreakpoints):
    """Translator for provider type `bedrock`, chat schema."""

    framing: Framing = EVENTSTREAM
    sends_stream_options = False  # Bedrock streams always carry usage

    def __init__(self, provider: ProviderConfig, clock: Callable[[], float] = time.time) -> None:
        self.endpoint = BedrockEndpoint(provider)
        self._clock = clock  # only for the `created` field OpenAI shapes carry

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        anthropic = anthropic_body(body, model, stream=stream)
        claude = is_claude(model)
        bp = self.breakpoints  # Converse's cachePoints are made of the markers; auto is for Claude only
        dropped = fit(anthropic, auto=bp.auto and claude, scan=bp.scan)
        out = claude_body(anthropic, {}) if claude else converse_body(anthropic)
        if not claude and bp.scan:  # and those Converse has no place for (an image by URL), as the Messages cell
            dropped += unplaced_markers(anthropic)
        return UpstreamRequest("POST", self.endpoint.url(model, stream), self.endpoint.headers_for(stream),
                               orjson.dumps(out), stream, dropped)

    def stream_parser(self) -> BedrockChatStreamParser:
        return BedrockChatStreamParser(int(self._clock()))

    def parse_body(self, body: bytes) -> ParsedBody:
        return parse_anthropic_body(anthropic_answer(body), int(self._clock()))

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return classify_bedrock_http_error(status, headers, body)


