"""The exact-match response cache (docs/reference.md, "Config keys", `cache`; docs/extensions.md, "HTTP").

On for a request when `cache.enabled`, the model's `cache: true`, or the header `x-gateway-cache: on`;
`x-gateway-cache: off` turns it off. The key is the normalised request plus the caller's key (by its
counter: a stored key's id), so tenants never read each other's answers, and the fingerprint of the
model's guardrails and redaction as compiled (`ModelSafety.fingerprint`), so an answer judged and
masked under one policy is never served under another (a reload that adds a rule misses what was cached
before it). Answers are stored *after* masking and judging: the cache never holds text the client could
not have read. With Redis, each tenant's answers are bounded by `cache.max_entries` and `cache.max_bytes`
(`tenant_for`). A hit makes no upstream call and is served at once; in a stream, as one content delta
(plus usage if the client asked).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
import structlog

from gateway.http import Response, StreamResponse
from gateway.observe.context import RequestContext
from gateway.observe.record import CACHE_PROVIDER
from gateway.pipeline.exchange import GatewayRequest
from gateway.pipeline.ledger import commit_spend
from gateway.pipeline.runtime import Runtime
from gateway.state.base import StateBackend, tenant_of
from gateway.state.cache_key import cache_key

log = structlog.get_logger("gateway")
HEADER = "x-gateway-cache"


def wanted(rt: Runtime, request: GatewayRequest, ctx: RequestContext) -> bool:
    choice = request.headers.get(HEADER, "").lower()
    if choice == "off":
        return False
    return choice == "on" or rt.config.cache.enabled or ctx.model.cache


def key_for(rt: Runtime, ctx: RequestContext) -> str:
    # the key's counter, not its name: a stored key's id, which a new key under a revoked one's name does
    # not share (docs/keys-teams-spend.md). No counter has a `-` alone, nor the policy digest a `:`.
    tenant = ctx.key.counter if ctx.key is not None else "-"
    policy = rt.safety.models[ctx.model.name].fingerprint
    return cache_key(f"{ctx.api}:{tenant}:{policy}", ctx.body)


def tenant_for(ctx: RequestContext) -> str:
    """Whose answers a shared store bounds this one with (`cache.max_entries`, `cache.max_bytes`): the
    key's team's, else the key's (docs/scale-out.md)."""
    key = ctx.key
    if key is None:
        return tenant_of(None, None)
    return tenant_of(key.counter, key.team.counter if key.team is not None else None)


async def lookup(rt: Runtime, state: StateBackend, ctx: RequestContext) -> dict[str, Any] | None:
    try:
        raw = await state.cache_get(key_for(rt, ctx), tenant=tenant_for(ctx))
    except Exception as exc:  # the cache is an optimisation: a failing one is a miss
        log.warning("cache_get_failed", error=type(exc).__name__)
        return None
    if raw is None:
        return None
    body = orjson.loads(raw)
    return body if isinstance(body, dict) else None


async def store(rt: Runtime, state: StateBackend, ctx: RequestContext, body: dict[str, Any]) -> None:
    try:
        await state.cache_set(key_for(rt, ctx), orjson.dumps(body), rt.config.cache.ttl_s, tenant=tenant_for(ctx))
    except Exception as exc:
        log.warning("cache_set_failed", error=type(exc).__name__)


def hit_headers(ctx: RequestContext) -> dict[str, str]:
    return {"x-request-id": ctx.request_id, HEADER: "hit", "x-gateway-attempts": "0"}


# a cached answer as the stream it would have been: the API's own events, its end included
HitRenderer = Callable[[dict[str, Any], RequestContext], bytes]


async def serve_hit(request: GatewayRequest, ctx: RequestContext, body: dict[str, Any],
                    render: HitRenderer) -> Response | StreamResponse:
    """A cached answer, at once: as a body, or as the stream `render` makes of it (every API the same)."""
    ctx.cache_hit = True
    if not ctx.stream:
        return Response(body=orjson.dumps(body), content_type="application/json", headers=hit_headers(ctx))
    headers = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", **hit_headers(ctx)}
    resp = StreamResponse(status=200, headers=headers)
    await resp.prepare(request)
    data = render(body, ctx)
    await commit_spend(request.app.runtime, ctx)
    await resp.write(data)
    # TTFT of a hit, under provider "cache" so dashboards can tell it from the providers' (docs/reference.md, "Metrics")
    ctx.ttft_s = time.perf_counter() - ctx.t_start
    ctx.rec.first_token(ctx.model.name, CACHE_PROVIDER, ctx.ttft_s)
    return resp
