"""After the commit: relay the winning attempt to the client, one client write per upstream read.

bytes -> SSE decoder -> provider parser -> assembler -> text windows (redaction, stream guardrails) ->
encoder -> client. An unchanged chunk goes out as the upstream's own bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.apis.chat_attempt import OpenedStream
from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.shape import ContentShape, Run
from gateway.core.chat.wire import has_output_token
from gateway.core.sse import DONE_EVENT, SSEEvent, data_lines
from gateway.errors import GatewayError, GuardrailBlocked, UpstreamFailed, UpstreamTimeout
from gateway.inbound import StreamResponse
from gateway.observe.context import RequestContext
from gateway.observe.metrics import record_redactions
from gateway.pipeline.attempt_io import decode
from gateway.pipeline.guardrails import judge_output, record
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import SafetyRun
from gateway.pipeline.sink import ClientSink
from gateway.providers.base import ChatChunk
from gateway.upstream import UpstreamError


class StreamEnded(Exception):
    """The committed stream ended with an error event (reason for the metric)."""

    def __init__(self, error: GatewayError, reason: str):
        super().__init__(reason)
        self.error, self.reason = error, reason


async def relay(rt: Runtime, ctx: RequestContext, opened: OpenedStream, client: StreamResponse,
                run: SafetyRun | None, on_end: Callable[[], None]) -> None:
    """Write the held chunks, then the rest of the stream, then `[DONE]` or one error event.

    `on_end` records usage and cost; it runs before the last write, so a client that reads the metrics
    right after the stream sees them."""
    safety = rt.safety.models[ctx.model.name]
    filt = ChatOutputFilter(run.factory if run is not None else None, ctx.forward_usage)
    sink = ClientSink(rt, ctx, client, hold=bool(safety.hold_guards))
    try:
        first = _apply(filt, opened.pending)
        if opened.unread:
            first += _relay_events(opened, filt, opened.unread)
        if opened.unread_datas:
            first += _relay_datas(opened, filt, opened.unread_datas)
        opened.pending, opened.unread, opened.unread_datas = [], [], []
        if opened.done and sink.hold is None and not safety.audit_guards:
            client.cork()  # the whole answer is in hand and nothing below waits: one write for all of it
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
            out = _relay_read(opened, filt, data)
        except UpstreamError as exc:
            raise _after_token_error(opened, exc.failure.kind.value, exc.failure.is_timeout) from None
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


def _relay_read(opened: OpenedStream, filt: ChatOutputFilter, data: bytes) -> bytes:
    if opened.parser is not None and opened.parser.shape is not None:
        region = opened.decoder.take_region(data)  # the usual read: whole events, read by their bytes
        if region is not None:
            datas = data_lines(region)
            if datas is not None:
                return _relay_datas(opened, filt, datas)
            return _relay_events(opened, filt, opened.decoder.events_of(region))
    return _relay_events(opened, filt, decode(opened.decoder, data, opened.deployment))


def _relay_events(opened: OpenedStream, filt: ChatOutputFilter, events: list[SSEEvent]) -> bytes:
    """The events of one upstream read -> the client's bytes."""
    if opened.parser is None or opened.parser.shape is None:
        return _apply(filt, opened.feed_events(events))
    return _relay_datas(opened, filt, [ev.data for ev in events])


def _relay_datas(opened: OpenedStream, filt: ChatOutputFilter, datas: list[bytes]) -> bytes:
    """The event data of one read -> the client's bytes. Runs of content chunks of the learned
    envelope go through the assembler and the text window together, and out as their own bytes when
    the window released them as they came; the other events one by one."""
    shape = opened.parser.shape if opened.parser is not None else None
    if shape is None:  # a parser that reads every event whole
        ident = opened.decoder.last_id
        return _apply(filt, opened.feed_events([SSEEvent(d, None, ident) for d in datas]))
    segments = shape.runs(datas) if len(datas) > 1 and filt.content_push(shape.index) is not None else None
    if segments is None:
        return _relay_each(opened, filt, datas)
    out: list[bytes] = []
    for seg in segments:
        if type(seg) is list:
            out.append(_relay_each(opened, filt, seg))
            if opened.error is not None:
                break  # an in-band error: what came before it stands, nothing after it is read
            continue
        assert isinstance(seg, Run)
        push = filt.content_push(seg.index)  # None once a guardrail refused: then one event at a time
        if push is None:
            out.append(_relay_each(opened, filt, seg.datas))
            continue
        opened.assembler.add_contents(seg.index, seg.texts)
        events = seg.events(push(seg.texts))
        if events:
            filt.output_released = True
            out.append(events)
    return b"".join(out)


