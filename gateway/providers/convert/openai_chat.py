"""OpenAI's Chat Completions as the gateway reads it, sans I/O: the stream parser (whole chunks, or their bytes once the
envelope is learned), a body's events, and an HTTP error's classification. Every OpenAI-compatible cell
reads its answers with them, and the translating parsers re-read their own output with `parse_openai_body`."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from mypy_extensions import mypyc_attr

from gateway.core.chat.shape import ContentShape
from gateway.core.chat.wire import chunk_events, content_only, other_chunk_events
from gateway.core.error_object import classify_error_object
from gateway.core.events import DeltaKind, Failure, FailureKind, OutputDelta
from gateway.core.sse import DONE, SSEEvent
from gateway.providers.base import ChatChunk, ParsedBody
from gateway.providers.retry_after import with_retry_after

_CONTENT = DeltaKind.CONTENT


@mypyc_attr(allow_interpreted_subclasses=True)  # a provider's own translator extends it (docs/compiled.md)
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
        if content is None:  # a chunk that is not an object carries no `obj` (a malformed event says why)
            return [ChatChunk(other_chunk_events(obj), obj if isinstance(obj, dict) else None, data)]
        if not content:
            return [ChatChunk([], obj, data)]
        if shape is not None:
            shape.learn(data, content)
        return [ChatChunk([OutputDelta(obj["choices"][0].get("index", 0), _CONTENT, content)], obj, data)]


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
