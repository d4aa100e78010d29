"""A whole response's `after` runs once the response is on the client's socket (gateway/http/messages.py):
the gateway writes a body's log line there, so formatting it delays no answer (docs/overhead.md). A real
server's connection on a socket pair; the loop calls the protocol's callbacks, as it does for a client."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager

from gateway.core.http1_request import RequestHead
from gateway.http import HttpServer, Request, Response, StreamResponse
from gateway.http.connection import Channel, HttpConnection

GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"


class AnswerThenLook:
    """Answers every request with a body whose `after` notes what the client's socket already holds."""

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.seen: list[bytes] = []
        self.conn: HttpConnection | None = None  # set: its transport is closed before the answer (gone)
        self.looked = asyncio.Event()

    def make_request(self, head: RequestHead, body: bytes, channel: Channel) -> Request:
        return Request(head, body, channel)

    def handle(self, request: Request) -> Awaitable[Response | StreamResponse]:
        return self._answer(request)

    async def _answer(self, request: Request) -> Response:
        if self.conn is not None and self.conn.transport is not None:
            self.conn.transport.close()  # the client is gone before its answer could be written
        resp = Response(body=b"the answer", content_type="text/plain")
        resp.after = self._look
        return resp

    def _look(self) -> None:
        try:
            self.seen.append(self.client.recv(65536, socket.MSG_PEEK))
        except BlockingIOError:
            self.seen.append(b"")  # nothing written yet
        self.looked.set()


@asynccontextmanager
async def served(gone: bool = False) -> AsyncIterator[tuple[AnswerThenLook, HttpConnection, socket.socket]]:
    """A real server's connection on a socket pair (the client's end non-blocking); `gone`: the client is
    gone before each answer."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    endpoint = AnswerThenLook(theirs)
    conn = HttpConnection(HttpServer(endpoint))
    if gone:
        endpoint.conn = conn
    await loop.connect_accepted_socket(lambda: conn, ours)
    try:
        yield endpoint, conn, theirs
    finally:
        theirs.close()
        if conn.transport is not None:
            conn.transport.close()


async def test_after_runs_once_the_answer_is_on_the_clients_socket() -> None:
    loop = asyncio.get_running_loop()
    async with served() as (endpoint, conn, client):
        for n in (1, 2):  # and again on the kept-alive connection
            await loop.sock_sendall(client, GET)
            got = b""
            while not got.endswith(b"the answer"):
                got += await loop.sock_recv(client, 65536)
            while conn.task is not None:
                await conn.task
            assert len(endpoint.seen) == n
            assert endpoint.seen[-1].startswith(b"HTTP/1.1 200") and endpoint.seen[-1].endswith(b"the answer")


async def test_after_runs_when_the_client_has_gone_before_the_answer() -> None:
    async with served(gone=True) as (endpoint, _, client):
        await asyncio.get_running_loop().sock_sendall(client, GET)
        await asyncio.wait_for(endpoint.looked.wait(), 10)  # times out (fails) if `after` never runs
        assert endpoint.seen == [b""]  # once, with nothing written: the connection was closed first
