"""After the commit: relay the winning attempt to the client, one client write per upstream read.

bytes -> SSE decoder -> provider parser -> assembler -> text windows (redaction, stream guardrails) ->
encoder -> client. An unchanged chunk goes out as the upstream's own bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aiohttp import web

from gateway.chat_stream import OpenedStream
from gateway.context import RequestContext
from gateway.core.chat import has_output_token
from gateway.core.chat_filter import ChatOutputFilter
from gateway.core.sse import DONE_EVENT
from gateway.errors import GatewayError, GuardrailBlocked, UpstreamFailed, UpstreamTimeout
from gateway.guardrails import judge_output, record
from gateway.metrics import record_redactions
from gateway.providers.base import ChatChunk
from gateway.runtime import Runtime
from gateway.safety import SafetyRun
from gateway.sink import ClientSink
from gateway.upstream import UpstreamError


class StreamEnded(Exception):
    """The committed stream ended with an error event (reason for the metric)."""

    def __init__(self, error: GatewayError, reason: str):
        super().__init__(reason)
        self.error, self.reason = error, reason


async def relay(rt: Runtime, ctx: RequestContext, opened: OpenedStream, client: web.StreamResponse,
                run: SafetyRun | None, on_end: Callable[[], None]) -> None:
    """Write the held chunks, then the rest of the stream, then `[DONE]` or one error event.

    `on_end` records usage and cost; it runs before the last write, so a client that reads the metrics
    right after the stream sees them."""
    safety = rt.safety.models[ctx.model.name]
    filt = ChatOutputFilter(run.factory if run is not None else None, ctx.forward_usage)
    sink = ClientSink(rt, ctx, client, hold=bool(safety.hold_guards))
    try:
        first = _apply(filt, opened.pending)
        opened.pending = []
        await sink.emit(first, opened.t_first, filt.output_released)
        _check_refusal(filt)
        await _pump(opened, sink, filt)
        _check_upstream_error(opened)
        tail = filt.flush_all()
        _check_refusal(filt)
        if not (opened.assembler.finished or (opened.done and opened.assembler.first_token)):
            raise StreamEnded(UpstreamFailed(f"{opened.deployment.label}: upstream ended the stream early"),
                              "early_eof")
        verdict_error = await judge_output(rt, ctx, opened.assembler, safety.hold_guards + safety.audit_guards)
        if sink.hold is not None:
            if verdict_error is not None:
                raise StreamEnded(verdict_error, "guardrail")
            await sink.release_held(tail)
            tail = b""
        if verdict_error is not None:
            await sink.emit(tail, time.perf_counter(), True)
            raise StreamEnded(verdict_error, "guardrail")
        _record_stream_guards(rt, ctx, None)
        on_end()
        await client.write_eof(tail + DONE_EVENT)  # the last data and the chunked terminator in one write
        if opened.response is not None:
            opened.response.finish()  # keep the upstream connection for the next request
    except StreamEnded as end:
        if filt.refusal is not None:
            _record_stream_guards(rt, ctx, filt.refusal.guardrail)
        on_end()
        await _end_with_error(rt, ctx, client, filt, sink.hold is not None, end)
    finally:
        opened.close()
        if run is not None:
            ctx.redactions += record_redactions(rt.metrics, run.redaction_counts().items())


async def _pump(opened: OpenedStream, sink: ClientSink, filt: ChatOutputFilter) -> None:
    resp = opened.response
    while not opened.done and resp is not None:
        try:
            data = await resp.next_chunk()
            if not data:
                opened.decoder.finish()
                return
            t_read = time.perf_counter()
            chunks = opened.feed(data)
        except UpstreamError as exc:
            raise _after_token_error(opened, exc.failure.kind.value, exc.failure.is_timeout) from None
        out = _apply(filt, chunks)
        if out:
            await sink.emit(out, t_read, filt.output_released)
        _check_refusal(filt)


def _after_token_error(opened: OpenedStream, reason: str, timeout: bool) -> StreamEnded:
    cls = UpstreamTimeout if timeout else UpstreamFailed
    message = f"{opened.deployment.label}: {reason.replace('_', ' ')} after the first token"
    return StreamEnded(cls(message), reason)


def _check_upstream_error(opened: OpenedStream) -> None:
    if opened.error is not None:
        raise _after_token_error(opened, opened.error.kind.value, opened.error.is_timeout)


def _check_refusal(filt: ChatOutputFilter) -> None:
    if filt.refusal is not None:
        err = GuardrailBlocked(f"output refused by guardrail {filt.refusal.guardrail}",
                               param=filt.refusal.guardrail)
        raise StreamEnded(err, "guardrail")


def _apply(filt: ChatOutputFilter, chunks: list[ChatChunk]) -> bytes:
    if filt.output_released:
        return b"".join([filt.apply(ch.obj, ch.raw) for ch in chunks])
    return b"".join([filt.apply(ch.obj, ch.raw, has_output_token(ch.events)) for ch in chunks])


async def _end_with_error(rt: Runtime, ctx: RequestContext, client: web.StreamResponse,
                          filt: ChatOutputFilter, holding: bool, end: StreamEnded) -> None:
    """One error event, no [DONE]; text already sent stands. Held text that redaction masked is
    released first (it is safe); after a guardrail refusal nothing more is released."""
    tail = b"" if end.reason == "guardrail" or holding else filt.flush_all()
    ctx.stream_error = end.reason
    d = ctx.deployment
    assert d is not None
    if end.reason != "guardrail":  # counted before the client can see the event
        rt.metrics.stream_failures.labels(ctx.model.name, d.label, end.reason).inc()
    await client.write(tail + end.error.sse_bytes())


def _record_stream_guards(rt: Runtime, ctx: RequestContext, blocked_by: str | None) -> None:
    """Verdicts of the windowed (stream mode) guardrails, once the stream has ended."""
    for g in rt.safety.models[ctx.model.name].stream_guards:
        record(rt, ctx, g.name, "output", g.name != blocked_by)
