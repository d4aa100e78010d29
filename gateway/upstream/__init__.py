"""The only place that does outbound I/O: open an upstream request, hand back raw bytes.

HTTP/1.1 over asyncio protocols (responses framed by llhttp under our policy in the sans-I/O
`upstream.framing`, requests built by `core.http1`), pooled keep-alive connections,
TLS with the system's trust store. Every failure becomes one `UpstreamError` carrying a classified
`Failure`; messages name the deployment, never a URL or address (CONTRACT §5.3). Redirects are never
followed (a provider call answered with a 3xx fails as malformed: `attempt_io.unexpected`).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.config.types import ProviderConfig
from gateway.core.events import Failure, FailureKind
from gateway.core.http1 import HTTPError, request_bytes
from gateway.observe.propagation import TRACE_HEADERS
from gateway.providers.base import UpstreamRequest
from gateway.providers.registry import in_process
from gateway.upstream.connection import _FINISHING, HttpResponse, _Conn, _Pool
from gateway.upstream.errors import UpstreamError, UpstreamResponse
from gateway.upstream.mock import MockResponse

__all__ = ["_FINISHING", "HttpResponse", "MockResponse", "Upstream", "UpstreamError", "UpstreamResponse"]


class Upstream:
    """Provider and webhook requests over our own HTTP/1.1 connections (`_Conn`, pooled with keep-alive):
    a general-purpose client's per-request and per-read costs were the largest part of the gateway's
    own time on the first-token path (bench/README.md)."""

    def __init__(self) -> None:
        self._pool = _Pool()
        self._tls: ssl.SSLContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The process's event loop, looked up once: on CPython 3.11 each `get_running_loop` is a
        `getpid` system call (see `gateway/pipeline/timeouts.py`)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def close(self) -> None:
        self._pool.close()

    def tls_context(self) -> ssl.SSLContext:
        """The system's trust store (OpenSSL's default paths, so `SSL_CERT_FILE` works as it does for
        any OpenSSL client), hostnames checked; built at the first TLS connection."""
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    async def open(self, provider: ProviderConfig, req: UpstreamRequest, label: str) -> UpstreamResponse:
        if (script := in_process(provider, req)) is not None:
            return MockResponse(script)
        t = provider.timeouts
        return await self._request(req, label, t.connect_s, t.idle_s if req.stream else None, t.total_s)

    async def _request(self, req: UpstreamRequest, label: str, connect_s: float, idle_s: float | None,
                       total_s: float) -> HttpResponse:
        target = _target(req.url, label)
        loop = self.loop
        conn = self._pool.take(target.key, loop.time()) or await _connect(
            loop, target, connect_s, label, self.tls_context() if target.tls else None)
        headers = dict(req.headers)
        headers.setdefault("accept-encoding", "identity")  # a compressed stream could not be relayed as it comes
        for name, value in TRACE_HEADERS.get():  # the attempt's span as the upstream's parent (CONTRACT §8)
            headers[name] = value
        try:
            raw = request_bytes(req.method, target.path, target.host_header, headers, req.body)
        except HTTPError:
            self._pool.give(conn, loop.time())
            raise UpstreamError(Failure(FailureKind.CONNECT, f"{label}: invalid request header")) from None
        conn.begin()
        resp = HttpResponse(conn, self._pool, label, idle_s, total_s)
        try:
            assert conn.transport is not None
            conn.transport.write(raw)
            await resp.start()
        except BaseException:
            conn.lost = True  # never back to the pool, whatever state the failure left it in
            resp.close()
            raise
        return resp

    async def post_json(self, url: str, payload: Any, timeout_s: float, label: str) -> Any:
        """A small JSON call (webhook guardrails), bounded by `timeout_s` in all. Raises UpstreamError on
        any failure; a body over 1 MiB is one."""
        req = UpstreamRequest("POST", url, {"content-type": "application/json", "accept": "application/json"},
                              orjson.dumps(payload), False)
        try:
            async with asyncio.timeout(timeout_s):
                resp = await self._request(req, label, timeout_s, None, timeout_s)
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


async def _connect(loop: asyncio.AbstractEventLoop, target: _Target, connect_s: float, label: str,
                   tls: ssl.SSLContext | None) -> _Conn:
    try:
        async with asyncio.timeout(connect_s):
            _, conn = await loop.create_connection(
                lambda: _Conn(loop, target.key), target.host, target.port,
                ssl=tls, server_hostname=target.host if tls is not None else None)
    except TimeoutError:
        raise UpstreamError(Failure(FailureKind.CONNECT, f"{label}: timed out connecting")) from None
    except OSError:  # ssl.SSLError included: a certificate that does not verify is a failed connection
        raise UpstreamError(Failure(FailureKind.CONNECT, f"{label}: cannot connect")) from None
    return conn
