"""The gateway's own HTTP/1.1 server for the API port: an asyncio protocol per connection
(`connection.py`) over the sans-I/O request reader (`gateway.core.http1_request`).

Why not aiohttp's server: per streamed request it built request and response objects, ran its router
and middleware chain and a writer stack that profiles put at a tenth of the gateway's CPU; this server
reads a request whole (bodies are bounded by `server.max_body_bytes`), hands it to one function and
writes what that returns. Keep-alive connections idle longer than `keepalive_s` are closed by one sweep
a second (no timer per request). On shutdown it stops accepting, closes idle connections and lets
requests in flight finish for up to the drain time, then cancels them.
"""

from __future__ import annotations

import asyncio
import math
import time
from email.utils import formatdate
from typing import TYPE_CHECKING

from gateway.inbound.connection import Handler, HttpConnection
from gateway.inbound.messages import Request, Response, StreamResponse, json_response

if TYPE_CHECKING:
    from gateway.app import App

__all__ = ["Handler", "HttpServer", "Request", "Response", "StreamResponse", "json_response"]
KEEPALIVE_S = 75.0  # as aiohttp's and nginx's defaults: longer than the usual client pool's idle time


class HttpServer:
    def __init__(self, app: App, handler: Handler, *, keepalive_s: float = KEEPALIVE_S):
        self.app, self.handler, self.keepalive_s = app, handler, keepalive_s
        self.loop = asyncio.get_running_loop()
        self.connections: set[HttpConnection] = set()
        self.closing = False
        self._listener: asyncio.base_events.Server | None = None
        self._sweep: asyncio.TimerHandle | None = None
        self._date_at = -1
        self._date = ""
        self.port = 0

    def max_body(self) -> int:
        return self.app.runtime.config.server.max_body_bytes

    def date(self) -> str:
        """The Date header (RFC 9110 §6.6.1), formatted once a second."""
        now = int(time.time())
        if now != self._date_at:
            self._date_at, self._date = now, formatdate(now, usegmt=True)
        return self._date

    async def listen(self, host: str, port: int, *, reuse_port: bool = False, backlog: int = 2048) -> int:
        """Start accepting; returns the bound port (useful with port 0)."""
        self._listener = await self.loop.create_server(lambda: HttpConnection(self), host, port,
                                                       reuse_port=reuse_port or None, backlog=backlog)
        self._sweep = self.loop.call_later(1.0, self._sweep_idle)
        self.port = int(self._listener.sockets[0].getsockname()[1])
        return self.port

    def _sweep_idle(self) -> None:
        before = self.loop.time() - self.keepalive_s
        for conn in list(self.connections):
            conn.close_if_idle(before)
        self._sweep = self.loop.call_later(1.0, self._sweep_idle)

    async def shutdown(self, drain_s: float) -> None:
        """Stop accepting, close idle connections, give requests in flight `drain_s` to end."""
        self.closing = True
        if self._sweep is not None:
            self._sweep.cancel()
        if self._listener is not None:
            self._listener.close()
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
