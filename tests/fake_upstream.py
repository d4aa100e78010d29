"""A scripted LLM provider on 127.0.0.1: the only fake in the integration tests.

Each request to a path takes the next `Script` queued for it (or the path's default; or one made from the
request's headers by a queued function, for an upstream that quotes what it got): a status, headers
and parts — bytes to write, a `Pause` (pacing inside the scenario, not test synchronisation), a `Gate`
(wait until the test says so: synchronisation with what a client has seen), `Hang` (wait until the
gateway goes away) or `Close` (drop the connection). It records every request it got and
when each connection was closed by the other side.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.loopback_app import serve_on_loopback


@dataclass(frozen=True)
class Pause:
    seconds: float


@dataclass(frozen=True)
class Gate:
    """Stop sending until the test sets `opened` (from any thread). `waited` records, per pass, whether
    it was opened (True) or `timeout_s` ran out first (False: what the test waited for never came)."""

    opened: threading.Event = field(default_factory=threading.Event)
    timeout_s: float = 10.0
    waited: list[bool] = field(default_factory=list)


@dataclass(frozen=True)
class Hang:
    """Stop sending and wait until the peer closes the connection."""


@dataclass(frozen=True)
class Close:
    """Drop the connection abruptly (no chunked terminator)."""


Part = bytes | Pause | Gate | Hang | Close


@dataclass
class Script:
    parts: list[Part] = field(default_factory=list)
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/event-stream"})
    split: int = 0  # >0: write every bytes part in pieces of this size (each its own write)
    silent: bool = False  # accept the request, never answer (no status line)
    reset: bool = False  # drop the connection before any byte of the answer (a TCP reset)
    tag: str = ""  # recorded in `served`, so a test knows which script each request got


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    query: dict[str, str]
    at: float = field(default_factory=time.monotonic)
    peer_port: int = 0  # which TCP connection carried it (keep-alive reuse shows as one port)


ScriptFor = Callable[[dict[str, str]], Script]  # the answer to a request with these headers


def sse(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"


def json_script(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Script:
    return Script([orjson.dumps(obj)], status, {"Content-Type": "application/json", **(headers or {})})


class FakeUpstream:
    def __init__(self) -> None:
        self.queues: dict[str, deque[Script | ScriptFor]] = defaultdict(deque)
        self.defaults: dict[str, Script] = {}
        self.received: list[Received] = []
        self.closed_at: list[float] = []
        self.closed = asyncio.Event()
        self.served: list[str] = []
        self.active = 0  # requests being answered right now
        self.idle = asyncio.Event()  # set whenever `active` drops to zero
        self.port = 0
        self.tls: ssl.SSLContext | None = None  # set before start() to serve HTTPS
        self.max_body = 1024 * 1024  # the largest request body taken (aiohttp's default); set before start()
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://127.0.0.1:{self.port}"

    def enqueue(self, path: str, *scripts: Script | ScriptFor) -> None:
        self.queues[path].extend(scripts)

    def bodies(self, path: str) -> list[Any]:
        return [r.body for r in self.received if r.path == path]

    async def start(self) -> None:
        app = web.Application(client_max_size=self.max_body)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.closed = asyncio.Event()
        self._runner, self.port = await serve_on_loopback(app, tls=self.tls, handler_cancellation=True)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = raw
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.received.append(Received(request.path, dict(request.headers), body, dict(request.query),
                                      peer_port=peer[1] if peer else 0))
        queue = self.queues.get(request.path)
        queued = queue.popleft() if queue else self.defaults.get(request.path)
        script = queued(dict(request.headers)) if callable(queued) else queued
        if script is None:
            return web.json_response({"error": {"message": "no script", "type": "test"}}, status=599)
        self.served.append(script.tag)
        self.idle.clear()
        resp = web.StreamResponse(status=script.status, headers=script.headers)
        self.active += 1
        try:
            if script.silent:
                await self._play(request, resp, Hang(), 0)
            if script.reset:
                await self._play(request, resp, Close(), 0)
                return resp
            await resp.prepare(request)
            for part in script.parts:
                if not await self._play(request, resp, part, script.split):
                    return resp
            await resp.write_eof()
        except (asyncio.CancelledError, ConnectionResetError):
            self._mark_closed()
            raise
        finally:
            self.active -= 1
            if self.active == 0:
                self.idle.set()
        return resp

    async def _play(self, request: web.Request, resp: web.StreamResponse, part: Part, split: int) -> bool:
        if isinstance(part, Pause):
            await asyncio.sleep(part.seconds)
        elif isinstance(part, Gate):
            loop = asyncio.get_running_loop()
            part.waited.append(await loop.run_in_executor(None, part.opened.wait, part.timeout_s))
        elif isinstance(part, Hang):
            await asyncio.Event().wait()  # ends only by cancellation when the peer disconnects
        elif isinstance(part, Close):
            assert request.transport is not None
            request.transport.abort()
            return False
        elif split:
            for i in range(0, len(part), split):
                await resp.write(part[i:i + split])
                await asyncio.sleep(0)
        else:
            await resp.write(part)
        return True

    def _mark_closed(self) -> None:
        self.closed_at.append(time.monotonic())
        self.closed.set()
