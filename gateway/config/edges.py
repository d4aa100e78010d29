"""The config of the gateway's edges: egress proxies (environment and per provider), client headers
passed to providers, TLS and CORS on the listener.

Proxy URLs may carry credentials (`http://user:pass@proxy:3128`): errors name the variable or key,
never the value, and the credentials live only in `Proxy.authorization` (kept out of every repr).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping

from gateway.config.reader import Errors, Section
from gateway.config.types import CorsConfig, Egress, TlsConfig
from gateway.core.proxy import Proxy, basic_authorization, parse_no_proxy

# Never passed through, whatever an allowlist says: the client's own credentials (the gateway key) and
# the fields that frame or route the message (RFC 9110 §7.6.1 hop-by-hop, plus what we set ourselves).
NEVER_FORWARDED = frozenset({
    "authorization", "api-key", "x-api-key", "proxy-authorization", "cookie", "host", "content-length",
    "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade", "proxy-connection",
    "accept-encoding", "content-type", "content-encoding", "expect",
})
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # a field name (RFC 9110 §5.1)


def parse_proxy_url(value: str, where: str, errs: Errors) -> Proxy | None:
    """`http://[user:password@]host[:port]`; only http:// proxies (TLS to the upstream runs inside the
    CONNECT tunnel). The message names `where`, never the value (it may hold a password)."""
    try:
        parts = urllib.parse.urlsplit(value.strip())
        port = parts.port
    except ValueError:
        errs.add(where, "not a valid proxy URL")
        return None
    if parts.scheme != "http" or not parts.hostname:
        errs.add(where, "must be an http://host[:port] proxy URL")
        return None
    auth = None
    if parts.username is not None:
        auth = basic_authorization(urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
    return Proxy(parts.hostname, port or 80, auth)


def egress_from_env(env: Mapping[str, str], errs: Errors) -> Egress:
    """HTTPS_PROXY for https:// upstreams, HTTP_PROXY for http:// ones, NO_PROXY for hosts reached
    directly; the lower-case spellings win, as in curl and Python's urllib."""
    def read(name: str) -> tuple[str, str] | None:
        for spelled in (name.lower(), name):
            if env.get(spelled, "").strip():
                return spelled, env[spelled]
        return None

    proxies: list[Proxy | None] = []
    for name in ("HTTPS_PROXY", "HTTP_PROXY"):
        found = read(name)
        proxies.append(parse_proxy_url(found[1], f"environment {found[0]}", errs) if found else None)
    no_proxy = read("NO_PROXY")
    return Egress(https=proxies[0], http=proxies[1], no_proxy=parse_no_proxy(no_proxy[1]) if no_proxy else ())


def provider_proxy(s: Section) -> tuple[Proxy | None, bool]:
    """`proxy:` of one provider: a URL (always through it), `false` (always direct), or absent (the
    environment decides). Returns (proxy, use_env_proxy)."""
    if not s.has("proxy"):
        return None, True
    raw = s.raw["proxy"]
    if raw is False or raw == "":
        return None, False
    if not isinstance(raw, str):
        s.errs.add(s.at("proxy"), f"must be an http:// URL or false, got {type(raw).__name__}")
        return None, True
    return parse_proxy_url(raw, s.at("proxy"), s.errs), False


def forward_headers(s: Section, default: tuple[str, ...]) -> tuple[str, ...]:
    if not s.has("forward_headers"):
        return default
    names = tuple(n.lower() for n in s.strings("forward_headers"))
    for i, name in enumerate(names):
        if not _TOKEN.match(name):
            s.errs.add(f"{s.at('forward_headers')}[{i}]", "not a header name")
        elif name in NEVER_FORWARDED:
            s.errs.add(f"{s.at('forward_headers')}[{i}]", f'"{name}" is never forwarded (a credential or framing)')
    return names


def tls(s: Section) -> TlsConfig | None:
    if not s.raw:
        return None
    cert, key = s.get("cert_file", str, ""), s.get("key_file", str, "")
    if not cert:
        s.errs.add(s.at("cert_file"), "required when server.tls is set")
    if not key:
        s.errs.add(s.at("key_file"), "required when server.tls is set")
    return TlsConfig(cert, key, s.get("key_password", str, "") or None)


def cors(s: Section) -> CorsConfig:
    d = CorsConfig()
    origins = s.strings("allow_origins")
    for i, origin in enumerate(origins):
        if origin != "*" and not re.match(r"^https?://[^/\s]+$", origin):
            s.errs.add(f"{s.at('allow_origins')}[{i}]", 'must be "*" or an origin like https://app.example.com')
    return CorsConfig(allow_origins=origins, max_age_s=s.integer("max_age_s", d.max_age_s, 0))
