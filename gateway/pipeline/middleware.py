"""Every API request: route, request id, log context, GatewayError -> OpenAI error JSON, metrics,
settlement, one log line."""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Mapping

import orjson
import structlog

from gateway.config.types import CorsConfig
from gateway.core.api import ClientApi
from gateway.errors import GatewayError, MethodNotAllowed, NotFound
from gateway.http import Response, StreamResponse
from gateway.observe.context import Admission, RequestContext
from gateway.observe.logs import info_enabled
from gateway.observe.record import End, RequestRecorder, stream_outcome
from gateway.pipeline.cors import applies, cors_headers, preflight
from gateway.pipeline.exchange import GatewayRequest, Handler
from gateway.pipeline.ids import REQUEST_IDS
from gateway.pipeline.ledger import commit_spend
from gateway.pipeline.limits import needs_settle, settle
from gateway.pipeline.request import is_anthropic

log = structlog.get_logger("gateway")
_NO_ADMISSION = Admission()
ADMIN_PREFIX = "/admin/v1/"
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def client_request_id(headers: Mapping[str, str]) -> str:
    """The request's id: the client's `x-request-id` when it is safe to echo (docs/reference.md, "Response
    headers"), else one drawn."""
    given = headers.get("x-request-id", "")
    return given if given and _SAFE_ID.match(given) else REQUEST_IDS.new()


def _anthropic_models(path: str, headers: Mapping[str, str]) -> bool:
    """A models request from an Anthropic client: its errors are in Anthropic's shape too."""
    return path.startswith("/v1/models") and is_anthropic(headers)


def error_response(err: GatewayError, request_id: str, anthropic: bool = False) -> Response:
    """`anthropic`: in Anthropic's shape (an API whose errors are, or a models request from an Anthropic
    client); else OpenAI's."""
    headers = {"x-request-id": request_id, **err.headers}
    body = orjson.dumps(err.anthropic_body()) if anthropic else err.json_bytes()
    return Response(status=err.status, body=body, content_type="application/json", headers=headers)


def refused_response(apis: Mapping[str, ClientApi], err: GatewayError, path: str,
                     headers: Mapping[str, str], cors: CorsConfig | None = None) -> Response:
    """A request refused before it was routed (by the HTTP server: 413, 431...; a WebSocket handshake) in
    its route's error shape (Anthropic's on `/v1/messages`: docs/messages.md, Errors), with the id the
    client sent; with `cors`, the CORS fields an allowed origin's answers carry (without them a browser
    page sees a network error, not the 413 it could tell its user about)."""
    api = apis.get(path)
    anthropic = api.anthropic_errors if api is not None else _anthropic_models(path, headers)
    answer = error_response(err, client_request_id(headers), anthropic)
    if cors is not None and "origin" in headers and applies(cors, path):
        answer.headers.update(cors_headers(cors, headers))
    return answer


async def _route(request: GatewayRequest) -> Response | StreamResponse:
    routes: Mapping[str, Mapping[str, Handler]] = request.app.routes
    if request.path.startswith(ADMIN_PREFIX):  # the control plane routes its own paths (docs/keys-teams-spend.md)
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


def _cors(request: GatewayRequest) -> Response | None:
    """A preflight's answer, or None with the CORS headers added to the answer to come."""
    cors = request.app.runtime.config.server.cors
    if applies(cors, request.path):
        if request.method == "OPTIONS" and "access-control-request-method" in request.headers:
            return preflight(cors, request.headers)
        request.extra_headers.update(cors_headers(cors, request.headers))
    return None


async def handle(request: GatewayRequest) -> Response | StreamResponse:
    rid = client_request_id(request.headers)
    request.request_id, request.t0 = rid, request.t0 or time.perf_counter()  # t0: read whole (http.connection)
    request.extra_headers["x-request-id"] = rid
    if "origin" in request.headers and (answer := _cors(request)) is not None:
        return answer
    api: ClientApi | None = request.app.apis.get(request.path)
    if api is None:
        try:
            return await _route(request)
        except GatewayError as err:
            return error_response(err, rid, anthropic=_anthropic_models(request.path, request.headers))
    rec = request.rec = request.app.recorder(request, api, rid)
    rec.started()
    structlog.contextvars.bind_contextvars(request_id=rid)
    end = End(500, "upstream_error", "error")
    resp: Response | StreamResponse | None = None
    try:
        resp = await _route(request)
        ctx = request.ctx
        reason = ctx.stream_error if ctx else None
        end = End(resp.status, stream_outcome(reason), reason)
        return resp
    except GatewayError as err:
        end = End(err.status, err.outcome, err.log_reason)
        resp = error_response(err, rid, anthropic=api.anthropic_errors)
        return resp
    except (asyncio.CancelledError, ConnectionResetError):
        end = End(499, "cancelled", "client_gone")  # the client went away (docs/extensions.md, "Failure semantics")
        raise
    except Exception:
        log.exception("unhandled_error", path=request.path)
        resp = error_response(GatewayError("internal gateway error"), rid, anthropic=api.anthropic_errors)
        return resp
    finally:
        await _finish(request, rec, end, resp if isinstance(resp, Response) else None)
        structlog.contextvars.unbind_contextvars("request_id")


async def _finish(request: GatewayRequest, rec: RequestRecorder, end: End, whole: Response | None) -> None:
    """The recorder writes the request's count, duration and spans; its accounts are settled; then the
    log line (after the settlement, so it carries the settled cost). A `whole` answer's log line is
    written once the answer is (`Response.after`): formatting it took ~0.2 ms of every body's first
    byte (docs/overhead.md). A stream's comes after its last byte anyway."""
    ctx: RequestContext | None = request.ctx
    adm: Admission = request.admission or _NO_ADMISSION
    outcome = end.outcome
    if ctx is not None and ctx.unanswered is not None:  # billed attempts without an answer: charged too
        ctx.fold_unanswered()
    rec.finished(ctx, adm, end)
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
        if whole is not None and not cancelled:
            whole.after = functools.partial(rec.log_line, ctx, adm, end)
        else:
            rec.log_line(ctx, adm, end)
    if cancelled:
        raise asyncio.CancelledError


async def _account(request: GatewayRequest, ctx: RequestContext, outcome: str) -> None:
    """The spend ledger's row (a whole response's, before its body leaves) and the state's counters,
    whatever the row's commit does: a budget's hold not given back would weigh on it for the period."""
    try:
        await commit_spend(request.app.runtime, ctx, outcome)
    finally:
        if needs_settle(ctx):
            await settle(request.app.state, ctx, request.app.runtime.clock())
