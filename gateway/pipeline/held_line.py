"""Keeping a committed stream's line alive while it waits for a guardrail's verdict (docs/extensions.md,
"Failure semantics"; docs/extensions.md, "Redaction in every script").

A `hold` guardrail buffers the whole answer until its verdict, and any whole-answer guardrail (hold,
audit, a webhook) makes the stream wait for that verdict at the end. Meanwhile the client would read
nothing, not even the headers, and a proxy with an idle timeout cuts the connection. So, as before the
first token (`first_token.KeepAlive`), once `server.keepalive_after_s` has passed since the request
began with nothing written, the headers and a `: keepalive` comment go out, then a comment every
`min(KEEPALIVE_EVERY_S, keepalive_after_s)` seconds until the verdict: the line is never silent longer
than the operator allowed. A refusal after that is the stream's one error event, as always after the
commit.

Only the keeper writes while it runs (the sink holds the answer, or the relay awaits the verdict); it is
stopped between two writes before anything else is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

from gateway.core.sse import KEEPALIVE
from gateway.core.stream import Answer
from gateway.errors import GatewayError
from gateway.http import StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.first_token import KEEPALIVE_EVERY_S
from gateway.pipeline.guardrails import judge_output
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import Guardrail


class LineKeeper:
    """`start()` arms it; `await stop()` before the next write of anyone else; `cancel()` on teardown."""

    __slots__ = ("_stop", "_timer", "_writer", "after_s", "client", "every_s", "t_start")

    def __init__(self, rt: Runtime, ctx: RequestContext, client: StreamResponse):
        self.client = client
        self.after_s = rt.config.server.keepalive_after_s
        self.every_s = min(KEEPALIVE_EVERY_S, self.after_s) if self.after_s > 0 else KEEPALIVE_EVERY_S
        self.t_start = ctx.t_start
        self._timer: asyncio.TimerHandle | None = None
        self._writer: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def start(self) -> None:
        if self._timer is not None or self._writer is not None:
            return
        self._stop = asyncio.Event()
        delay = max(0.0, self.after_s - (time.perf_counter() - self.t_start))
        self._timer = asyncio.get_running_loop().call_later(delay, self._begin)

    def _begin(self) -> None:
        self._timer = None
        self._writer = asyncio.ensure_future(self._keep_alive())

    async def _keep_alive(self) -> None:
        while not self._stop.is_set():
            await self.client.write(KEEPALIVE)  # the first write sends the headers too
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.every_s)

    async def stop(self) -> None:
        """Let the writer finish the write it is in, then end; its failure (a client gone) is the
        relay's to meet on its own next write."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        writer, self._writer = self._writer, None
        if writer is None:
            return
        self._stop.set()
        with contextlib.suppress(Exception):
            await writer

    def cancel(self) -> None:
        """The relay is being torn down (the client went away): nothing more is written."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writer is not None:
            self._writer.cancel()
            self._writer = None


async def judge_keeping_alive(rt: Runtime, ctx: RequestContext, keeper: LineKeeper, assembler: Answer,
                              guards: Sequence[Guardrail]) -> GatewayError | None:
    """`judge_output` with the line kept alive while the verdict is awaited; stopped after it."""
    if not guards:
        return None
    keeper.start()
    try:
        return await judge_output(rt, ctx, assembler, guards, masked=False)  # a stream's: the upstream's text
    finally:
        await keeper.stop()
