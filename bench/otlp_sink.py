"""A collector stand-in for the tracing bench targets: accepts OTLP/HTTP trace exports and throws them
away (200, an empty ExportTraceServiceResponse), so the gateway's figure includes encoding and sending
its spans but no collector's work. Its own process; its CPU is not the gateway's."""

from __future__ import annotations

import argparse
import asyncio

import uvloop
from aiohttp import web


async def _traces(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=b"", content_type="application/x-protobuf")


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _serve(port: int) -> None:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", _traces)
    app.router.add_get("/healthz", _healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    uvloop.run(_serve(p.parse_args().port))


if __name__ == "__main__":
    main()
