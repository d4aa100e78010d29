"""The HTTP server starts a request eagerly (gateway/http/connection.py, issue #34): by the time the read
callback that completed a request returns, the request's handler has run up to its first wait, so the
next connection's bytes are read after it, unless units wait for a turn (the loop is saturated): then
it starts behind them. A request answered at once, with another pipelined behind it
in the same read, leaves the connection serving that one: a third request waits its turn. A real
server's connection on a socket pair; the loop calls the protocol's callbacks, as it does for a client."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable

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


async def connected(server: HttpServer) -> tuple[HttpConnection, socket.socket]:
    ours, theirs = socket.socketpair()
    conn = HttpConnection(server)
    await server.loop.connect_accepted_socket(lambda: conn, ours)
    theirs.setblocking(False)
    return conn, theirs


def read_callback(loop: asyncio.AbstractEventLoop, conn: HttpConnection, data: bytes,
                  log: list[str]) -> asyncio.Future[list[str]]:
    """`data` handed to the connection by a loop callback, as a read is; what was logged when it returned."""
    seen: asyncio.Future[list[str]] = loop.create_future()

    def read() -> None:
        conn.data_received(data)
        seen.set_result(list(log))

    loop.call_soon(read)
    return seen


async def test_the_handler_has_run_up_to_its_first_wait_when_the_read_callback_returns() -> None:
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[None] = loop.create_future()
    endpoint = Recorder(gate)
    server = HttpServer(endpoint)
    conn, client = await connected(server)
    try:
        at_return = await read_callback(loop, conn, get("/wait/1"), endpoint.log)
        assert at_return == ["start /wait/1"]
        assert conn.task is not None and not conn.task.done()
        gate.set_result(None)
        await conn.task
        assert endpoint.log == ["start /wait/1", "end /wait/1"]
        assert (await loop.sock_recv(client, 65536)).endswith(b"/wait/1")
    finally:
        client.close()
        if conn.transport is not None:
            conn.transport.close()


async def test_a_request_pipelined_behind_one_answered_at_once_holds_the_connection() -> None:
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[None] = loop.create_future()
    endpoint = Recorder(gate)
    server = HttpServer(endpoint)
    conn, client = await connected(server)
    try:
        at_return = await read_callback(loop, conn, get("/a") + get("/wait/2"), endpoint.log)
        assert at_return == ["start /a", "end /a"]  # answered in the read callback itself
        serving = conn.task
        assert serving is not None and not serving.done()  # /wait/2's task, started behind it
        await read_callback(loop, conn, get("/c"), endpoint.log)
        for _ in range(5):
            await asyncio.sleep(0)
        assert "start /c" not in endpoint.log  # it waits for /wait/2, as pipelining requires
        gate.set_result(None)
        await serving
        while conn.task is not None:
            await conn.task
        assert endpoint.log == ["start /a", "end /a", "start /wait/2", "end /wait/2", "start /c", "end /c"]
        got = b""
        while not got.endswith(b"/c"):
            got += await loop.sock_recv(client, 65536)
        bodies = [part.rsplit(b"\r\n\r\n", 1)[-1] for part in got.split(b"HTTP/1.1 ")[1:]]
        assert bodies == [b"/a", b"/wait/2", b"/c"]
    finally:
        client.close()
        if conn.transport is not None:
            conn.transport.close()


async def test_with_the_turn_spent_a_request_read_does_not_run_its_handler() -> None:
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[None] = loop.create_future()
    endpoint = Recorder(gate)
    server = HttpServer(endpoint, ServerLimits(turn_s=1e-9))  # every turn is spent by its first unit
    conn, client = await connected(server)
    seen: asyncio.Future[tuple[bool, list[str]]] = loop.create_future()

    def saturated_read() -> None:
        TURNS.over(loop)  # a unit opens this iteration's turn and spends it
        spent = TURNS.over(loop) and TURNS.backlog
        conn.data_received(get("/wait/3"))
        seen.set_result((spent, list(endpoint.log)))

    try:
        loop.call_soon(saturated_read)
        spent, at_return = await seen
        assert spent and at_return == []  # it waits for a turn, whichever way it started
        assert conn.task is not None
        gate.set_result(None)
        await conn.task
        assert endpoint.log == ["start /wait/3", "end /wait/3"]
    finally:
        server.set_limits(ServerLimits())
        client.close()
        if conn.transport is not None:
            conn.transport.close()
