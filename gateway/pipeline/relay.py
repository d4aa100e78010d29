"""After the commit: relay the winning attempt to the client, one client write per upstream read.

`pump` is the one relay loop of every API: read upstream, feed the API's stream core, write what it
returns, stop at the core's end or on a failure. The per-chunk work (bytes -> SSE decoder -> provider
parser -> assembler -> text windows (redaction, stream guardrails) -> client bytes, unchanged chunks as
the upstream's own bytes) is the core's (`core.stream.StreamCore`). `relay` is the whole life after the
commit of a stream that ends in band (chat's): the held preamble, the pump, then the core's end or its
error event.
"""

from __future__ import annotations

import time
from typing import Protocol, TypeVar

import structlog

from gateway.config.types import Deployment
from gateway.core.events import Failure, StreamFailed
from gateway.core.stages import Refusal
from gateway.core.stream import StreamCore
from gateway.errors import GatewayError, GuardrailBlocked, UpstreamFailed, UpstreamTimeout
from gateway.http import StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.guardrails import record
from gateway.pipeline.held_line import judge_keeping_alive
from gateway.pipeline.ledger import commit_spend
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import SafetyRun
from gateway.pipeline.sink import ClientSink
from gateway.upstream import UpstreamError, UpstreamResponse

log = structlog.get_logger("gateway")


class StreamEnded(Exception):
    """The committed stream ends badly: `error` goes out as the API's error event, or `payload` as it is
    (an upstream failure forwarded); `reason` is the metric's and the log line's."""

    def __init__(self, reason: str, error: GatewayError | None = None, payload: bytes = b""):
        super().__init__(reason)
        self.reason, self.error, self.payload = reason, error, payload


class OutputFilter(Protocol):
    """What the pump reads of an API's output filter."""

    output_released: bool

    @property
    def refusal(self) -> Refusal | None: ...


async def pump(resp: UpstreamResponse | None, stream: StreamCore, filt: OutputFilter, sink: ClientSink,
               d: Deployment) -> None:
    """Relay until the core is done or the upstream's bytes end."""
    while not stream.done and resp is not None:
        try:
            data = await resp.next_chunk()
            if not data:
                stream.end_of_input()
                return
            t_read = time.perf_counter()
            out = stream.feed(data)
        except (UpstreamError, StreamFailed) as exc:
            raise after_token_error(d, exc.failure) from None
        if out:
            await sink.emit(out, t_read, filt.output_released)
        check_refusal(filt)


def after_token_error(d: Deployment, failure: Failure) -> StreamEnded:
    reason = failure.kind.value
    cls = UpstreamTimeout if failure.is_timeout else UpstreamFailed
    return StreamEnded(reason, cls(f"{d.label}: {reason.replace('_', ' ')} after the first token"))


def check_refusal(filt: OutputFilter) -> None:
    r = filt.refusal
    if r is not None:
        raise StreamEnded("guardrail", GuardrailBlocked(f"output refused by guardrail {r.guardrail}",
                                                        param=r.guardrail))


class InbandEnded(StreamCore, Protocol):
    """A core whose stream ends in band (chat's: `[DONE]`, or the upstream's bytes): an in-band error
    after the first token is kept in `error`, an end without `[DONE]` is `ended_early`."""

    error: Failure | None

    @property
    def ended_early(self) -> bool: ...


IE = TypeVar("IE", bound=InbandEnded)
S = TypeVar("S", bound=StreamCore)


