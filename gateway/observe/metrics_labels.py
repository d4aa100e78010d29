"""The fixed label values of the gateway's metrics (docs/reference.md, "Metrics"): every value a label
that does not come from config can take. The series of each are created at zero (`metrics.preinitialise`)
where dashboards read them."""

from __future__ import annotations

# `llm_gateway_upstream_attempts_total{outcome}`: `client_cancelled`, an attempt its request's cancellation
# cut before it had another outcome (the client went away); one that delivered its first token is `ok`
ATTEMPT_OUTCOMES = ("ok", "connect_error", "http_429", "http_5xx", "http_4xx", "inband_error",
                    "first_token_timeout", "idle_timeout", "quota", "hedge_cancelled", "client_cancelled")
TOKEN_TYPES = ("input", "output", "cached_input", "cache_creation_input", "reasoning")
AFFINITY_RESULTS = ("kept", "moved", "new")
OUTCOMES = ("ok", "client_error", "auth_error", "rate_limited", "guardrail_blocked", "upstream_error",
            "timeout", "cancelled")
STORE_OPS = ("refresh", "ledger", "admin")
HTTP_REFUSED_REASONS = ("max_connections", "head_timeout", "body_timeout", "send_stall", "bad_request", "too_large",
                        "upgrade", "tls_handshake", "websocket_limit")
STREAM_FAILURE_REASONS = ("inband_error", "early_eof", "idle_timeout", "total_timeout", "malformed",
                          "connect_error")
# `llm_gateway_websocket_refused_total{reason}`: a WebSocket upgrade refused before the `101`
# (`apis/responses_ws.py`): on another route or method (426), a bad handshake (400), an Origin not allowed
# (403), a key or token refused (401), a token whose groups grant nothing (403), the caller's cap (429)
WEBSOCKET_REFUSED_REASONS = ("upgrade_required", "handshake", "origin", "auth", "permission_denied",
                             "websocket_limit")
