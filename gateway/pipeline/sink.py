"""Where a streaming relay writes: the client, or a hold buffer while a hold guardrail judges (with
the line kept alive meanwhile, see `held_line`). The buffer is bounded (`HOLD_MAX_BYTES`): past it the
hold fails closed, as a guardrail that cannot judge does, and the stream ends with the API's error event.

Records TTFT at the first written output token and the text delay of every write (docs/reference.md, "Metrics"), with
through the request's recorder (its labelled children looked up once per request).
"""

from __future__ import annotations

import time

from gateway.errors import GatewayError, GuardrailBlocked
from gateway.http import StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.guardrails import record
from gateway.pipeline.held_line import LineKeeper
from gateway.pipeline.runtime import Runtime
from gateway.providers.base import MAX_BODY_BYTES

# A held answer is at most what a non-stream answer may be (an upstream body's bound, 32 MiB), which the
# gateway holds and judges whole too: ~1.5 times a 128k-token chat answer as its chunks (~22 MB). Without
# it only `total_s` and the upstream's rate bounded it (docs/extensions.md, "Costs a client or an upstream
# can impose").
HOLD_MAX_BYTES = MAX_BODY_BYTES


class StreamEnded(Exception):
    """The committed stream ends badly: `error` goes out as the API's error event, or `payload` as it is
    (an upstream failure forwarded); `reason` is the metric's and the log line's."""

    def __init__(self, reason: str, error: GatewayError | None = None, payload: bytes = b""):
        super().__init__(reason)
        self.reason, self.error, self.payload = reason, error, payload


class ClientSink:
    __slots__ = ("_keeper", "_released", "client", "ctx", "held_bytes", "held_for", "hold", "rec", "rt")

    def __init__(self, rt: Runtime, ctx: RequestContext, client: StreamResponse, held_for: str | None):
        """`held_for`: the guardrail the answer is held for (the first `hold` one), None: not held."""
        self.rt, self.ctx, self.client = rt, ctx, client
        self.hold: list[bytes] | None = [] if held_for is not None else None
        self.held_for, self.held_bytes = held_for, 0
        self.rec = ctx.rec
        self._keeper: LineKeeper | None = None
        self._released = 0.0  # when a hold guardrail let the held text go (its wait is not the gateway's own)
        if held_for is not None:
            self.keeper.start()

    @property
    def keeper(self) -> LineKeeper:
        """Keeps the line alive while nothing is written (made on first use: most streams never wait)."""
        if self._keeper is None:
            self._keeper = LineKeeper(self.rt, self.ctx, self.client)
        return self._keeper

    async def quiet(self) -> None:
        """Before a write outside `emit` (the error event): the keeper finishes its write and stops."""
        if self._keeper is not None:
            await self._keeper.stop()

    def close(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()

    async def emit(self, data: bytes, t_read: float, token_out: bool) -> None:
        if not data:
            return
        if self.hold is not None:
            self.held_bytes += len(data)
            if self.held_bytes > HOLD_MAX_BYTES:
                raise self._too_much_held()
            self.hold.append(data)
            return
        await self.client.write(data)
        now = time.perf_counter()
        if self.ctx.ttft_s is None and token_out:
            self._first_token(now)
        self.rec.text_delay(now - t_read)

    def _too_much_held(self) -> StreamEnded:
        """Fail closed: the answer grew past the bound before its verdict; nothing of it was sent, and
        what is held is let go (the relay's error event follows, the upstream is closed)."""
        name = self.held_for or ""
        self.hold = []
        record(self.rt, self.ctx, name, "output", False)
        return StreamEnded("guardrail", GuardrailBlocked(
            f"refused by guardrail {name}: the answer passed {HOLD_MAX_BYTES >> 20} MiB before its verdict",
            param=name))

    def _first_token(self, now: float) -> None:
        ctx = self.ctx
        ctx.ttft_s = now - ctx.t_start
        assert ctx.deployment is not None
        self.rec.first_token(ctx.model.name, ctx.deployment.provider, ctx.ttft_s)
        ctx.first_token_out(now, self._released)

    async def end(self, data: bytes, token_out: bool, t_read: float = 0.0) -> None:
        """The last write: the last read's output (read at `t_read`; 0: none), the rest of the text, the
        end and the body's terminator in one piece. The windows' tail waited for no upstream read, so only
        a last read has a text delay to record; it may still carry the first token (a short answer the
        window held whole)."""
        if self.ctx.ttft_s is None and token_out and data:
            self._first_token(time.perf_counter())
        await self.client.write_eof(data)
        if t_read:
            self.rec.text_delay(time.perf_counter() - t_read)

    async def release_held(self, tail: bytes) -> None:
        self._released = time.perf_counter()
        await self.quiet()
        held, self.hold = self.hold, None
        await self.emit(b"".join(held or ()) + tail, time.perf_counter(), True)