async def relay(rt: Runtime, ctx: RequestContext, opened: Opened[IE], client: StreamResponse,
                run: SafetyRun | None, filt: OutputFilter) -> None:
    """Write the held chunks, then the rest of the stream, then the core's end or one error event."""
    safety = rt.safety.models[ctx.model.name]
    stream = opened.stream
    sink = ClientSink(rt, ctx, client, hold=bool(safety.hold_guards))
    try:
        first = stream.commit(filt)
        if stream.done and sink.hold is None and not safety.audit_guards:
            client.cork()  # the whole answer is in hand and nothing below waits: one write for all of it
        await sink.emit(first, opened.t_first, filt.output_released)
        check_refusal(filt)
        await pump(opened.response, stream, filt, sink, opened.deployment)
        if stream.error is not None:
            raise after_token_error(opened.deployment, stream.error)
        tail = stream.tail()
        check_refusal(filt)
        if stream.ended_early:
            label = opened.deployment.label
            raise StreamEnded("early_eof", UpstreamFailed(f"{label}: upstream ended the stream early"))
        verdict_error = await judge_keeping_alive(rt, ctx, sink.keeper, stream.assembler,
                                                  safety.hold_guards + safety.audit_guards)
        if sink.hold is not None:
            if verdict_error is not None:
                raise StreamEnded("guardrail", verdict_error)
            await sink.release_held(tail)
            tail = b""
        if verdict_error is not None:
            await sink.emit(tail, time.perf_counter(), True)
            raise StreamEnded("guardrail", verdict_error)
        _record_stream_guards(rt, ctx, None)
        stream_ended(rt, ctx, opened)
        await commit_spend(rt, ctx)  # in the ledger before the client can see the end
        await client.write_eof(tail + stream.finish())  # the last data and the chunked terminator in one write
        if opened.response is not None:
            opened.response.finish()  # keep the upstream connection for the next request
    except StreamEnded as end:
        if filt.refusal is not None:
            _record_stream_guards(rt, ctx, filt.refusal.guardrail)
        stream_ended(rt, ctx, opened)
        await sink.quiet()
        await _end_with_error(rt, ctx, client, stream, sink.hold is not None, end)
    finally:
        sink.close()
        opened.close()
        malformed_skipped(rt, ctx, opened)
        if run is not None:
            ctx.redactions += ctx.rec.redactions(run.redaction_counts().items())


def stream_ended(rt: Runtime, ctx: RequestContext, opened: Opened[S]) -> None:
    """Account a committed stream's end, whatever the API: its assembler's usage, its first token's time
    and the unreadable events it skipped."""
    asm = opened.stream.assembler
    ctx.stream_ended(asm.usage, opened.t_first if asm.first_token else None)
    if asm.usage is None:
        ctx.estimate_unreported_usage(asm.output_bytes())
    malformed_skipped(rt, ctx, opened)


def malformed_skipped(rt: Runtime, ctx: RequestContext, opened: Opened[S]) -> None:
    """The unreadable events the stream core skipped after the first token, taken from it: counted and
    logged (the count, never the event: its text is the upstream's, maybe the model's output). At the
    stream's end, before its last write (`stream_ended`), and once more when the client went away first."""
    n, opened.stream.skipped_malformed = opened.stream.skipped_malformed, 0
    if n:
        ctx.rec.malformed_skipped(ctx.model.name, opened.deployment, n)
        log.warning("malformed_events_skipped", count=n, model=ctx.model.name, deployment=opened.deployment.label)


async def _end_with_error(rt: Runtime, ctx: RequestContext, client: StreamResponse, stream: StreamCore,
                          holding: bool, end: StreamEnded) -> None:
    """One error event, no [DONE]; text already sent stands. Held text that redaction masked is
    released first (it is safe); after a guardrail refusal nothing more is released."""
    ctx.stream_error = end.reason
    d = ctx.deployment
    assert d is not None
    if end.reason != "guardrail":  # counted before the client can see the event
        ctx.rec.stream_failed(ctx.model.name, d, end.reason)
    assert end.error is not None
    await commit_spend(rt, ctx)
    await client.write(stream.fail(end.error.client_error(), held=holding, refused=end.reason == "guardrail"))


def _record_stream_guards(rt: Runtime, ctx: RequestContext, blocked_by: str | None) -> None:
    """Verdicts of the windowed (stream mode) guardrails, once the stream has ended."""
    for g in rt.safety.models[ctx.model.name].stream_guards:
        record(rt, ctx, g.name, "output", g.name != blocked_by)
