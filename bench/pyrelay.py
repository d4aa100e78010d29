"""The floor of a Python process in the path (issue #34, point 4): the smallest relay asyncio can be.

Each client connection gets its own upstream connection, and bytes go through both ways unread: no HTTP
parsing, no routing, no stream core, nothing recorded. It runs on uvloop, as the gateway does, so
beside `direct`, `nginx` and the gateway it shows what a Python event loop's two extra hops cost on a
machine, apart from what the gateway's own pipeline costs in them (`bench.ttft_probe --targets
direct,pyrelay,nginx,gateway-noredact`).

    python -m bench.pyrelay --port 8081 --upstream-port 8080
"""

from __future__ import annotations

import argparse
import asyncio
from typing import cast

import uvloop


class _Upstream(asyncio.Protocol):
    """The upstream side of one pair: what it sends goes to the client as it comes."""

    def __init__(self, client: asyncio.Transport):
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class _Client(asyncio.Protocol):
    """The client side: its bytes go upstream once that connection is open (held until then)."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.upstream: asyncio.Transport | None = None
        self.held: list[bytes] = []
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        client = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self.task = asyncio.ensure_future(self._connect(client))  # held: the loop keeps only a weak reference

    async def _connect(self, client: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        try:
            upstream, _ = await loop.create_connection(lambda: _Upstream(client), "127.0.0.1", self.upstream_port)
        except OSError:
            client.close()
            return
        if client.is_closing():
            upstream.close()
            return
        self.upstream = upstream
        for data in self.held:
            upstream.write(data)
        self.held.clear()

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self.held.append(data)
        else:
            self.upstream.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream.close()


async def serve(port: int, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(upstream_port), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.pyrelay", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream-port", type=int, required=True)
    args = p.parse_args(argv)
    uvloop.run(serve(args.port, args.upstream_port))


if __name__ == "__main__":
    main()
