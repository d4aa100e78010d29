"""What every provider translator offers the pipeline. Translators are pure: they build requests and
parse bytes; `gateway.upstream` does the I/O.

Named `<client schema>_<backend>` (chat_openai, chat_anthropic, ...) so the folder listing is the
support matrix.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.core.chat.stream import ChatChunk, StreamParser
from gateway.core.events import Failure, StreamEvent
from gateway.core.messages.stream import MessagesStreamParser
from gateway.core.responses.stream import ResponsesStreamParser

__all__ = ["ChatChunk", "ParsedBody", "StreamParser", "UpstreamRequest"]  # the chunk types are the core's

MAX_BODY_BYTES = 32 * 1024 * 1024  # CONTRACT §5.3: a non-stream upstream body is at most 32 MiB


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes
    stream: bool


@dataclass(frozen=True, slots=True)
class ParsedBody:
    """A non-stream answer in OpenAI shape, and its typed events (usage, finish, errors)."""

    obj: dict[str, Any]
    events: list[StreamEvent]


class ChatTranslator(Protocol):
    """A per-provider translator for the Chat Completions client schema."""

    def chat_request(self, body: Mapping[str, Any], model: str, *, stream: bool,
                     send_stream_options: bool) -> UpstreamRequest: ...

    def stream_parser(self) -> StreamParser: ...

    @property
    def sends_stream_options(self) -> bool:
        """Whether `send_stream_options=True` puts `stream_options` into a stream request."""

    def parse_body(self, body: bytes) -> ParsedBody: ...

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure: ...

    def embeddings_request(self, body: Mapping[str, Any], model: str) -> UpstreamRequest: ...


def retry_after_s(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """`retry-after-ms` (OpenAI, Azure) or `Retry-After` in seconds or as an HTTP date (RFC 9110 §10.2.3).
    `headers` must have lower-case keys."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


@dataclass(frozen=True, slots=True)
class MessagesBody:
    """A non-stream answer (a Message object) and its failure, if it is an error."""

    obj: dict[str, Any]
    events: list[StreamEvent]


class MessagesTranslator(Protocol):
    """A per-provider translator for the Messages client schema."""

    def messages_request(self, body: Mapping[str, Any], model: str, *, stream: bool,
                         client_headers: Mapping[str, str], send_stream_options: bool = True) -> UpstreamRequest:
        """`send_stream_options`: a translator to a chat server asks it for usage (CONTRACT §4.5-§4.6)."""

    def messages_stream_parser(self) -> MessagesStreamParser: ...

    def parse_messages_body(self, body: bytes) -> MessagesBody: ...

    @property
    def sends_stream_options(self) -> bool:
        """Whether a stream request carries the `stream_options` the gateway adds (a chat backend)."""

    def count_tokens_request(self, body: Mapping[str, Any], model: str,
                             client_headers: Mapping[str, str]) -> UpstreamRequest | None:
        """None: this backend cannot count tokens (the route answers with a clear error)."""

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure: ...


@dataclass(frozen=True, slots=True)
class ResponsesBody:
    """A non-stream answer (a `response` object) and its typed events: output, usage, end or failure."""

    obj: dict[str, Any]
    events: list[StreamEvent]


class ResponsesTranslator(Protocol):
    """A per-provider translator for the Responses client schema."""

    def responses_request(self, body: Mapping[str, Any], model: str, *, stream: bool) -> UpstreamRequest: ...

    def responses_stream_parser(self) -> ResponsesStreamParser: ...

    def parse_responses_body(self, body: bytes) -> ResponsesBody: ...

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure: ...
