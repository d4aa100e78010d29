"""What WebSocket mode refuses before any response, recorded (docs/reference.md, WebSocket mode): an upgrade
refused before the `101` (its `websocket_refused` line and `llm_gateway_websocket_refused_total{reason}`),
and a message refused before it became a response (one `request` line and its count in
`llm_gateway_requests_total`, as an HTTP request refused before its model resolved has them). Only the
refusals come here: an accepted message costs nothing of this module's. A warm-up's checks too: it calls
no model, but is refused as a response would be."""

from __future__ import annotations

import time
from typing import Any

import structlog

from gateway.apis.catalog import RESPONSES
from gateway.apis.responses_ws_channel import EventChannel
from gateway.config.types import ApiKey
from gateway.core.body_scan import Scan
from gateway.core.http1_request import RequestHead
from gateway.core.websocket import TOO_BIG, ServerSocket
from gateway.errors import GatewayError, InvalidApiKey, InvalidRequest, ModelNotFound
from gateway.http import Link, Response
from gateway.observe.context import Admission
from gateway.observe.record import End
from gateway.pipeline.auth import KeyRing, SigningKeyUnknown
from gateway.pipeline.exchange import GatewayRequest, Host
from gateway.pipeline.middleware import client_request_id, refused_response
from gateway.pipeline.request import walked_body

log = structlog.get_logger("gateway")
# an upgrade's refusal by its status, once the handshake was read (`observe.metrics_labels`): a key or
# token refused (401), a token whose groups grant nothing (403), the caller's cap (429)
_AUTH_REASONS = {401: "auth", 403: "permission_denied", 429: "websocket_limit"}


def refused_upgrade(app: Host, err: GatewayError, head: RequestHead, reason: str, logged: bool = False) -> Response:
    """An upgrade refused for its caller (a bad handshake, a key or token refused, an Origin not allowed):
    counted by `reason`, and one `websocket_refused` line, as an HTTP request refused so writes its `request`
    line, so guessed credentials leave a trace; the answer in the route's shape. `logged`: the server logs
    it itself (`http_refused`: the 426 of another route, the per-key cap's 429), counted all the same."""
    app.metrics.websocket_refused(reason)
    answer = refused_response(app.apis, err, head.path, head.headers)
    if not logged:
        log.info("websocket_refused", status=err.status, code=err.code, reason=reason,
                 request_id=answer.headers.get("x-request-id"))
    return answer


def auth_reason(err: GatewayError) -> str:
    """The `reason` of a refusal by the key check or the caller's cap."""
    return _AUTH_REASONS.get(err.status, "auth")


def oversized(close: int, frames: ServerSocket) -> bool:
    """The connection ends with our 1009: a message over `server.max_body_bytes` (not the client's own
    close with that code)."""
    return close == TOO_BIG and not frames.closed_by_peer


def refused_message(app: Host, link: Link, headers: dict[str, str], key: ApiKey | None, status: int,
                    code: str) -> None:
    """A message refused before it became a response (not read, nested too deep, too large, or closed
    with 1009): its `request` line (`transport: "websocket"`, the connection's key, no model: `(unresolved)`,
    never its content) and its count (model `unknown`), through the request's recorder as any request's."""
    head = RequestHead("POST", RESPONSES.path, "", headers, True, False, 0, False, None)
    request = GatewayRequest(app, head, b"", EventChannel(link))
    request.transport, request.t0 = "websocket", time.perf_counter()
    rid = client_request_id(headers)
    app.recorder(request, RESPONSES, rid).refused(Admission(key), End(status, "client_error", code))


async def warmup_caller(app: Host, headers: dict[str, str], body: dict[str, Any], scan: Scan) -> ApiKey | None:
    """A warm-up (`generate: false`) calls no model, but is refused as a response would be: the body's
    bounds, the key, the model; its caller's key when it passes (its budgets are the caller's to check)."""
    walked_body(body, scan)  # its conversation is kept (a chain of warm-ups grew it past a body's bounds)
    rt = app.runtime
    try:
        key = rt.keyring.authenticate(headers)
    except SigningKeyUnknown:  # its signing key left the IdP's JWKS since the upgrade
        raise InvalidApiKey("invalid token") from None
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("you must provide a model parameter", param="model")
    model = rt.model(name) or await rt.shared_model(name, None, app.state)  # as `resolve` finds it
    if model is None:
        raise ModelNotFound.named(name)
    KeyRing.authorize(key, model.name, name)
    return key
