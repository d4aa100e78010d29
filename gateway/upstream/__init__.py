"""The only place that does outbound I/O: open an upstream request, hand back raw bytes.

HTTP/1.1 over asyncio protocols (responses framed by llhttp under our policy in the sans-I/O
`upstream.framing`, requests built by `core.http1`), pooled keep-alive connections,
TLS with the system's trust store. Every failure becomes one `UpstreamError` carrying a classified
`Failure`; messages name the deployment, never a URL or address (docs/extensions.md,
"Costs a client or an upstream can impose"). Redirects are never followed (a provider call answered with a 3xx fails as
malformed: `attempt_io.unexpected`).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

from gateway.config.types import Egress, ProviderConfig
from gateway.core.events import Failure, FailureKind
from gateway.core.http1 import HTTPError, request_head
from gateway.core.propagation import TRACE_HEADERS
from gateway.core.proxy import Proxy, ProxyError
from gateway.providers.base import UpstreamRequest
from gateway.providers.demo import MockScript
from gateway.upstream import aws as _aws  # noqa: F401  (registers the "sigv4" signer; botocore loads lazily)
from gateway.upstream import google as _google  # noqa: F401  (registers the "google" signer)
from gateway.upstream.connection import _FINISHING, HttpResponse, PoolKey, _Conn, _Pool
from gateway.upstream.errors import UpstreamError, UpstreamResponse
from gateway.upstream.mock import MockResponse
from gateway.upstream.signing import MintedCredentials, Signer
from gateway.upstream.tunnel import open_tunnel, proxy_failure, route

_NO_HEADERS: Mapping[str, str] = MappingProxyType({})
JOIN_BYTES = 64 * 1024  # a bigger request body is written after its head, not copied behind it
# a bigger one was just encoded, in this step (~1 ms a MiB): it is written in the next, not this one too
# (a 10 MiB body's encoding and write were one 20-30 ms step on a slow machine; docs/architecture.md,
# "One streamed chat request through the files")
STEP_BYTES = 1024 * 1024

__all__ = ["_FINISHING", "HttpResponse", "MockResponse", "Upstream", "UpstreamError", "UpstreamResponse"]


# the answer of a provider played in process (the built-in demo), or None for a network one
InProcess = Callable[[ProviderConfig, UpstreamRequest], MockScript | None]


def _network(provider: ProviderConfig, req: UpstreamRequest) -> MockScript | None:
    return None


class Upstream:
    """Provider and webhook requests over our own HTTP/1.1 connections (`_Conn`, pooled with keep-alive):
    a general-purpose client's per-request and per-read costs were the largest part of the gateway's
    own time on the first-token path (bench/README.md)."""

    def __init__(self, egress: Egress | None = None, in_process: InProcess = _network) -> None:
        self.egress = egress or Egress()  # HTTPS_PROXY / HTTP_PROXY / NO_PROXY, as read at start
        self.in_process = in_process  # a provider played in process (the demo's), given by the wiring
        self._pool = _Pool()
        self._tls: ssl.SSLContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.signers: Mapping[str, Signer] = {}  # provider name -> its request signer (`upstream.signing`)
        # every credential the signers get, for the scrubber; the process's, like the signers: it
        # outlives a reload, so a request of the old config is scrubbed of the new signers' too
        self.minted = MintedCredentials()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The process's event loop, looked up once: on CPython 3.11 each `get_running_loop` is a
        `getpid` system call (see `gateway/pipeline/timeouts.py`)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def close(self) -> None:
        self._pool.close()
        self.minted.close()

    def tls_context(self) -> ssl.SSLContext:
        """The system's trust store (OpenSSL's default paths, so `SSL_CERT_FILE` works as it does for
        any OpenSSL client), hostnames checked; built at the first TLS connection."""
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    async def open(self, provider: ProviderConfig, req: UpstreamRequest, label: str,
                   client_headers: Mapping[str, str] = _NO_HEADERS) -> UpstreamResponse:
        """`client_headers` (lower-case names): what the client sent; the provider's `forward_headers`
        pass through, never a field the translator set itself."""
        if (script := self.in_process(provider, req)) is not None:
            return MockResponse(script)
        t = provider.timeouts
        target = _target(req.url, label)
        proxy = route(target.host, target.port, target.tls, provider.proxy, provider.use_env_proxy, self.egress)
        headers = _forwarded(req.headers, provider.forward_headers, client_headers)
        signer = self.signers.get(provider.name)
        if signer is not None:  # last: the signature covers every header that is sent
            signer.sign(req.method, req.url, headers, req.body)
        return await self._request(req, headers, target, proxy, label, t.connect_s,
                                   t.idle_s if req.stream else None, t.total_s)

    async def _request(self, req: UpstreamRequest, headers: dict[str, str], target: _Target, proxy: Proxy | None,
                       label: str, connect_s: float, idle_s: float | None, total_s: float) -> HttpResponse:
        loop = self.loop
        if len(req.body) > STEP_BYTES:
            await asyncio.sleep(0)
        key: PoolKey = (*target.key, proxy.key if proxy is not None else "")
        conn, set_up = await self._connection(key, target, proxy, connect_s, label)
        headers.setdefault("accept-encoding", "identity")  # a compressed stream could not be relayed as it comes
        for name, value in TRACE_HEADERS.get():  # the attempt's span as the upstream's parent (docs/extensions.md,
        # "Traces")
            headers[name] = value
        path = target.path
        if proxy is not None and not target.tls:  # plain HTTP through a proxy: absolute-form (RFC 9112 §3.2.2)
            path = f"http://{target.host_header}{target.path}"
            if proxy.authorization:
                headers["proxy-authorization"] = proxy.authorization
        try:
            head = request_head(req.method, path, target.host_header, headers, len(req.body))
        except HTTPError:
            self._pool.give(conn, loop.time())
            raise UpstreamError(Failure(FailureKind.CONNECT, f"{label}: invalid request header")) from None
        conn.begin()
        resp = HttpResponse(conn, self._pool, label, idle_s, total_s)
        try:
            assert conn.transport is not None
            if len(req.body) > JOIN_BYTES:  # not copied into one buffer: 10 MiB is ~5 ms of the loop
                conn.transport.writelines((head, req.body))
            else:
                conn.transport.write(head + req.body)
            resp.sent_at = time.perf_counter() - set_up  # a new connection's set-up is the network's
            await resp.start()
        except BaseException:
            conn.lost = True  # never back to the pool, whatever state the failure left it in
            resp.close()
            raise
        if resp.status == 407 and proxy is not None:  # the proxy's own answer: never read its body
            resp.close()
            raise UpstreamError(proxy_failure(label, "the proxy refused our credentials (HTTP 407)", 407))
        return resp

    async def _connection(self, key: PoolKey, target: _Target, proxy: Proxy | None, connect_s: float,
                          label: str) -> tuple[_Conn, float]:
        """A pooled connection, or a new one, and how long setting it up took (0 for a pooled one)."""
        conn = self._pool.take(key, self.loop.time())
        if conn is not None:
            return conn, 0.0
        t_connect = time.perf_counter()
        conn = await _connect(self.loop, target, proxy, key, connect_s, label,
                              self.tls_context() if target.tls else None)
        return conn, time.perf_counter() - t_connect

    async def post_json(self, url: str, payload: Any, timeout_s: float, label: str) -> Any:
        """A small JSON call (webhook guardrails), bounded by `timeout_s` in all. Raises UpstreamError on
        any failure; a body over 1 MiB is one."""
        req = UpstreamRequest("POST", url, {"content-type": "application/json", "accept": "application/json"},
                              orjson.dumps(payload), False)
        return await self._small_json(req, url, timeout_s, label)

    async def get_json(self, url: str, timeout_s: float, label: str) -> Any:
        """A small JSON document (an IdP's discovery document and JWKS), as `post_json`."""
        req = UpstreamRequest("GET", url, {"accept": "application/json"}, b"", False)
        return await self._small_json(req, url, timeout_s, label)

    async def _small_json(self, req: UpstreamRequest, url: str, timeout_s: float, label: str) -> Any:
        target = _target(url, label)
        proxy = route(target.host, target.port, target.tls, None, True, self.egress)
        try:
            async with asyncio.timeout(timeout_s):
                resp = await self._request(req, dict(req.headers), target, proxy, label, timeout_s, None, timeout_s)
                try:
                    body = await resp.read_body(1024 * 1024)
                finally:
                    resp.close()
        except TimeoutError:
            raise UpstreamError(Failure(FailureKind.TOTAL_TIMEOUT, f"{label}: total time exceeded")) from None
        if resp.status != 200:
            raise UpstreamError(Failure(FailureKind.HTTP_5XX, f"{label}: HTTP {resp.status}", status=resp.status))
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise UpstreamError(Failure(FailureKind.MALFORMED, f"{label}: not JSON")) from None


@dataclass(frozen=True, slots=True)
class _Target:
    key: tuple[str, str, int]  # the pool's key: scheme, host, port
    host: str
    port: int
    tls: bool
    host_header: str
    path: str  # the request target: path and query


@functools.lru_cache(maxsize=1024)
def _target(url: str, label: str) -> _Target:
    """Upstream URLs come from config (base URL, path, deployment): split each once, not per request."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UpstreamError(Failure(FailureKind.CONNECT, f"{label}: unsupported upstream URL"))
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target((parts.scheme, parts.hostname, port), parts.hostname, port, tls,
                   parts.netloc.rpartition("@")[2], path)


def _forwarded(own: Mapping[str, str], allowed: tuple[str, ...], client: Mapping[str, str]) -> dict[str, str]:
    headers = dict(own)
    if allowed and client:
        taken: set[str] | None = None  # the translator's own names, lower-cased when a client sent one
        for name in allowed:  # lower-case, and never a credential (config.edges.NEVER_FORWARDED)
            value = client.get(name)
            if value is None:
                continue
            if taken is None:
                taken = {k.lower() for k in own}
            if name not in taken:
                headers[name] = value
    return headers


async def _connect(loop: asyncio.AbstractEventLoop, target: _Target, proxy: Proxy | None, key: PoolKey,
                   connect_s: float, label: str, tls: ssl.SSLContext | None) -> _Conn:
    """A new connection: direct, to the proxy (plain HTTP), or through a CONNECT tunnel (TLS)."""
    try:
        async with asyncio.timeout(connect_s):
            if proxy is not None and tls is not None:
                conn = _Conn(loop, key)
                await open_tunnel(loop, proxy, target.host, target.port, tls, conn)
                return conn
            host, port = (proxy.host, proxy.port) if proxy is not None else (target.host, target.port)
            _, conn = await loop.create_connection(
                lambda: _Conn(loop, key), host, port,
                ssl=tls, server_hostname=target.host if tls is not None else None)
    except TimeoutError:
        raise UpstreamError(Failure(FailureKind.CONNECT, f"{label}: timed out connecting")) from None
    except ProxyError as exc:  # its message names a status, never the proxy's address or credentials
        raise UpstreamError(proxy_failure(label, str(exc), exc.status)) from None
    except OSError:  # ssl.SSLError included: a certificate that does not verify is a failed connection
        raise UpstreamError(Failure(FailureKind.CONNECT, f"{label}: cannot connect")) from None
    return conn
