"""`GET /admin/`: the admin console, a static page over `/admin/v1` (docs/console.md).

Its files ship in the package (`gateway/console/`) and are read once, at import: no CDN, no build step,
no file system access per request (only names in that listing are served, so no path can climb out).
Every answer carries a strict Content-Security-Policy (no inline script or style) and the other
hardening fields; `/admin/config.json` tells the page whether it may sign in through the IdP.
"""

from __future__ import annotations

import functools
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from gateway.apis.admin_auth import control_plane
from gateway.config.types import Config
from gateway.errors import NotFound
from gateway.http import Response
from gateway.pipeline.exchange import GatewayRequest, Handler

ASSETS_DIR = Path(__file__).resolve().parent.parent / "console"
ASSET_PREFIX = "/admin/assets/"
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}


def _load() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(ASSETS_DIR.iterdir()) if p.suffix in _TYPES}


FILES = _load()


@functools.lru_cache(maxsize=8)
def security_headers(idp_origin: str | None) -> dict[str, str]:
    """The fields every console answer carries. The IdP's origin is the one other place the page may
    fetch from (its discovery document and token endpoint, for the PKCE sign-in)."""
    connect = "'self'" + (f" {idp_origin}" if idp_origin else "")
    csp = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
           f"connect-src {connect}; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
    return {"Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer", "Cross-Origin-Opener-Policy": "same-origin",
            "Cross-Origin-Resource-Policy": "same-origin",
            "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()"}


def _idp_origin(config: Config) -> str | None:
    jwt = config.auth.jwt
    if jwt is None or config.admin.console_oidc_client_id is None:
        return None
    parts = urlsplit(jwt.issuer)
    return f"{parts.scheme}://{parts.netloc}"


async def _answer(request: GatewayRequest, body: bytes, content_type: str, cache: str = "no-store") -> Response:
    rt = request.app.runtime
    config: Config = rt.config
    await control_plane(config, rt.control)  # on and off with the API: its admin keys may all be stored ones
    headers = {**security_headers(_idp_origin(config)), "Cache-Control": cache}
    return Response(body=body, content_type=content_type, headers=headers)


async def page(request: GatewayRequest) -> Response:
    """The page itself, also at `/admin/callback` (where the IdP sends the browser back with a code)."""
    return await _answer(request, FILES["index.html"], _TYPES[".html"])


async def asset(request: GatewayRequest) -> Response:
    name = request.path[len(ASSET_PREFIX):]
    body = FILES.get(name)
    if body is None or name == "index.html":
        raise NotFound("no such console asset")
    return await _answer(request, body, _TYPES[Path(name).suffix], cache="no-cache")


async def console_config(request: GatewayRequest) -> Response:
    """What the page needs to sign in through the IdP; nulls when it signs in with admin keys only."""
    config: Config = request.app.runtime.config
    jwt, client_id = config.auth.jwt, config.admin.console_oidc_client_id
    oidc = None if jwt is None or client_id is None else {"issuer": jwt.issuer, "client_id": client_id}
    return await _answer(request, orjson.dumps({"oidc": oidc}), "application/json")


async def to_page(request: GatewayRequest) -> Response:
    """`/admin` -> `/admin/` (the page's relative addresses need the slash)."""
    return Response(status=308, headers={"Location": "/admin/"})


ROUTES: dict[str, dict[str, Handler]] = {
    "/admin": {"GET": to_page},
    "/admin/": {"GET": page},
    "/admin/callback": {"GET": page},
    "/admin/config.json": {"GET": console_config},
    ASSET_PREFIX + "{id}": {"GET": asset},
}
