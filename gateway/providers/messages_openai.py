"""The Messages API (`POST /v1/messages`) to OpenAI-compatible deployments (`openai`, `azure`, the built-in
`mock`), translated both ways: the request by `messages_openai_request`, the stream and the body back by
`messages_openai_stream`. URL, headers, `stream_options` and HTTP error classification are the chat
translator's (listed first in the bases). `count_tokens` has no OpenAI counterpart: None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.events import InbandError, Usage
from gateway.core.messages.stream import MessagesStreamParser
from gateway.core.sse import SSEEvent
from gateway.providers.base import MessagesBody, ParsedBody, StreamParser, UpstreamRequest
from gateway.providers.chat_openai import OpenAIChat
from gateway.providers.convert.messages_chat_request import chat_body
from gateway.providers.convert.messages_chat_stream import MessagesFromChat, message_from_completion


class ChatMessages:
    """The Messages methods, on top of a chat translator (listed first in the bases)."""

    def chat_request(self, body: Mapping[str, Any], model: str, *, stream: bool,
                     send_stream_options: bool) -> UpstreamRequest:
        raise NotImplementedError

    def stream_parser(self) -> StreamParser:
        raise NotImplementedError

    def parse_body(self, body: bytes) -> ParsedBody:
        raise NotImplementedError

    def messages_request(self, body: Mapping[str, Any], model: str, *, stream: bool,
                         client_headers: Mapping[str, str], send_stream_options: bool = True) -> UpstreamRequest:
        return self.chat_request(chat_body(body), model, stream=stream, send_stream_options=send_stream_options)

    def messages_stream_parser(self) -> MessagesStreamParser:
        return MessagesFromChat(_WholeChunks(self.stream_parser()))

    def parse_messages_body(self, body: bytes) -> MessagesBody:
        parsed = self.parse_body(body)
        errors = [e for e in parsed.events if type(e) is InbandError]
        if errors or not parsed.obj:
            return MessagesBody({}, list(errors) or parsed.events)
        usage = next((e for e in reversed(parsed.events) if type(e) is Usage), None)
        assert usage is None or isinstance(usage, Usage)
        return MessagesBody(message_from_completion(parsed.obj, usage), [])

    def count_tokens_request(self, body: Mapping[str, Any], model: str,
                             client_headers: Mapping[str, str]) -> UpstreamRequest | None:
        return None


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


class OpenAIMessages(OpenAIChat, ChatMessages):
    """Provider type `openai`."""
