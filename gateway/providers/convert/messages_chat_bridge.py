"""The Messages API on top of any chat cell (the Messages bridge, docs/messages.md): the request translated
to Chat Completions by `messages_chat_request`, the chat stream read by the chat cell's own parser and
turned into Anthropic events by `messages_chat_stream`, a chat body into a Message. URL, headers,
framing, `stream_options` and HTTP error classification are the chat cell's (`via_chat`). `count_tokens`
has no Chat Completions counterpart: None. `MessagesViaGoogle` carries the client's `thinking` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.events import InbandError, last_usage
from gateway.core.messages.stream import MessagesStreamParser
from gateway.core.sse import SSEEvent
from gateway.providers.base import ParsedBody, StreamParser, Translator, UpstreamRequest
from gateway.providers.convert.messages_chat_request import chat_body
from gateway.providers.convert.messages_chat_stream import MessagesFromChat, message_from_completion
from gateway.providers.convert.via_chat import ViaChat


class MessagesViaChat(ViaChat):
    """The Messages API on top of a provider's chat cell: the request translated to Chat Completions,
    the answer back; URL, headers, framing, `stream_options` and error classification are the chat
    cell's."""

    def __init__(self, chat: Translator) -> None:
        super().__init__(chat)

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        return self.chat.request(chat_body(body), model, stream=stream, client_headers=client_headers,
                                 send_stream_options=send_stream_options)

    def stream_parser(self) -> MessagesStreamParser:
        return MessagesFromChat(_WholeChunks(self.chat.stream_parser()))

    def parse_body(self, body: bytes) -> ParsedBody:
        parsed = self.chat.parse_body(body)
        errors = [e for e in parsed.events if type(e) is InbandError]
        if errors or not parsed.obj:
            return ParsedBody({}, list(errors) or parsed.events)
        return ParsedBody(message_from_completion(parsed.obj, last_usage(parsed.events)), [])

    def count_tokens_request(self, body: Mapping[str, Any], model: str,
                             client_headers: Mapping[str, str]) -> UpstreamRequest | None:
        return None  # Chat Completions servers have no token counting


class _WholeChunks:
    """A chat parser read event by event (the translation needs every chunk's typed events)."""

    __slots__ = ("_parser",)

    def __init__(self, parser: StreamParser) -> None:
        self._parser = parser

    def parse(self, event: SSEEvent) -> list[Any]:
        return self._parser.parse(event)

    @property
    def shape(self) -> None:
        return None


class MessagesViaGoogle(MessagesViaChat):
    """`MessagesViaChat` on a Google chat cell, `thinking` included."""

    def __init__(self, chat: Translator) -> None:
        super().__init__(chat)

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        out = chat_body(body)
        if isinstance(body.get("thinking"), dict):
            out["thinking"] = body["thinking"]  # read by `convert.google_request` only
        return self.chat.request(out, model, stream=stream, client_headers=client_headers,
                                 send_stream_options=send_stream_options)
