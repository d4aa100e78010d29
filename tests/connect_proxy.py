"""A small real HTTP proxy on 127.0.0.1 for the egress tests: CONNECT tunnels (RFC 9110 §9.3.6) and
absolute-form plain-HTTP requests (RFC 9112 §3.2.2), both relayed byte for byte. It records what it was
asked for and the Proxy-Authorization it saw; with `require` set, anything else gets a 407."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from dataclasses import dataclass, field


@dataclass
class Asked:
    method: str
    target: str
    authorization: str | None


@dataclass
class ConnectProxy:
    require: str | None = None  # the Proxy-Authorization value to insist on
    echo: bool = False  # a 407 quotes the Proxy-Authorization it got in its body (as a hostile proxy may)
    asked: list[Asked] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        fields = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        auth = fields.get("proxy-authorization")
        self.asked.append(Asked(method, target, auth))
        if self.require is not None and auth != self.require:
            body = f'{{"error": {{"message": "Proxy-Authorization: {auth} refused"}}}}'.encode() if self.echo else b""
            writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
            writer.close()
            return
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        else:
            parts = urllib.parse.urlsplit(target)
            up_reader, up_writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
            up_writer.write(head)  # the origin (aiohttp) accepts the absolute form too
        await self._pipe(reader, writer, up_reader, up_writer)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> None:
        async def one_way(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        tasks = [asyncio.ensure_future(one_way(reader, up_writer)), asyncio.ensure_future(one_way(up_reader, writer))]
        self._tasks.update(tasks)
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
            self._tasks.discard(t)