def _relay_each(opened: OpenedStream, filt: ChatOutputFilter, datas: list[bytes]) -> bytes:
    """Event data one by one. A content-only chunk of the stream's learned envelope goes from its
    bytes to the filter with no chunk object in between; every other event takes the parser,
    `OpenedStream.feed_events` and the filter's general path (the parsers that learn shapes read an
    event's data only)."""
    assert opened.parser is not None and opened.parser.shape is not None
    shape = opened.parser.shape
    out: list[bytes] = []
    match = shape.match
    index = shape.index
    push = filt.content_push(index)  # the read's deltas to the window together, when nothing can refuse
    hits: list[tuple[str, int, int]] = []  # matched chunks not yet through the window, and their bytes
    raws: list[bytes] = []
    for data in datas:
        hit = match(data)
        if hit is not None and push is not None:
            hits.append(hit)
            raws.append(data)
            continue
        if hits:
            _release(out, hits, raws, push, opened, index, filt)
            hits, raws = [], []
        if hit is not None:  # a stage that can refuse: one delta at a time
            text, _, end = hit
            opened.assembler.add_content(index, text)
            _write_released(out, shape, data, end, text, filt.release_content(index, text))
            continue
        out.extend(_apply_one(filt, ch) for ch in opened.feed_events([SSEEvent(data)]))
        if opened.error is not None:
            break  # an in-band error: what came before it stands, nothing after it is read
        if shape.index != index or filt.refusal is not None:
            index = shape.index  # the parse may have taught the shape a new envelope
            push = filt.content_push(index)
    if hits:
        _release(out, hits, raws, push, opened, index, filt)
    return b"".join(out)


def _release(out: list[bytes], hits: list[tuple[str, int, int]], raws: list[bytes],
             push: Callable[[list[str]], list[str]] | None, opened: OpenedStream, index: int,
             filt: ChatOutputFilter) -> None:
    """Consecutive content chunks of one read (their matches and bytes) through the assembler and the
    window together; a chunk whose text is released as it came is forwarded as the upstream's bytes,
    a changed one spliced."""
    assert push is not None and opened.parser is not None and opened.parser.shape is not None
    splice = opened.parser.shape.splice_into
    texts = [h[0] for h in hits]
    opened.assembler.add_contents(index, texts)
    before = len(out)
    for data, (text, _, end), rel in zip(raws, hits, push(texts), strict=True):
        if rel == text:
            out += (b"data: ", data, b"\n\n")
        elif rel:
            splice(out, data, end, rel)
    if len(out) > before:
        filt.output_released = True


def _write_released(out: list[bytes], shape: ContentShape, data: bytes, end: int, text: str, rel: str) -> None:
    if rel == text:
        out += (b"data: ", data, b"\n\n")
    elif rel:
        shape.splice_into(out, data, end, rel)


def _apply(filt: ChatOutputFilter, chunks: list[ChatChunk]) -> bytes:
    if len(chunks) == 1:
        return _apply_one(filt, chunks[0])
    return b"".join([_apply_one(filt, ch) for ch in chunks])


def _apply_one(filt: ChatOutputFilter, ch: ChatChunk) -> bytes:
    return filt.apply(ch.obj, ch.raw, not filt.output_released and has_output_token(ch.events))


async def _end_with_error(rt: Runtime, ctx: RequestContext, client: StreamResponse,
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
