"""Every API request: route, request id, log context, GatewayError -> OpenAI error JSON, metrics,
settlement, one log line."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

import orjson
import structlog

from gateway.errors import GatewayError, MethodNotAllowed, NotFound
from gateway.inbound import Handler, Request, Response, StreamResponse
from gateway.observe.context import Admission, RequestContext
from gateway.observe.logs import info_enabled
from gateway.pipeline.cors import cors_headers, preflight
from gateway.pipeline.ledger import commit_spend
from gateway.pipeline.limits import needs_settle, settle
from gateway.pipeline.request import is_anthropic

log = structlog.get_logger("gateway")
_API = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/embeddings": "embeddings",
        "/v1/messages": "messages", "/v1/messages/count_tokens": "count_tokens"}
_ANTHROPIC_SHAPE = frozenset({"/v1/messages", "/v1/messages/count_tokens"})  # errors in Anthropic's shape
UNRESOLVED = "(unresolved)"
_NO_ADMISSION = Admission()
ADMIN_PREFIX = "/admin/v1/"
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_STREAM_OUTCOME = {"guardrail": "guardrail_blocked", "idle_timeout": "timeout", "total_timeout": "timeout",
                   "first_token_timeout": "timeout", "upstream_timeout": "timeout"}


class _Ids:
    """Request ids: 16 random hex digits per process, then a counter. Unique like uuid4's 32 digits
    without its `getrandom` system call per request; re-drawn in a forked worker."""

    def __init__(self) -> None:
        self.renew()
        os.register_at_fork(after_in_child=self.renew)

    def renew(self) -> None:
        self.prefix, self.next = os.urandom(8).hex(), itertools.count().__next__

    def new(self) -> str:
        return f"{self.prefix}{self.next():016x}"


_IDS = _Ids()


def _request_id(request: Request) -> str:
    given = request.headers.get("x-request-id", "")
    return given if _SAFE_ID.match(given) else _IDS.new()


def error_response(err: GatewayError, request_id: str, path: str = "", anthropic: bool = False) -> Response:
    """`anthropic`: in Anthropic's shape whatever the path (a models request from an Anthropic client)."""
    headers = {"x-request-id": request_id, **err.headers}
    body = orjson.dumps(err.anthropic_body()) if anthropic or path in _ANTHROPIC_SHAPE else err.json_bytes()
    return Response(status=err.status, body=body, content_type="application/json", headers=headers)


async def _route(request: Request) -> Response | StreamResponse:
    routes: Mapping[str, Mapping[str, Handler]] = request.app.routes
    if request.path.startswith(ADMIN_PREFIX):  # the control plane routes its own paths (CONTRACT §11)
        return await routes[ADMIN_PREFIX]["*"](request)
    methods = routes.get(request.path)
    if methods is None:
        parent, _, leaf = request.path.rpartition("/")
        methods = routes.get(parent + "/{id}") if leaf else None  # `/v1/models/{id}`
    if methods is None:
        raise NotFound("no such route")
    handler = methods.get(request.method)
    if handler is None and request.method == "HEAD":
        handler = methods.get("GET")  # HEAD is GET without the body (RFC 9110 §9.3.2)
    if handler is None:
        raise MethodNotAllowed("method not allowed on this route", headers={"Allow": ", ".join(methods)})
    return await handler(request)


async def handle(request: Request) -> Response | StreamResponse:
    rid = _request_id(request)
    request.request_id, request.t0 = rid, time.perf_counter()
    extra = request.extra_headers
    extra["x-request-id"] = rid
    cors = request.app.runtime.config.server.cors
    if cors.allow_origins and "origin" in request.headers:
        if request.method == "OPTIONS" and "access-control-request-method" in request.headers:
            return preflight(cors, request.headers)
        extra.update(cors_headers(cors, request.headers))
    api = _API.get(request.path)
    if api is None:
        try:
            return await _route(request)
        except GatewayError as err:
            models = request.path.startswith("/v1/models") and is_anthropic(request)
            return error_response(err, rid, request.path, anthropic=models)
    metrics = request.app.metrics
    metrics.child(metrics.inflight, api).inc()
    request.trace = request.app.start_trace(request, api)
    structlog.contextvars.bind_contextvars(request_id=rid)
    end = _End(500, "upstream_error", "error")
    try:
        resp = await _route(request)
        ctx = request.ctx
        reason = ctx.stream_error if ctx else None
        end = _End(resp.status, _STREAM_OUTCOME.get(reason, "upstream_error") if reason else "ok", reason)
        return resp
    except GatewayError as err:
        end = _End(err.status, err.outcome, err.log_reason)
        return error_response(err, rid, request.path)
    except (asyncio.CancelledError, ConnectionResetError):
        end = _End(499, "cancelled", "client_gone")  # the client went away (CONTRACT §4.7)
        raise
    except Exception:
        log.exception("unhandled_error", path=request.path)
        return error_response(GatewayError("internal gateway error"), rid, request.path)
    finally:
        metrics.child(metrics.inflight, api).dec()
        await _finish(request, api, end)
        structlog.contextvars.unbind_contextvars("request_id")


