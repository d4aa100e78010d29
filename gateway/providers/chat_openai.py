"""Chat Completions to any OpenAI-compatible `/chat/completions` server (OpenAI, vLLM, Ollama, Groq, ...).

Nothing is translated: the request passes through with `model` rewritten and usage asked for; chunks
pass through as the upstream's own bytes unless the gateway has to change them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core.chat.shape import ContentShape
from gateway.core.chat.wire import chunk_events, content_only, other_chunk_events
from gateway.core.error_object import classify_error_object
from gateway.core.events import DeltaKind, Failure, FailureKind, OutputDelta
from gateway.core.json_body import encode
from gateway.core.sse import DONE, SSEEvent
from gateway.providers.base import SSE, ChatChunk, ParsedBody, UpstreamRequest
from gateway.providers.convert.pass_through import passed_through
from gateway.providers.retry_after import with_retry_after
from gateway.providers.settings import ProviderConfig

_CONTENT = DeltaKind.CONTENT


class OpenAIStreamParser:
    """Per stream. Every chunk given to `parse` is parsed whole; a content-only one teaches `shape` the
    stream's envelope, which the relay then matches against later chunks' bytes before calling `parse`
    (`core.chat.stream.ChatStream`)."""

    __slots__ = ("shape",)

    def __init__(self, read_by_shape: bool = True) -> None:
        self.shape = ContentShape() if read_by_shape else None

    def parse(self, event: SSEEvent) -> list[ChatChunk]:
        data = event.data
        shape = self.shape
        if data[:6] == DONE:
            return [ChatChunk([], None, None, done=True)]
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return [ChatChunk(chunk_events(None), None)]
        content = content_only(obj)
        if content is None:
            return [ChatChunk(other_chunk_events(obj), obj, data)]
        if not content:
            return [ChatChunk([], obj, data)]
        if shape is not None:
            shape.learn(data, content)
        return [ChatChunk([OutputDelta(obj["choices"][0].get("index", 0), _CONTENT, content)], obj, data)]


class OpenAIChat:
    """Translator for provider type `openai`."""

    framing = SSE

    def __init__(self, provider: ProviderConfig) -> None:
        self.provider = provider
        self._headers = self._base_headers()

    def _base_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.provider.api_key:
            headers["authorization"] = f"Bearer {self.provider.api_key}"
        headers.update(self.provider.headers)
        return headers

    def url(self, path: str, model: str) -> str:
        return f"{self.provider.base_url}{path}"

    def headers_for(self, stream: bool) -> dict[str, str]:
        h = dict(self._headers)
        h["accept"] = "text/event-stream" if stream else "application/json"
        return h

    @property
    def sends_stream_options(self) -> bool:
        return True

    def request(self, body: Mapping[str, Any], model: str, *, stream: bool, client_headers: Mapping[str, str],
                send_stream_options: bool) -> UpstreamRequest:
        out = passed_through(body, model, stream=stream)
        if stream and send_stream_options:
            opts = out.get("stream_options")
            out["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
        elif stream:
            out.pop("stream_options", None)
        return UpstreamRequest("POST", self.url("/chat/completions", model), self.headers_for(stream),
                               encode(out), stream)

    def embeddings_request(self, body: Mapping[str, Any], model: str) -> UpstreamRequest:
        out = dict(body)
        out["model"] = model
        return UpstreamRequest("POST", self.url("/embeddings", model), self.headers_for(False),
                               encode(out), False)

    def stream_parser(self) -> OpenAIStreamParser:
        return OpenAIStreamParser()

    def parse_body(self, body: bytes) -> ParsedBody:
        return parse_openai_body(body)

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return classify_openai_http_error(status, headers, body)


def parse_openai_body(body: bytes) -> ParsedBody:
    try:
        obj = orjson.loads(body.strip() or b"null")  # DeepSeek may pad a body with blank lines
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict):
        return ParsedBody({}, chunk_events(None))
    return ParsedBody(obj, chunk_events(obj, message_key="message"))


def classify_openai_http_error(status: int, headers: Mapping[str, str], body: bytes) -> Failure:
    try:
        obj = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        obj = None
    err = obj.get("error") if isinstance(obj, dict) else None
    failure = classify_error_object(err if err is not None else {}, status)
    if failure.kind is FailureKind.HTTP_4XX and not isinstance(err, dict):
        # no error object: a 404 is an endpoint this server does not have (a /v1/responses routed to a
        # chat-only server), our configuration's fault, so another deployment may serve it
        kind = FailureKind.NOT_FOUND if status == 404 else FailureKind.HTTP_4XX
        failure = Failure(kind, f"upstream answered HTTP {status}", status=status)
    return with_retry_after(failure, headers)
