"""The HTTP server starts a request eagerly (gateway/http/connection.py, issue #34): by the time the read
callback that completed a request returns, the request's handler has run up to its first wait, so the
next connection's bytes are read after it, unless units wait for a turn (the loop is saturated): then
it starts behind them. A request answered at once, with another pipelined behind it
in the same read, leaves the connection serving that one: a third request waits its turn. A real
server's connection on a socket pair; the loop calls the protocol's callbacks, as it does for a client."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from gateway.core.http1_request import RequestHead
from gateway.http import HttpServer, Request, Response, ServerLimits, StreamResponse
from gateway.http.connection import Channel, HttpConnection
from gateway.http.turns import TURNS


class Recorder:
    """An endpoint that logs each request's first step; `/wait/...` paths wait on `gate` first."""

    def __init__(self, gate: asyncio.Future[None]):
        self.gate = gate
        self.log: list[str] = []

    def make_request(self, head: RequestHead, body: bytes, channel: Channel) -> Request:
        return Request(head, body, channel)

    def handle(self, request: Request) -> Awaitable[Response | StreamResponse]:
        return self._answer(request)

    async def _answer(self, request: Request) -> Response:
        self.log.append(f"start {request.path}")
        if request.path.startswith("/wait/"):
            await self.gate
        self.log.append(f"end {request.path}")
        return Response(body=request.path.encode(), content_type="text/plain")


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode()


@dataclass
class Served:
    loop: asyncio.AbstractEventLoop
    gate: asyncio.Future[None]
    endpoint: Recorder
    conn: HttpConnection
    client: socket.socket

    def read(self, data: bytes) -> asyncio.Future[list[str]]:
        """`data` handed to the connection by a loop callback, as a read is; what was logged when it
        returned."""
        seen: asyncio.Future[list[str]] = self.loop.create_future()

        def read() -> None:
            self.conn.data_received(data)
            seen.set_result(list(self.endpoint.log))

        self.loop.call_soon(read)
        return seen

    async def received(self, ending: bytes) -> bytes:
        got = b""
        while not got.endswith(ending):
            got += await self.loop.sock_recv(self.client, 65536)
        return got


@asynccontextmanager
async def served(limits: ServerLimits | None = None) -> AsyncIterator[Served]:
    """A real server's connection on a socket pair (the server's end non-blocking, as accepted)."""
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[None] = loop.create_future()
    endpoint = Recorder(gate)
    server = HttpServer(endpoint, limits)
    ours, theirs = socket.socketpair()
    conn = HttpConnection(server)
    await loop.connect_accepted_socket(lambda: conn, ours)
    theirs.setblocking(False)
    try:
        yield Served(loop, gate, endpoint, conn, theirs)
    finally:
        server.set_limits(ServerLimits())  # the turn's length is the process's
        theirs.close()
        if conn.transport is not None:
            conn.transport.close()


async def test_the_handler_has_run_up_to_its_first_wait_when_the_read_callback_returns() -> None:
    async with served() as s:
        assert await s.read(get("/wait/1")) == ["start /wait/1"]
        assert s.conn.task is not None and not s.conn.task.done()
        s.gate.set_result(None)
        await s.conn.task
        assert s.endpoint.log == ["start /wait/1", "end /wait/1"]
        await s.received(b"/wait/1")


async def test_a_request_pipelined_behind_one_answered_at_once_holds_the_connection() -> None:
    async with served() as s:
        assert await s.read(get("/a") + get("/wait/2")) == ["start /a", "end /a"]  # answered in the callback
        serving = s.conn.task
        assert serving is not None and not serving.done()  # /wait/2's task, started behind it
        await s.read(get("/c"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert "start /c" not in s.endpoint.log  # it waits for /wait/2, as pipelining requires
        s.gate.set_result(None)
        await serving
        while s.conn.task is not None:
            await s.conn.task
        assert s.endpoint.log == ["start /a", "end /a", "start /wait/2", "end /wait/2", "start /c", "end /c"]
        got = await s.received(b"/c")
        assert [part.rsplit(b"\r\n\r\n", 1)[-1] for part in got.split(b"HTTP/1.1 ")[1:]] == [b"/a", b"/wait/2", b"/c"]


async def test_with_the_turn_spent_a_request_read_does_not_run_its_handler() -> None:
    async with served(ServerLimits(turn_s=1e-9)) as s:  # every turn is spent by its first unit
        seen: asyncio.Future[tuple[bool, list[str]]] = s.loop.create_future()

        def saturated_read() -> None:
            TURNS.over(s.loop)  # a unit opens this iteration's turn and spends it
            spent = TURNS.over(s.loop) and TURNS.backlog
            s.conn.data_received(get("/wait/3"))
            seen.set_result((spent, list(s.endpoint.log)))

        s.loop.call_soon(saturated_read)
        spent, at_return = await seen
        assert spent and at_return == []  # it waits for a turn, whichever way it started
        assert s.conn.task is not None
        s.gate.set_result(None)
        await s.conn.task
        assert s.endpoint.log == ["start /wait/3", "end /wait/3"]
