"""Request id, log context, GatewayError -> OpenAI error JSON, metrics, settlement, one log line."""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.app_keys import CTX, METRICS, REQUEST_ID, STATE, T0
from gateway.context import RequestContext
from gateway.errors import GatewayError, MethodNotAllowed, NotFound, RequestTooLarge
from gateway.limits import needs_settle, settle
from gateway.logs import info_enabled

log = structlog.get_logger("gateway")
_API = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/embeddings": "embeddings"}
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_STREAM_OUTCOME = {"guardrail": "guardrail_blocked", "idle_timeout": "timeout", "total_timeout": "timeout",
                   "first_token_timeout": "timeout", "upstream_timeout": "timeout"}


def _request_id(request: web.Request) -> str:
    given = request.headers.get("x-request-id", "")
    return given if _SAFE_ID.match(given) else uuid.uuid4().hex


def error_response(err: GatewayError, request_id: str) -> web.Response:
    headers = {"x-request-id": request_id, **err.headers}
    return web.Response(status=err.status, body=err.json_bytes(), content_type="application/json",
                        headers=headers)


def _from_http_exception(exc: web.HTTPException) -> GatewayError:
    if exc.status == 404:
        return NotFound("no such route")
    if exc.status == 405:
        return MethodNotAllowed("method not allowed on this route")
    if exc.status == 413:
        return RequestTooLarge("request body is too large")
    return GatewayError(exc.reason or "error", status=exc.status, code="http_error",
                        type="invalid_request_error")


@web.middleware
async def gateway_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    rid = _request_id(request)
    request[REQUEST_ID], request[T0] = rid, time.perf_counter()
    api = _API.get(request.path)
    if api is None:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            return error_response(_from_http_exception(exc), rid)
        except GatewayError as err:
            return error_response(err, rid)
    metrics = request.app[METRICS]
    metrics.child(metrics.inflight, api).inc()
    structlog.contextvars.bind_contextvars(request_id=rid)
    status, outcome = 500, "upstream_error"
    try:
        resp = await handler(request)
        status = resp.status
        ctx = request.get(CTX)
        outcome = _STREAM_OUTCOME.get(ctx.stream_error, "upstream_error") if ctx and ctx.stream_error else "ok"
        return resp
    except GatewayError as err:
        status, outcome = err.status, err.outcome
        return error_response(err, rid)
    except web.HTTPException as exc:
        err = _from_http_exception(exc)
        status, outcome = err.status, err.outcome
        return error_response(err, rid)
    except (asyncio.CancelledError, ConnectionResetError):
        status, outcome = 499, "cancelled"  # the client went away (CONTRACT §4.7)
        raise
    except Exception:
        log.exception("unhandled_error", path=request.path)
        err = GatewayError("internal gateway error")
        return error_response(err, rid)
    finally:
        metrics.child(metrics.inflight, api).dec()
        await _finish(request, api, status, outcome)
        structlog.contextvars.unbind_contextvars("request_id")


async def _finish(request: web.Request, api: str, status: int, outcome: str) -> None:
    ctx: RequestContext | None = request.get(CTX)
    metrics = request.app[METRICS]
    duration = time.perf_counter() - request[T0]
    model = ctx.model.name if ctx else "unknown"  # never the raw requested name
    stream = "true" if ctx and ctx.stream else "false"
    metrics.child(metrics.requests, api, model, stream, outcome).inc()
    metrics.child(metrics.duration, api, model, stream, outcome).observe(duration)
    if ctx is not None and needs_settle(ctx):
        await asyncio.shield(settle(request.app[STATE], ctx))
    if not info_enabled():
        return
    usage = ctx.usage if ctx else None
    log.info(
        "request", request_id=request[REQUEST_ID], api=api, model=model,
        deployment=ctx.deployment.label if ctx and ctx.deployment else None,
        key=ctx.key.name if ctx and ctx.key else None, stream=stream == "true", status=status,
        outcome=outcome, attempts=ctx.attempts if ctx else 0,
        ttft_ms=round(ctx.ttft_s * 1000, 2) if ctx and ctx.ttft_s is not None else None,
        duration_ms=round(duration * 1000, 2),
        input_tokens=usage.input if usage else None, output_tokens=usage.output if usage else None,
        cached_tokens=usage.cached_input if usage else None,
        reasoning_tokens=usage.reasoning if usage else None,
        cost_usd=round(ctx.cost_usd, 8) if ctx else 0.0, redactions=ctx.redactions if ctx else 0,
        guardrails=dict(ctx.verdicts) if ctx else {}, stream_error=ctx.stream_error if ctx else None,
        cache_hit=ctx.cache_hit if ctx else False,
    )
