"""What WebSocket mode refuses before any response, recorded (docs/reference.md, WebSocket mode): an upgrade
refused before the `101` (its `websocket_refused` line and `llm_gateway_websocket_refused_total{reason}`)."""

from __future__ import annotations

import structlog

from gateway.core.http1_request import RequestHead
from gateway.errors import GatewayError
from gateway.http import Response
from gateway.pipeline.exchange import Host
from gateway.pipeline.middleware import refused_response

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
