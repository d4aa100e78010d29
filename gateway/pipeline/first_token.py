"""Waiting for the first token: reading an attempt up to it, and not letting proxies time out meanwhile.

`until_first_token` feeds an attempt's upstream bytes to its API's stream core until the core is
committable (the core holds the preamble); a failure in the bytes fails the attempt.

If the attempt loop has no first token after `server.keepalive_after_s`, the response is committed early
(200, event-stream) and `: keepalive` comments go out every few seconds; from then on a failure can only
be an in-stream error event. Shared by every streaming API.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

from gateway.config.types import Deployment
from gateway.core.events import Failure, FailureKind, StreamFailed
from gateway.core.sse import KEEPALIVE
from gateway.core.stream import StreamCore
from gateway.errors import GatewayError
from gateway.http import Request, StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import Opened, with_response_wait
from gateway.pipeline.attempts import Won, run_attempts
from gateway.pipeline.runtime import Runtime
from gateway.upstream import UpstreamError, UpstreamResponse

T = TypeVar("T")
KEEPALIVE_EVERY_S = 5.0
# What an attempt may send before its first output token (docs/extensions.md, "Streams"; docs/extensions.md,
# "Costs a client or an upstream can impose"). Bytes: a Responses upstream echoes the request's instructions and tools
# in `response.created` and again in
# `response.in_progress`, so a large legitimate request's preamble is twice its size; events: a real
# preamble is a handful (role chunk, filter results, lifecycle events, a ping every few seconds).
PREAMBLE_MAX_BYTES = 4 * 1024 * 1024
PREAMBLE_MAX_EVENTS = 1000
# attempt counts as header values, written once: the commit formats no integer (issue #34)
_COUNTS = tuple(str(n) for n in range(32))


S = TypeVar("S", bound=StreamCore)


async def until_first_token(resp: UpstreamResponse, stream: StreamCore, label: str, first: bytes = b"",
                            t_first: float = 0.0) -> float:
    """Read until the core can commit: an output token, or a whole (possibly empty) answer. `first` is
    what the attempt already read (to tell an event stream from a body), at `t_first`. What comes before
    the token is bounded (`PREAMBLE_MAX_BYTES`, `PREAMBLE_MAX_EVENTS`): past either, the attempt fails as
    malformed. Returns when the read that brought the token came (perf_counter): parsing it is the
    gateway's own time, not the upstream's (docs/overhead.md)."""
    read, t_read = len(first), t_first
    try:
        if first:
            stream.feed(first)
            _within_bounds(stream, read, label)
        while not stream.committable and not stream.done:
            data = await resp.next_chunk()
            t_read = resp.read_at
            if not data:
                stream.end_of_input()
                break
            read += len(data)
            stream.feed(data)
            _within_bounds(stream, read, label)
    except StreamFailed as exc:
        raise UpstreamError(with_response_wait(exc.failure, resp.headers)) from None
    if not stream.committable:
        raise UpstreamError(Failure(FailureKind.EARLY_EOF, f"{label}: stream ended before the first token"))
    return t_read


def _within_bounds(stream: StreamCore, read: int, label: str) -> None:
    """The held preamble is replayed at the commit, so the core keeps it all: without a bound, an upstream
    sending pings or role-only chunks and never a token grew the gateway's memory until `first_token_s`
    (2M pings: +470 MiB). Every byte read before the committing read counts (pings and comments too,
    stored or not), so the bound also holds what the SSE decoder buffers; the read that brings the
    token is already in memory whatever its size (a fast upstream's whole answer may come in it), so
    only its events are counted."""
    too_long = len(stream.preamble) > PREAMBLE_MAX_EVENTS
    if too_long or (read > PREAMBLE_MAX_BYTES and not stream.committable):
        what = f"{PREAMBLE_MAX_EVENTS} events" if too_long else f"{PREAMBLE_MAX_BYTES >> 20} MiB"
        raise UpstreamError(Failure(FailureKind.MALFORMED, f"{label}: more than {what} before the first token"))


async def commit(request: Request, ctx: RequestContext, won: Won | None) -> StreamResponse:
    """Commit to the 200 and the SSE headers. Nothing can turn into an HTTP error after this."""
    headers = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no", "x-request-id": ctx.request_id}
    if won is not None:
        headers["x-gateway-deployment"] = won.deployment.label
        n = won.attempts
        headers["x-gateway-attempts"] = _COUNTS[n] if n < len(_COUNTS) else str(n)
    resp = StreamResponse(status=200, headers=headers)  # headers leave with the first write
    await resp.prepare(request)
    return resp


class KeepAlive(Generic[T]):
    """Use as `async with KeepAlive(...) as ka: got = await ka.wait(); ...; client = await ka.commit(won)`.
    `error_event` renders a failure as the API's in-stream error event, for when headers already went
    out.

    The attempt loop runs in the caller's task: a separate task would put an extra scheduling hop
    between the first token and its commit. A timer starts the keep-alive writer only if the first
    token is late; the writer is stopped between two writes, never cancelled inside one."""

    def __init__(self, request: Request, rt: Runtime, ctx: RequestContext,
                 attempts: Coroutine[Any, Any, tuple[Won, T]], error_event: Callable[[GatewayError], bytes]):
        self.request, self.ctx, self.error_event = request, ctx, error_event
        self.after_s = rt.config.server.keepalive_after_s
        self.loop = rt.upstream.loop
        self.attempts = attempts
        self.client: StreamResponse | None = None
        # the keep-alive writer and the event that stops it, made together: most streams never need them
        self._writer: tuple[asyncio.Task[None], asyncio.Event] | None = None

    async def __aenter__(self) -> KeepAlive[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.attempts.close()  # never started (an error before `wait`): no "never awaited" warning
        await self._stop_writer()

    async def wait(self) -> tuple[Won, T] | None:
        """The winning attempt. The attempt loop's GatewayError is raised while it can still be an HTTP
        status; after early headers it is written as one error event and None is returned."""
        timer = self.loop.call_later(self.after_s, self._start_writer)
        try:
            result = await self.attempts
        except GatewayError as err:
            timer.cancel()
            await self._stop_writer()
            if self.client is None:
                raise
            self.ctx.stream_error = err.code
            await self.client.write(self.error_event(err))
            return None
        finally:
            timer.cancel()
        await self._stop_writer()
        return result

    def _start_writer(self) -> None:
        stop = asyncio.Event()
        self._writer = asyncio.ensure_future(self._keep_alive(stop)), stop

    async def _keep_alive(self, stop: asyncio.Event) -> None:
        if self.client is None:
            self.client = await commit(self.request, self.ctx, None)
        while not stop.is_set():
            await self.client.write(KEEPALIVE)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), KEEPALIVE_EVERY_S)

    async def _stop_writer(self) -> None:
        """Let the writer finish the write it is in, then end; its failure (a client gone) is the
        relay's to meet on its own next write."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        task, stop = writer
        stop.set()
        with contextlib.suppress(Exception):
            await task

    async def commit(self, won: Won) -> StreamResponse:
        if self.client is None:
            self.client = await commit(self.request, self.ctx, won)
        return self.client


async def serve_stream(request: Request, rt: Runtime, ctx: RequestContext,
                       open_attempt: Callable[[Deployment], Awaitable[Opened[S]]],
                       error_event: Callable[[GatewayError], bytes],
                       relay: Callable[[Opened[S], StreamResponse], Awaitable[None]],
                       drop: Callable[[Opened[S], str], Awaitable[None]]) -> StreamResponse:
    """A streamed request of any API: the attempt loop (with keep-alive while no token has come), the
    commit of the winner, its relay; the winner's upstream response is closed whatever happens. `drop`
    charges and closes an attempt the loop drops (`pipeline.unanswered.dropped`)."""
    attempts = run_attempts(rt, ctx, open_attempt, discard=drop, empty=_empty)
    async with KeepAlive(request, rt, ctx, attempts, error_event) as ka:
        got = await ka.wait()
        if got is None:
            assert ka.client is not None
            return ka.client
        won, opened = got
        try:
            ctx.deployment, ctx.t_answer = won.deployment, opened.t_first
            record_upstream_ttft(rt, ctx, won, opened.stream.assembler.first_token, opened.t_first - opened.t_sent)
            client = await ka.commit(won)
            ctx.rec.committed(opened.t_first)
            await relay(opened, client)
            return client
        finally:
            opened.close()


def _empty(opened: Opened[S]) -> bool:
    return opened.stream.empty_answer


def record_upstream_ttft(rt: Runtime, ctx: RequestContext, won: Won, first_token: bool, seconds: float) -> None:
    """The winning attempt: request sent to first output token received."""
    if first_token:
        d = won.deployment
        ctx.rec.upstream_first_token(ctx.model.name, d, seconds)
        routing = ctx.model.routing
        if routing == "latency" or routing == "cost":  # learned where routing reads it (docs/routing.md)
            average = rt.latency.observe(ctx.api, d.label, seconds, rt.mono())
            if average is not None:  # at most once a second per deployment and API
                ctx.rec.deployment_ttft(ctx.model.name, d, ctx.api, average)
