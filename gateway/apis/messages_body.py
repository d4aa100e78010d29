"""The Messages API's whole answers: a non-stream request, a cache hit, and `POST /v1/messages/count_tokens`.

A body is masked with the one-shot redactor (`text` and `thinking` blocks, per the profile's scope) and
judged whole, like a chat body. The cache keeps the masked Message object and serves it as a body or, to
a stream, as the stream it would have been. `count_tokens` is Anthropic's: passed through to the
model's first `anthropic` deployment; a model without one gets an estimate, marked as one (see
docs/messages.md).
"""

from __future__ import annotations

from typing import Any

from gateway.config.types import Deployment
from gateway.core.messages.assemble import MessagesAssembler
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.messages.wire import map_message_texts, message_stream_events, parse_event
from gateway.http import Request, Response
from gateway.observe.context import RequestContext
from gateway.pipeline import cache
from gateway.pipeline.attempt_io import fetch_body, forwardable, raise_inband
from gateway.pipeline.attempts import run_attempts
from gateway.pipeline.body import answer_body
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import TextMap
from gateway.providers.base import MessagesBody


def assembled(msg: dict[str, Any]) -> MessagesAssembler:
    """A whole Message read as its stream would have been: the same usage, text and end."""
    asm = MessagesAssembler()
    for obj in message_stream_events(msg):
        asm.feed(parse_event(obj, None))
    return asm


async def complete_messages(request: Request, rt: Runtime, ctx: RequestContext) -> Response:
    async def attempt(d: Deployment) -> MessagesBody:
        tr = rt.messages_translator(d)
        assert tr is not None
        client_headers = forwardable(rt, d, ctx.client_headers)  # anthropic-version / -beta as the policy says
        req = tr.messages_request(ctx.body, d.model, stream=False, client_headers=client_headers)
        parsed = tr.parse_messages_body(await fetch_body(rt, d, req, tr.classify_http_error, client_headers))
        raise_inband(parsed.events)
        return parsed

    async def mask(obj: dict[str, Any]) -> int:
        return await redact_message(rt, ctx, obj)

    won, parsed = await run_attempts(rt, ctx, attempt)
    return await answer_body(rt, ctx, request.app.state, won, parsed.obj, mask, assembled)


async def redact_message(rt: Runtime, ctx: RequestContext, obj: dict[str, Any]) -> int:
    def walk(fn: TextMap) -> None:
        map_message_texts(obj, lambda _index, kind, text: fn(kind, text))

    counts = await rt.safety.models[ctx.model.name].mask_texts(rt.slicer, walk)
    return ctx.rec.redactions(counts.items())


async def store_stream(rt: Runtime, request: Request, ctx: RequestContext, opened: Any) -> None:
    """Cache what the client read: the assembled message, masked one-shot (equal to the streamed text)."""
    stream: MessagesStream = opened.stream
    obj = stream.assembler.message()
    await redact_message(rt, ctx, obj)
    await cache.store(rt, request.app.state, ctx, obj)


def hit_stream(obj: dict[str, Any], ctx: RequestContext) -> bytes:
    """A cached Message as the stream it would have been (CONTRACT §4.8)."""
    stream = MessagesStream(_NoParser(), "cache")
    stream.hold_message(obj)
    filt = MessagesOutputFilter(None)
    return stream.commit(filt) + stream.finish()


class _NoParser:
    """A cached answer has no upstream bytes to parse."""

    native = False

    def parse(self, event: Any) -> list[Any]:
        return []

    def finish(self) -> list[Any]:
        return []
