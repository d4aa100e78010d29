"""A streamed chat request end to end: attempts (with keep-alive while waiting), commit, relay.

The HTTP status is not sent before the first token, so a failure until then is a proper HTTP error
(or a retry). If no token has come after `server.keepalive_after_s`, headers go out early with
`: keepalive` comments so proxies in front don't time out; a failure after that is one error event
(CONTRACT §4.2).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.apis.catalog import CHAT
from gateway.apis.chat_attempt import OpenedChat, open_stream
from gateway.apis.chat_body import complete_chat, redact_body
from gateway.config.types import Deployment
from gateway.core.chat.assemble import completion_to_chunks
from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.sse import DONE_EVENT, encode_data
from gateway.errors import GatewayError, InvalidRequest
from gateway.http import Request, Response, StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline import cache
from gateway.pipeline.first_token import serve_stream
from gateway.pipeline.guardrails import check_input
from gateway.pipeline.limits import admit
from gateway.pipeline.relay import relay
from gateway.pipeline.request import redact_input_slots, resolve
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.slicer import TextSlot


def _messages_text(body: dict[str, Any]) -> str:
    parts: list[str] = []
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest("messages must be an array", param="messages")
    for m in messages:
        if not isinstance(m, dict):
            raise InvalidRequest("each message must be an object", param="messages")
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "\n".join(parts)


def _input_slots(body: dict[str, Any]) -> list[TextSlot]:
    """Where the prompt's text lives (checked by `_messages_text` first): each message's content string
    and each content part's text."""
    slots: list[TextSlot] = []
    for m in body.get("messages") or ():
        content = m.get("content")
        if isinstance(content, str):
            slots.append((m, "content"))
        elif isinstance(content, list):
            slots.extend((p, "text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return slots


async def chat_completions(request: Request) -> Response | StreamResponse:
    rt, ctx = await resolve(request, CHAT)
    text = _messages_text(ctx.body)
    await redact_input_slots(rt, ctx, _input_slots(ctx.body))
    state = request.app.state
    await admit(rt, state, ctx)
    await check_input(rt, ctx, text)
    if cache.wanted(rt, request, ctx):
        hit = await cache.lookup(state, ctx)
        if hit is not None:
            return await cache.serve_hit(request, ctx, hit, hit_stream)
        ctx.cache_store = True
    if ctx.stream:
        return await stream_chat(request, rt, ctx)
    return await complete_chat(rt, ctx, state)


def hit_stream(body: dict[str, Any], ctx: RequestContext) -> bytes:
    """A cached completion as a stream: one content delta (plus usage if the client asked), `[DONE]`."""
    chunks = [c for c in completion_to_chunks(body) if c["choices"] or ctx.forward_usage]
    return b"".join(encode_data(orjson.dumps(c)) for c in chunks) + DONE_EVENT


async def stream_chat(request: Request, rt: Runtime, ctx: RequestContext) -> StreamResponse:
    async def attempt(d: Deployment) -> OpenedChat:
        return await open_stream(rt, ctx, d)

    async def relay_and_cache(opened: OpenedChat, client: StreamResponse) -> None:
        meta = next((ch.obj for ch in opened.stream.preamble if ch.obj), {})
        run = rt.safety.models[ctx.model.name].start()
        filt = ChatOutputFilter(run.factory if run is not None else None, ctx.forward_usage)
        await relay(rt, ctx, opened, client, run, filt)
        if ctx.cache_store and ctx.stream_error is None:
            await _store(rt, request, ctx, opened, meta)

    return await serve_stream(request, rt, ctx, attempt, GatewayError.sse_bytes, relay_and_cache)


async def _store(rt: Runtime, request: Request, ctx: RequestContext, opened: OpenedChat,
                 meta: dict[str, Any]) -> None:
    """Cache what the client read: the assembled answer, masked one-shot (equal to the streamed text)."""
    body = opened.stream.assembler.completion(id=str(meta.get("id", "")), model=str(meta.get("model", "")),
                                       created=int(meta.get("created", 0) or 0))
    await redact_body(rt, ctx, body)
    await cache.store(rt, request.app.state, ctx, body)

