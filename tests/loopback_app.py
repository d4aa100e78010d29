"""A scripted upstream's aiohttp app served on 127.0.0.1 at a free port (the test fakes' one way to start)."""

from __future__ import annotations

import ssl
from typing import Any

from aiohttp import web


async def serve_on_loopback(app: web.Application, port: int = 0, tls: ssl.SSLContext | None = None,
                            **runner_options: Any) -> tuple[web.AppRunner, int]:
    """Start `app`; its runner (to `cleanup()`) and the port it listens on."""
    runner = web.AppRunner(app, access_log=None, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls)
    await site.start()
    return runner, int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
