"""The gateway's own HTTP/1.1 server for the API port: an asyncio protocol per connection
(`connection.py`) over the sans-I/O request reader (`gateway.core.http1_request`).

Why not aiohttp's server: per streamed request it built request and response objects, ran its router
and middleware chain and a writer stack that profiles put at a tenth of the gateway's CPU; this server
reads a request whole (bodies are bounded by `server.max_body_bytes`), hands it to one function and
writes what that returns. Keep-alive connections idle longer than `keepalive_s` between requests, heads
slower than `head_timeout_s` (a connection's first from its accept: one that sends nothing is closed
then, not after the keep-alive time) and requests not whole `request_timeout_s` after their first byte (both 408)
are closed by one sweep a second (no timer per request), which also formats
the Date headers of the next seconds (`dates.py`); a client that reads nothing of a response for
`send_timeout_s` is cut; past `max_connections` a new connection gets one 503.
Over TLS a connection counts from its accept (`tls.py`): its handshake is inside `max_connections` and
must end within `head_timeout_s`; past the limit a TLS connection is closed at once (no 503 can be sent
before a handshake). Every refusal is counted by reason and logged at most once a second per reason.
On shutdown it stops accepting, closes idle connections and lets requests in flight finish for up to
the drain time, then cancels them. It knows no application: it takes an endpoint (which makes its
requests and answers them), limits, an observer of what it refuses, and optionally an upgrader that
answers WebSocket handshakes (`upgrade.py`; without one they get 426), and optionally `Refusals`: how
to answer what it refuses itself (413, 431, 408...) when it read enough of the head to know the route
(without, or with nothing read: OpenAI's error shape and a drawn request id). An upgraded connection
stays one of the server's: counted, swept once a second (its tunnel's idle deadline), drained on shutdown.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from gateway.core.http1_request import HeadSeen
from gateway.errors import GatewayError
from gateway.http.connection import Endpoint, HttpConnection
from gateway.http.dates import HttpDates
from gateway.http.messages import Request, Response, StreamResponse, json_response
from gateway.http.tls import TlsListener, listening_sockets
from gateway.http.turns import TURN_S, TURNS
from gateway.http.upgrade import Accepted, Link, Tunnel, Upgrader

__all__ = ["Accepted", "Endpoint", "HttpServer", "Link", "Refusals", "Request", "Response", "ServerEvents",
           "ServerLimits", "StreamResponse", "Tunnel", "Upgrader", "json_response"]
log = structlog.get_logger("gateway")
KEEPALIVE_S = 75.0  # as aiohttp's and nginx's defaults: longer than the usual client pool's idle time


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_body_bytes: int = 10 * 1024 * 1024
    max_connections: int = 10_000
    head_timeout_s: float = 15.0  # first byte of a request (a connection's first: its accept) to the end of its head
    send_timeout_s: float = 30.0  # a paused write (the client's socket full) may last this long
    keepalive_s: float = KEEPALIVE_S
    # first byte of a request to the end of its body: the bound the keep-alive sweep used to set (cutting a
    # request begun late in a connection's idle time short, without an answer), now the request's own
    request_timeout_s: float = KEEPALIVE_S
    turn_s: float = TURN_S  # request steps one loop iteration runs before the rest wait; 0: no limit


class ServerEvents(Protocol):
    # max_connections, head_timeout, body_timeout, send_stall, bad_request, too_large, upgrade, tls_handshake,
    # websocket_limit (an upgrader's 429: the caller's sockets at their cap)
    def refused(self, reason: str) -> None: ...


class Refusals(Protocol):
    """The application's answer to a request the server refused before any handler ran: the server knows
    no route, the application knows which shape its errors take there and which request id to echo."""

    def refusal(self, err: GatewayError, seen: HeadSeen) -> Response: ...


class _NoEvents:
    def refused(self, reason: str) -> None:
        pass


class HttpServer:
    def __init__(self, endpoint: Endpoint[Any], limits: ServerLimits | None = None, *,
                 events: ServerEvents | None = None, upgrader: Upgrader | None = None,
                 refusals: Refusals | None = None):
        self.endpoint = endpoint
        self.upgrader = upgrader  # answers `Upgrade: websocket` (http/upgrade.py); None: 426
        self.refusals = refusals  # answers the server's own refusals; None: OpenAI's shape, a drawn id
        self.set_limits(limits or ServerLimits())
        self.events: ServerEvents = events or _NoEvents()
        self.loop = asyncio.get_running_loop()
        self.connections: set[HttpConnection] = set()
        self.closing = False
        self._listener: asyncio.base_events.Server | None = None
        self._sweep: asyncio.TimerHandle | None = None
        self.dates = HttpDates()
        self.port = 0
        self.tls: ssl.SSLContext | None = None  # swapped on reload: new handshakes use the new one
        self._tls_listeners: list[TlsListener] = []
        self.handshaking = 0  # TLS connections accepted whose handshake is under way
        self._refusals: Counter[str] = Counter()  # since the last sweep, for one log line per reason

    def open_count(self) -> int:
        """Connections held against `max_connections`: served ones and TLS handshakes under way."""
        return len(self.connections) + self.handshaking

    def refused(self, reason: str) -> None:
        self.events.refused(reason)
        self._refusals[reason] += 1

    def date(self) -> str:
        """The Date header (RFC 9110 §6.6.1), formatted ahead by the sweep (`dates.py`)."""
        return self.dates.at(int(time.time()))

    def set_limits(self, limits: ServerLimits) -> None:
        """At start and on reload: the limits apply to what comes next (open connections keep going)."""
        self.limits = limits
        TURNS.set_length(limits.turn_s)

    async def listen(self, host: str, port: int, *, reuse_port: bool = False, backlog: int = 2048,
                     tls: ssl.SSLContext | None = None) -> int:
        """Start accepting (over TLS with `tls`); returns the bound port (useful with port 0)."""
        self.tls = tls
        if tls is not None:
            socks = listening_sockets(host, port, reuse_port=reuse_port, backlog=backlog)
            self._tls_listeners = [TlsListener(self, sock, lambda: HttpConnection(self)) for sock in socks]
            self.port = int(socks[0].getsockname()[1])
        else:
            self._listener = await self.loop.create_server(lambda: HttpConnection(self), host, port,
                                                           reuse_port=reuse_port or None, backlog=backlog)
            self.port = int(self._listener.sockets[0].getsockname()[1])
        self._sweep_idle()  # the first sweep at once: it makes the Date headers ahead and sets the timer
        return self.port

    def _sweep_idle(self) -> None:
        now = self.loop.time()
        limits = self.limits
        idle_before, head_before = now - limits.keepalive_s, now - limits.head_timeout_s
        whole_before = now - limits.request_timeout_s
        for conn in list(self.connections):
            conn.close_if_idle(idle_before)
            conn.check_request_timeouts(head_before, whole_before)
            conn.swept(now)
        for reason, count in self._refusals.items():  # a flood of refusals is a line a second, not a line each
            log.warning("http_refused", reason=reason, count=count, connections=len(self.connections))
        self._refusals.clear()
        self.dates.prepare(int(time.time()))
        self._sweep = self.loop.call_later(1.0, self._sweep_idle)

    async def shutdown(self, drain_s: float) -> None:
        """Stop accepting, close idle connections, give requests in flight `drain_s` to end."""
        self.closing = True
        if self._sweep is not None:
            self._sweep.cancel()
        if self._listener is not None:
            self._listener.close()
        for listener in self._tls_listeners:
            listener.close()
        for conn in list(self.connections):
            conn.close_if_idle(math.inf)
        busy = [c.task for c in self.connections if c.task is not None]
        if busy:
            _, late = await asyncio.wait(busy, timeout=drain_s)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=1.0)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
