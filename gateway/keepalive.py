"""Waiting for the first token without letting proxies time out (CONTRACT §4.2).

The attempt loop runs as a task. If it has no first token after `server.keepalive_after_s`, the response
is committed early (200, event-stream) and `: keepalive` comments go out every few seconds; from then on
a failure can only be an in-stream error event. Shared by every streaming API.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from aiohttp import web

from gateway.attempts import Won
from gateway.context import RequestContext
from gateway.core.sse import KEEPALIVE
from gateway.errors import GatewayError
from gateway.runtime import Runtime

T = TypeVar("T")
KEEPALIVE_EVERY_S = 5.0


async def commit(request: web.Request, ctx: RequestContext, won: Won | None) -> web.StreamResponse:
    """Send the 200 and the SSE headers. Nothing can turn into an HTTP error after this."""
    headers = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no", "x-request-id": ctx.request_id}
    if won is not None:
        headers["x-gateway-deployment"] = won.deployment.label
        headers["x-gateway-attempts"] = str(won.attempts)
    resp = web.StreamResponse(status=200, headers=headers)
    await resp.prepare(request)
    return resp


class KeepAlive(Generic[T]):
    """Use as `async with KeepAlive(...) as ka: got = await ka.wait(); ...; client = await ka.commit(won)`.
    Leaving the block cancels an unfinished attempt loop. `error_event` renders a failure as the API's
    in-stream error event, for when headers already went out."""

    def __init__(self, request: web.Request, rt: Runtime, ctx: RequestContext,
                 attempts: Coroutine[Any, Any, tuple[Won, T]], error_event: Callable[[GatewayError], bytes]):
        self.request, self.ctx, self.error_event = request, ctx, error_event
        self.after_s = rt.config.server.keepalive_after_s
        self.task = asyncio.ensure_future(attempts)
        self.client: web.StreamResponse | None = None

    async def __aenter__(self) -> KeepAlive[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.task.done():
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task

    async def wait(self) -> tuple[Won, T] | None:
        """The winning attempt. The attempt loop's GatewayError is raised while it can still be an HTTP
        status; after early headers it is written as one error event and None is returned."""
        done, _ = await asyncio.wait({self.task}, timeout=self.after_s)
        while not done:
            if self.client is None:
                self.client = await commit(self.request, self.ctx, None)
            await self.client.write(KEEPALIVE)
            done, _ = await asyncio.wait({self.task}, timeout=KEEPALIVE_EVERY_S)
        try:
            return self.task.result()
        except GatewayError as err:
            if self.client is None:
                raise
            self.ctx.stream_error = err.code
            await self.client.write(self.error_event(err))
            return None

    async def commit(self, won: Won) -> web.StreamResponse:
        if self.client is None:
            self.client = await commit(self.request, self.ctx, won)
        return self.client
