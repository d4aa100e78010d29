"""Opt-in CORS (Fetch standard §3.2) for browser clients of the API: a preflight answer, and the fields
an allowed origin's actual responses carry. Off while `server.cors.allow_origins` is empty, and always
off for the control plane and its console (`/admin/`).

A preflight is answered before authentication (browsers send it without credentials); the actual
request is authenticated as any other. The requested headers are echoed back for an allowed origin,
since SDKs send headers of their own (`x-stainless-*`) that no fixed list keeps up with.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config.types import CorsConfig
from gateway.http import Response

# what a browser client may read from our answers (request id, pacing, routing)
EXPOSED = ("x-request-id, retry-after, x-gateway-deployment, x-gateway-attempts, x-gateway-cache, "
           "x-ratelimit-limit-requests, x-ratelimit-remaining-requests, x-ratelimit-reset-requests, "
           "x-ratelimit-limit-tokens, x-ratelimit-remaining-tokens, x-ratelimit-reset-tokens")
METHODS = "GET, POST, OPTIONS"
ADMIN_PATHS = "/admin/"


def applies(cors: CorsConfig, path: str) -> bool:
    """CORS is for the API's browser clients; the control plane (`/admin/`) is never readable from
    another origin, whatever `allow_origins` says (docs/reference.md, `server.cors`)."""
    return bool(cors.allow_origins) and not path.startswith(ADMIN_PATHS)


def _allowed(cors: CorsConfig, origin: str) -> bool:
    return "*" in cors.allow_origins or origin in cors.allow_origins


def origin_allowed(cors: CorsConfig, origin: str) -> bool:
    """A page of `origin` may use the API (WebSocket mode: a browser's socket carries no preflight)."""
    return _allowed(cors, origin)


def cors_headers(cors: CorsConfig, headers: Mapping[str, str]) -> dict[str, str]:
    origin = headers.get("origin", "")
    if not _allowed(cors, origin):
        return {"Vary": "Origin"}  # no CORS fields: the browser withholds the answer from the page
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin", "Access-Control-Expose-Headers": EXPOSED}


def preflight(cors: CorsConfig, headers: Mapping[str, str]) -> Response:
    """`OPTIONS` with `Access-Control-Request-Method`: 204 with the allowed method and headers, or a
    204 without CORS fields for an origin not allowed (the browser then blocks the request)."""
    out = cors_headers(cors, headers)
    if "Access-Control-Allow-Origin" in out:
        del out["Access-Control-Expose-Headers"]
        out["Access-Control-Allow-Methods"] = METHODS
        requested = headers.get("access-control-request-headers", "")
        if requested:
            out["Access-Control-Allow-Headers"] = requested[:4096]
        out["Access-Control-Max-Age"] = str(cors.max_age_s)
    return Response(status=204, headers=out)
