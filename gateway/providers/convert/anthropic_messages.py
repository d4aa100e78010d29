"""Anthropic's own Messages stream and body read as Messages events, sans I/O: the native parser of every
cell that speaks Anthropic's format to the client (Anthropic's API, Claude on Bedrock and on Vertex AI)."""

from __future__ import annotations

import orjson

from gateway.core.events import Failure, FailureKind, InbandError
from gateway.core.messages.wire import MessagesEvent, classify_anthropic_error, malformed, parse_event
from gateway.core.sse import SSEEvent
from gateway.providers.base import ParsedBody


class AnthropicMessagesStreamParser:
    """Anthropic's own events, read as they are (nothing to translate, nothing to remember)."""

    __slots__ = ()
    native = True  # the stream core may read its text deltas by their bytes

    def parse(self, event: SSEEvent) -> list[MessagesEvent]:
        data = event.data
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return [malformed(data, event.event)]
        return [parse_event(obj, data, event.event)]

    def finish(self) -> list[MessagesEvent]:
        return []


def parse_messages_body(body: bytes) -> ParsedBody:
    """A Message object, or Anthropic's error body inside a 200 (classified like an in-band error)."""
    try:
        obj = orjson.loads(body.strip() or b"null")
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict) and obj.get("type") == "error":
        return ParsedBody({}, [InbandError(classify_anthropic_error(obj.get("error"), None))])
    if not isinstance(obj, dict) or not isinstance(obj.get("content"), list):
        bad = InbandError(Failure(FailureKind.MALFORMED, "upstream answered without a message object"))
        return ParsedBody({}, [bad])
    return ParsedBody(obj, [])
