"""After the commit: relay the winning Messages attempt to the client, through the one pump (`relay.pump`).

The stream core (`core.messages.stream.MessagesStream`) does the per-event work and keeps the answer's
end (`message_delta` with the stop reason, `message_stop`) unsent, so the whole-answer guardrails (hold,
audit) judge before it goes out: a refusal replaces it with an error event. After the first token
nothing is retried: an upstream `error` is forwarded (scrubbed of our credentials, CONTRACT §5.3) and
ends the stream; any other failure is one `event: error` of the gateway's own; nothing follows it.
"""

from __future__ import annotations

import time

from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.messages.wire import MessagesEvent
from gateway.core.scrub import scrub_json
from gateway.core.sse import encode_event
from gateway.errors import UpstreamFailed
from gateway.inbound import StreamResponse
from gateway.observe.context import RequestContext
from gateway.observe.metrics import record_redactions
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.attempts import provider_keys
from gateway.pipeline.guardrails import judge_output, record
from gateway.pipeline.relay import StreamEnded, check_refusal, malformed_skipped, pump, stream_ended
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import SafetyRun
from gateway.pipeline.sink import ClientSink

MESSAGE_STOP = encode_event("message_stop", b'{"type":"message_stop"}')


class _Relay:
    def __init__(self, rt: Runtime, ctx: RequestContext, opened: Opened[MessagesStream], client: StreamResponse,
                 run: SafetyRun | None):
        safety = rt.safety.models[ctx.model.name]
        self.rt, self.ctx, self.opened, self.client = rt, ctx, opened, client
        self.stream = opened.stream
        self.run_safety = run
        self.accounted = False
        self.filt = MessagesOutputFilter(run.factory if run is not None else None)
        self.sink = ClientSink(rt, ctx, client, hold=bool(safety.hold_guards))
        self.judges = safety.hold_guards + safety.audit_guards

    async def run(self) -> None:
        stream, filt, d = self.stream, self.filt, self.opened.deployment
        await self.sink.emit(stream.commit(filt), self.opened.t_first, filt.output_released)
        check_refusal(filt)
        await pump(self.opened.response, stream, filt, self.sink, d)
        await self.sink.emit(stream.flushed, time.perf_counter(), filt.output_released)
        if stream.failed is not None:
            raise self._failed(stream.failed)
        if not stream.terminal:
            raise StreamEnded("early_eof", UpstreamFailed(
                f"{d.label}: upstream ended the stream before the message was complete"))
        tail = filt.flush_open()
        check_refusal(filt)
        verdict = await judge_output(self.rt, self.ctx, stream.assembler.as_chat(), self.judges)
        if verdict is not None:
            if self.sink.hold is None:  # audit: the text was out already
                await self.sink.emit(tail, time.perf_counter(), filt.output_released)
            raise StreamEnded("guardrail", verdict)
        end = b"".join([filt.apply(ev) for ev in stream.terminal])
        if stream.terminal[-1].type != "message_stop":  # the protocol's end, even if the upstream's was lost
            end += MESSAGE_STOP
        self.account(passed=True)  # before the client can see the end
        if self.sink.hold is not None:
            await self.sink.release_held(tail + end)
        else:
            await self.sink.emit(tail + end, time.perf_counter(), filt.output_released)

    def _failed(self, ev: MessagesEvent) -> StreamEnded:
        """An upstream `error` after the first token: forwarded, scrubbed, re-encoded from the parsed
        object (what we checked is exactly what the client gets), after what the windows held."""
        d = self.opened.deployment
        if ev.obj is None:
            return StreamEnded("malformed", UpstreamFailed(f"{d.label}: malformed event after the first token"))
        if self.sink.hold is not None:  # the client has seen nothing of this answer: only our error
            f = ev.failure
            return StreamEnded("inband_error", UpstreamFailed(
                f"{d.label}: upstream failed after the first token ({f.code if f else 'error'})"))
        clean = scrub_json(ev.obj, provider_keys(self.rt))
        err = clean.get("error") if isinstance(clean.get("error"), dict) else {}
        body = {"type": "error", "error": {"type": err.get("type") or "api_error",
                                           "message": err.get("message") or "upstream error"}}
        ev = MessagesEvent("error", body, None)
        return StreamEnded("inband_error", payload=self.filt.flush_open() + self.filt.apply(ev))

    async def end_with_error(self, end: StreamEnded) -> None:
        """One closing event; text already sent stands. Held text that redaction masked is released
        first (it is safe); after a guardrail refusal, or with a hold guardrail, nothing more is."""
        payload = end.payload
        if end.error is not None:
            tail = b"" if end.reason == "guardrail" or self.sink.hold is not None else self.filt.flush_open()
            payload = tail + end.error.anthropic_sse_bytes()
        self.ctx.stream_error = end.reason
        d = self.ctx.deployment
        assert d is not None
        if end.reason != "guardrail":  # counted before the client can see the event
            self.rt.metrics.stream_failures.labels(self.ctx.model.name, d.label, end.reason).inc()
        self.account(passed=False)
        await self.client.write(payload)

    def account(self, passed: bool, usage: bool = True) -> None:
        """Once per request, before the last write: stream guardrail verdicts, redactions, usage, cost."""
        if self.accounted:
            return
        self.accounted = True
        rt, ctx = self.rt, self.ctx
        refused = self.filt.refusal
        if passed or refused is not None:
            for g in rt.safety.models[ctx.model.name].stream_guards:
                record(rt, ctx, g.name, "output", refused is None or g.name != refused.guardrail)
        if self.run_safety is not None:
            ctx.redactions += record_redactions(rt.metrics, self.run_safety.redaction_counts().items())
        if usage:
            stream_ended(rt, ctx, self.opened)


async def relay(rt: Runtime, ctx: RequestContext, opened: Opened[MessagesStream], client: StreamResponse,
                run: SafetyRun | None) -> None:
    """Write the held preamble and the first token, then the rest; end with the message's end or one
    error event."""
    r = _Relay(rt, ctx, opened, client, run)
    try:
        await r.run()
        if opened.response is not None:
            opened.response.finish()  # keep the upstream connection for the next request
    except StreamEnded as end:
        await r.end_with_error(end)
    finally:
        opened.close()
        malformed_skipped(rt, ctx, opened)
        r.account(passed=False, usage=False)  # the client went away: no answer, so no usage to miss
