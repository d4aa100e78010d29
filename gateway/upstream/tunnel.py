"""Egress through an HTTP proxy: which proxy (if any) a request takes, and the CONNECT tunnel a TLS
upstream is reached through (the request and reply are the pure `core.proxy`'s; this is the I/O).

Inside the tunnel TLS runs end to end with the upstream (its certificate checked against the upstream's
name, as for a direct connection), so the proxy sees neither the provider key nor the prompts.
"""

from __future__ import annotations

import asyncio
import functools
import ssl

from gateway.config.types import Egress
from gateway.core.events import Failure, FailureKind
from gateway.core.proxy import ConnectReply, Proxy, ProxyError, bypasses, connect_request

# A proxy that answers 401, 403 or 407 refused *our* credentials (or our target): like an upstream's
# 401/403, the next deployment, then a 502 (docs/extensions.md, "Costs a client or an upstream can impose"). Other
# refusals are failed connections.
_AUTH_STATUSES = frozenset({401, 403, 407})


def proxy_failure(label: str, what: str, status: int | None) -> Failure:
    """A proxy's refusal as a classified failure. Its text is ours (`what` names a status); the proxy's
    own reason and body are never read into it: a proxy may quote the `Proxy-Authorization` it got."""
    kind = FailureKind.UPSTREAM_AUTH if status in _AUTH_STATUSES else FailureKind.CONNECT
    return Failure(kind, f"{label}: {what}", status=status if kind is FailureKind.UPSTREAM_AUTH else None)


@functools.lru_cache(maxsize=1024)
def route(host: str, port: int, tls: bool, explicit: Proxy | None, use_env: bool, egress: Egress) -> Proxy | None:
    """The proxy for one upstream: the provider's own `proxy`, else (unless it said `proxy: false`)
    HTTPS_PROXY or HTTP_PROXY by the upstream's scheme, unless NO_PROXY names the host."""
    if explicit is not None or not use_env:
        return explicit
    proxy = egress.https if tls else egress.http
    if proxy is None or bypasses(host, port, egress.no_proxy):
        return None
    return proxy


class _Tunnel(asyncio.Protocol):
    """The proxy connection until its reply to CONNECT is read (bounded by `ConnectReply`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.reply = ConnectReply()
        self.done: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not asyncio's class

    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return
        try:
            if self.reply.feed(data):
                self.done.set_result(None)
        except ProxyError as exc:
            self.done.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ProxyError("the proxy closed the connection"))


async def open_tunnel(loop: asyncio.AbstractEventLoop, proxy: Proxy, host: str, port: int,
                      tls: ssl.SSLContext, protocol: asyncio.Protocol) -> asyncio.Transport:
    """Connect to the proxy, CONNECT to `host:port`, then TLS to the upstream inside the tunnel; returns
    the TLS transport, already wired to `protocol` (whose `connection_made` has run). Raises OSError,
    ssl.SSLError or ProxyError; the caller bounds the time."""
    transport, tunnel = await loop.create_connection(lambda: _Tunnel(loop), proxy.host, proxy.port)
    try:
        transport.write(connect_request(host, port, proxy))
        await tunnel.done
        tls_transport = await loop.start_tls(transport, protocol, tls, server_hostname=host)
    except BaseException:
        transport.close()
        raise
    if tls_transport is None:  # pragma: no cover - start_tls returns None only for a closed transport
        raise ProxyError("the tunnel closed during the TLS handshake")
    protocol.connection_made(tls_transport)  # start_tls does not call it (asyncio's docs)
    return tls_transport
