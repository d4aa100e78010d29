"""Chat Completions to Anthropic's native Messages API (`POST {base_url}/v1/messages`), both ways.

The request is translated by `convert.anthropic_request`, the stream and the body back by
`convert.anthropic_stream`; this module is the translator the registry builds for provider type
`anthropic`, and the HTTP error classification. Clients only ever see OpenAI shapes (docs/reference.md, "Routes").
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gateway.core.events import Failure, FailureKind, Finish, InbandError, StreamEvent, Usage
from gateway.core.json_body import encode
from gateway.core.messages.wire import UsageCounts, classify_anthropic_error
from gateway.providers.base import SSE, AddsBreakpoints, ParsedBody, UpstreamRequest
from gateway.providers.chat_openai import parse_openai_body
from gateway.providers.convert.anthropic_request import anthropic_body
from gateway.providers.convert.anthropic_stream import AnthropicStreamParser, finish_reason, message_events
from gateway.providers.convert.cache_markers import fit
from gateway.providers.convert.chat_chunks import completion_body
from gateway.providers.retry_after import with_retry_after
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


def parse_anthropic_body(body: bytes, created: int) -> ParsedBody:
    """A Messages API body -> an OpenAI `chat.completion` body and its events.

    An OpenAI `chat.completion` body is read as such: the pipeline re-reads the body it already
    translated (after redaction), and must get the same events back, cache writes included."""
    try:
        obj = orjson.loads(body.strip() or b"null")
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict):
        return ParsedBody({}, [InbandError(Failure(FailureKind.MALFORMED, "upstream body is not a JSON object"))])
    if obj.get("object") == "chat.completion":
        return _reread_openai(body, obj)
    if obj.get("type") == "error" or (obj.get("error") is not None and "content" not in obj):
        return ParsedBody({}, [InbandError(classify_anthropic_error(obj.get("error"), None))])
    message, events = message_events(obj)
    reason = finish_reason(obj.get("stop_reason"))
    counts = UsageCounts()
    counts.update(obj.get("usage"))
    usage = counts.event()
    events += [Finish(0, reason), usage]
    base = {"id": str(obj.get("id") or ""), "created": created, "model": str(obj.get("model") or "")}
    return ParsedBody(completion_body(base, message, reason, usage), events)


def _reread_openai(body: bytes, obj: dict[str, Any]) -> ParsedBody:
    parsed = parse_openai_body(body)
    details = obj.get("usage", {}).get("prompt_tokens_details") if isinstance(obj.get("usage"), dict) else None
    writes = details.get("cache_write_tokens") if isinstance(details, dict) else None
    if not isinstance(writes, int) or isinstance(writes, bool) or not writes:
        return parsed
    events: list[StreamEvent] = [dataclasses.replace(e, cache_creation_input=writes) if isinstance(e, Usage) else e
                                 for e in parsed.events]
    return ParsedBody(parsed.obj, events)


def classify_anthropic_http_error(status: int, headers: Mapping[str, str], body: bytes) -> Failure:
    """`{"type":"error","error":{"type":...,"message":...}}` with an HTTP status -> a Failure.
    A body that is not Anthropic's (a proxy's HTML page) is classified by its status alone."""
    try:
        obj = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        obj = None
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict) and isinstance(err.get("type"), str):
        failure = classify_anthropic_error(err, status)
    elif status == 404:  # no error object: no such endpoint at this base_url (our configuration)
        failure = Failure(FailureKind.NOT_FOUND, f"upstream answered HTTP {status}", status=status)
    else:
        failure = classify_anthropic_error({"message": f"upstream answered HTTP {status}"}, status)
    return with_retry_after(failure, headers)
