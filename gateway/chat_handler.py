"""A streamed chat request end to end: attempts (with keep-alive while waiting), commit, relay.

The HTTP status is not sent before the first token, so a failure until then is a proper HTTP error
(or a retry). If no token has come after `server.keepalive_after_s`, headers go out early with
`: keepalive` comments so proxies in front don't time out; a failure after that is one error event
(CONTRACT §4.2).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from aiohttp import web

from gateway import cache
from gateway.app_keys import STATE
from gateway.attempts import Won, run_attempts
from gateway.chat_body import redact_body
from gateway.chat_relay import relay
from gateway.chat_stream import OpenedStream, open_stream
from gateway.config_types import Deployment
from gateway.context import RequestContext
from gateway.core.sse import KEEPALIVE
from gateway.errors import GatewayError
from gateway.metrics import record_usage
from gateway.runtime import Runtime

KEEPALIVE_EVERY_S = 5.0


async def stream_chat(request: web.Request, rt: Runtime, ctx: RequestContext) -> web.StreamResponse:
    async def attempt(d: Deployment) -> OpenedStream:
        return await open_stream(rt, ctx, d)

    task = asyncio.ensure_future(run_attempts(rt, ctx, attempt, discard=OpenedStream.close))
    client: web.StreamResponse | None = None
    opened: OpenedStream | None = None
    try:
        done, _ = await asyncio.wait({task}, timeout=rt.config.server.keepalive_after_s)
        while not done:
            if client is None:
                client = await commit(request, ctx, None)
            await client.write(KEEPALIVE)
            done, _ = await asyncio.wait({task}, timeout=KEEPALIVE_EVERY_S)
        try:
            won, opened = task.result()
        except GatewayError as err:
            if client is None:
                raise
            await client.write(err.sse_bytes())
            ctx.stream_error = err.code
            return client
        ctx.deployment = won.deployment
        _record_winner(rt, ctx, won, opened)
        if client is None:
            client = await commit(request, ctx, won)
        meta = next((ch.obj for ch in opened.pending if ch.obj), {})
        ended = opened
        await relay(rt, ctx, opened, client, rt.safety.models[ctx.model.name].start(),
                    lambda: _record_end(rt, ctx, ended))
        if ctx.cache_store and ctx.stream_error is None:
            await _store(rt, request, ctx, opened, meta)
        return client
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if opened is not None:
            opened.close()


async def commit(request: web.Request, ctx: RequestContext, won: Won | None) -> web.StreamResponse:
    """Send the 200 and the SSE headers. Nothing can turn into an HTTP error after this."""
    headers = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no", "x-request-id": ctx.request_id}
    if won is not None:
        headers["x-gateway-deployment"] = won.deployment.label
        headers["x-gateway-attempts"] = str(won.attempts)
    resp = web.StreamResponse(status=200, headers=headers)
    await resp.prepare(request)
    return resp


async def _store(rt: Runtime, request: web.Request, ctx: RequestContext, opened: OpenedStream,
                 meta: dict[str, Any]) -> None:
    """Cache what the client read: the assembled answer, masked one-shot (equal to the streamed text)."""
    body = opened.assembler.completion(id=str(meta.get("id", "")), model=str(meta.get("model", "")),
                                       created=int(meta.get("created", 0) or 0))
    redact_body(rt, ctx, body)
    await cache.store(rt, request.app[STATE], ctx, body)


def _record_winner(rt: Runtime, ctx: RequestContext, won: Won, opened: OpenedStream) -> None:
    d = won.deployment
    if opened.assembler.first_token:
        rt.metrics.upstream_ttft.labels(ctx.model.name, d.provider, d.label).observe(
            opened.t_first - opened.t_sent)


def _record_end(rt: Runtime, ctx: RequestContext, opened: OpenedStream) -> None:
    d = ctx.deployment
    assert d is not None
    usage = opened.assembler.usage
    ctx.usage = usage
    ctx.cost_usd = record_usage(rt.metrics, ctx.model.name, d, usage)
    if usage is not None and usage.output > 1 and opened.assembler.first_token:
        per_token = (time.perf_counter() - opened.t_first) / (usage.output - 1)
        rt.metrics.tpot.labels(ctx.api, ctx.model.name, d.provider).observe(per_token)
