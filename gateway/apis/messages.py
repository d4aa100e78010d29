"""`POST /v1/messages`: the Anthropic Messages API (Claude Code, the Anthropic SDKs), streamed or not.

Parse and authorise as chat does (the gateway key may come in `x-api-key`), run input guardrails on
`system` and the messages' text, then the same attempt loop over the model's deployments that serve the
Messages API: `anthropic` natively, the OpenAI-compatible ones through a translator. A stream is held
until its first output token, with keep-alive comments while waiting (CONTRACT §4.2), then relayed by
`pipeline.held_end`; errors are Anthropic's shape (`{"type":"error","error":{...}}`, in a stream
`event: error`). `?beta=true` (Claude Code's) is accepted and not forwarded: the betas travel in the
`anthropic-beta` header, which is.
"""

from __future__ import annotations

from typing import Any

from gateway.apis.catalog import MESSAGES
from gateway.apis.messages_attempt import OpenedMessages, open_messages
from gateway.apis.messages_body import complete_messages, hit_stream, store_stream
from gateway.config.types import Deployment
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.errors import GatewayError, InvalidRequest
from gateway.http import Request, Response, StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline import cache
from gateway.pipeline.first_token import serve_stream
from gateway.pipeline.guardrails import check_input
from gateway.pipeline.held_end import HeldEndRelay, relay_held_end
from gateway.pipeline.limits import admit
from gateway.pipeline.request import keep_serving, redact_input_slots, resolve
from gateway.pipeline.runtime import Runtime

_TEXT_PARTS = frozenset({"text"})


async def messages(request: Request) -> Response | StreamResponse:
    rt, ctx = await resolve(request, MESSAGES)
    text = input_text(ctx.body)
    await redact_input_slots(rt, ctx, input_slots(ctx.body))
    serving_deployments(rt, ctx)
    state = request.app.state
    await admit(rt, state, ctx)
    await check_input(rt, ctx, text)
    if cache.wanted(rt, request, ctx):
        hit = await cache.lookup(state, ctx)
        if hit is not None:
            return await cache.serve_hit(request, ctx, hit, hit_stream)
        ctx.cache_store = True
    if ctx.stream:
        return await stream_messages(request, rt, ctx)
    return await complete_messages(request, rt, ctx)


def _blocks(content: Any, slots: list[tuple[dict[str, Any], str]]) -> None:
    """The text blocks of a content array, and of the tool results inside it."""
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        if block.get("type") in _TEXT_PARTS and isinstance(block.get("text"), str):
            slots.append((block, "text"))
        elif block.get("type") == "tool_result":
            if isinstance(block.get("content"), str):
                slots.append((block, "content"))
            else:
                _blocks(block.get("content"), slots)


def input_slots(body: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Where the prompt's text lives: (object, key) of `system` and of each message's text."""
    slots: list[tuple[dict[str, Any], str]] = []
    if isinstance(body.get("system"), str):
        slots.append((body, "system"))
    else:
        _blocks(body.get("system"), slots)
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        raise InvalidRequest("messages: Field required (an array of messages)", param="messages")
    for m in msgs:
        if not isinstance(m, dict):
            raise InvalidRequest("each message must be an object", param="messages")
        if isinstance(m.get("content"), str):
            slots.append((m, "content"))
        else:
            _blocks(m.get("content"), slots)
    return slots


def input_text(body: dict[str, Any]) -> str:
    """The prompt text input guardrails judge."""
    return "\n".join(obj[key] for obj, key in input_slots(body))


def serving_deployments(rt: Runtime, ctx: RequestContext) -> None:
    """Only deployments whose provider serves the Messages API (natively or translated) are candidates."""
    keep_serving(ctx, lambda d: rt.messages_translator(d) is not None, "Messages")


async def stream_messages(request: Request, rt: Runtime, ctx: RequestContext) -> StreamResponse:
    async def attempt(d: Deployment) -> OpenedMessages:
        return await open_messages(rt, ctx, d)

    async def relay_to(opened: OpenedMessages, client: StreamResponse) -> None:
        run = rt.safety.models[ctx.model.name].start()
        filt = MessagesOutputFilter(run.factory if run else None)
        await relay_held_end(HeldEndRelay(rt, ctx, opened, client, run, filt, "message"))
        if ctx.cache_store and ctx.stream_error is None:
            await store_stream(rt, request, ctx, opened)

    return await serve_stream(request, rt, ctx, attempt, GatewayError.anthropic_sse_bytes, relay_to)