@dataclass(frozen=True, slots=True)
class _End:
    """How a request ended: its status, `outcome` label, and why when it did not succeed."""

    status: int
    outcome: str
    reason: str | None


async def _finish(request: Request, api: str, end: _End) -> None:
    ctx: RequestContext | None = request.ctx
    adm: Admission = request.admission or _NO_ADMISSION
    metrics = request.app.metrics
    duration = time.perf_counter() - request.t0
    model = ctx.model.name if ctx else "unknown"  # the metric label: never the raw requested name
    stream = "true" if ctx and ctx.stream else "false"
    outcome = end.outcome
    metrics.child(metrics.requests, api, model, stream, outcome, ctx.key_name if ctx else adm.key_name).inc()
    metrics.child(metrics.duration, api, model, stream, outcome).observe(duration)
    request.trace.finish(ctx, end.status, outcome)
    cancelled = False
    unrecorded = ctx is not None and not ctx.spend_recorded and request.app.runtime.control is not None
    if ctx is not None and (needs_settle(ctx) or unrecorded):
        try:
            await asyncio.shield(_account(request, ctx, outcome))
        except asyncio.CancelledError:
            # the client hung up while the (shielded) settlement ran, typically right after reading the
            # whole answer: the request still gets its one log line, then the cancellation goes on
            cancelled = True
    if info_enabled():
        _log_line(request, ctx, adm, api, stream, end, duration)
    if cancelled:
        raise asyncio.CancelledError


async def _account(request: Request, ctx: RequestContext, outcome: str) -> None:
    """The spend ledger's row (a whole response's, before its body leaves) and the state's counters."""
    await commit_spend(request.app.runtime, ctx, outcome)
    if needs_settle(ctx):
        await settle(request.app.state, ctx)


def _deployment(ctx: RequestContext | None, end: _End) -> str | None:
    """The deployment that served; on a failure with none, the last one tried (CONTRACT §7)."""
    if ctx is None:
        return None
    if ctx.deployment is not None:
        return ctx.deployment.label
    return ctx.failed_deployment.label if ctx.failed_deployment is not None and end.reason else None


def _log_line(request: Request, ctx: RequestContext | None, adm: Admission, api: str, stream: str, end: _End,
              duration: float) -> None:
    """`model` is the configured model (`(unresolved)` with `model_unresolved`, the reason, when none
    was); `requested_model` the name as sent, cut; `reason` why a request did not succeed."""
    usage = ctx.usage if ctx else None
    key = ctx.key if ctx else adm.key
    log.info(
        "request", request_id=request.request_id, api=api, model=ctx.model.name if ctx else UNRESOLVED,
        model_unresolved=None if ctx else end.reason, requested_model=adm.requested_model,
        deployment=_deployment(ctx, end), reason=end.reason,
        key=key.name if key else None, stream=stream == "true", status=end.status,
        outcome=end.outcome, attempts=ctx.attempts if ctx else 0,
        ttft_ms=round(ctx.ttft_s * 1000, 2) if ctx and ctx.ttft_s is not None else None,
        duration_ms=round(duration * 1000, 2),
        input_tokens=usage.input if usage else None, output_tokens=usage.output if usage else None,
        cached_tokens=usage.cached_input if usage else None,
        reasoning_tokens=usage.reasoning if usage else None,
        estimated=ctx.usage_estimated if ctx else False,
        cost_usd=round(ctx.cost_usd, 8) if ctx else 0.0, redactions=ctx.redactions if ctx else 0,
        guardrails=dict(ctx.verdicts) if ctx else {}, stream_error=ctx.stream_error if ctx else None,
        cache_hit=ctx.cache_hit if ctx else False,
    )
