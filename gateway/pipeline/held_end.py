"""The relay of a stream whose end waits for the whole-answer guardrails: Responses (its terminal event)
and Messages (`message_delta` + `message_stop`). The stream core keeps that end unsent; this runs the
pump, judges the whole answer (keeping the line alive while a verdict is awaited, `held_line`), then
writes the end, or ends with one error event. The bytes of every end (the kept end, an upstream failure
forwarded, the API's error event) are the stream core's (`core.stream.StreamCore`).
"""

from __future__ import annotations

import time
from typing import Any, Generic, Protocol, TypeVar

from gateway.core.stream import StreamCore
from gateway.errors import UpstreamFailed
from gateway.http import StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.guardrails import record
from gateway.pipeline.held_line import judge_keeping_alive
from gateway.pipeline.ledger import commit_spend
from gateway.pipeline.relay import OutputFilter, StreamEnded, check_refusal, malformed_skipped, pump, stream_ended
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import SafetyRun
from gateway.pipeline.sink import ClientSink


class HeldEndFilter(OutputFilter, Protocol):
    def flush_open(self) -> bytes: ...


F = TypeVar("F", bound=HeldEndFilter)
S = TypeVar("S", bound=StreamCore)


class HeldEndRelay(Generic[S, F]):
    def __init__(self, rt: Runtime, ctx: RequestContext, opened: Opened[S], client: StreamResponse,
                 run: SafetyRun | None, filt: F, what: str = "answer"):
        self.what = what  # for the early-end message: "response", "message"
        safety = rt.safety.models[ctx.model.name]
        self.rt, self.ctx, self.opened, self.client = rt, ctx, opened, client
        self.stream: Any = opened.stream
        self.run_safety = run
        self.accounted = False
        self.filt = filt
        self.sink = ClientSink(rt, ctx, client, hold=bool(safety.hold_guards))
        self.judges = safety.hold_guards + safety.audit_guards

    def failed(self, ev: Any) -> StreamEnded:
        """An upstream failure after the first token (an event the core kept unsent), already scrubbed
        of our credentials, its `raw` dropped: forwarded by the core, re-encoded from its object; an
        unreadable one, or one while a hold guardrail kept the answer back, is one error of ours."""
        d = self.opened.deployment
        if ev.obj is None:
            return StreamEnded("malformed", UpstreamFailed(f"{d.label}: malformed event after the first token"))
        if self.sink.hold is not None:  # the client has seen nothing of this answer: only our error
            f = ev.failure
            return StreamEnded("inband_error", UpstreamFailed(
                f"{d.label}: upstream failed after the first token ({(f.code or f.kind.value) if f else 'error'})"))
        return StreamEnded("inband_error", payload=self.stream.forward_failure(ev))

    # -- the shared life after the commit ---------------------------------------------------------

    async def run(self) -> None:
        stream, filt, d = self.stream, self.filt, self.opened.deployment
        await self.sink.emit(stream.commit(filt), self.opened.t_first, filt.output_released)
        check_refusal(filt)
        await pump(self.opened.response, stream, filt, self.sink, d)
        await self.sink.emit(stream.drain(), time.perf_counter(), filt.output_released)
        if stream.failed is not None:  # scrubbed before any field of it is read (CONTRACT §5.3)
            raise self.failed(self.rt.safety.scrubber.event(stream.failed))
        if not stream.terminal:
            raise StreamEnded("early_eof", UpstreamFailed(
                f"{d.label}: upstream ended the stream before the {self.what} was complete"))
        tail = stream.tail()
        check_refusal(filt)
        verdict = await judge_keeping_alive(self.rt, self.ctx, self.sink.keeper, stream.assembler,
                                            self.judges)
        if verdict is not None:
            if self.sink.hold is None:  # audit: the text was out already
                await self.sink.emit(tail, time.perf_counter(), filt.output_released)
            raise StreamEnded("guardrail", verdict)
        end = stream.finish()
        check_refusal(filt)
        self.account(passed=True)  # before the client can see the end
        await commit_spend(self.rt, self.ctx)
        if self.sink.hold is not None:
            await self.sink.release_held(tail + end)
        else:
            await self.sink.emit(tail + end, time.perf_counter(), filt.output_released)

    async def end_with_error(self, end: StreamEnded) -> None:
        """One closing event; text already sent stands. Held text that redaction masked is released
        first (it is safe); after a guardrail refusal, or with a hold guardrail, nothing more is."""
        payload = end.payload if end.error is None else self.stream.fail(
            end.error.client_error(), held=self.sink.hold is not None, refused=end.reason == "guardrail")
        self.ctx.stream_error = end.reason
        d = self.ctx.deployment
        assert d is not None
        if end.reason != "guardrail":  # counted before the client can see the event
            self.ctx.rec.stream_failed(self.ctx.model.name, d, end.reason)
        self.account(passed=False)
        await commit_spend(self.rt, self.ctx)
        await self.sink.quiet()
        await self.client.write(payload)

    def account(self, passed: bool, usage: bool = True) -> None:
        """Once per request, before the last write: stream guardrail verdicts (all pass when the stream
        completed, a block for the one that refused), redactions, usage, cost and time per token."""
        if self.accounted:
            return
        self.accounted = True
        rt, ctx = self.rt, self.ctx
        refused = self.filt.refusal
        if passed or refused is not None:
            for g in rt.safety.models[ctx.model.name].stream_guards:
                record(rt, ctx, g.name, "output", refused is None or g.name != refused.guardrail)
        if self.run_safety is not None:
            ctx.redactions += ctx.rec.redactions(self.run_safety.redaction_counts().items())
        if usage:
            stream_ended(rt, ctx, self.opened)


async def relay_held_end(r: HeldEndRelay[Any, Any]) -> None:
    """Write the held preamble and the first token, then the rest; end with the kept end or one error
    event; the upstream response is released whatever happens."""
    opened = r.opened
    try:
        await r.run()
        if opened.response is not None:
            opened.response.finish()  # keep the upstream connection for the next request
    except StreamEnded as end:
        await r.end_with_error(end)
    finally:
        r.sink.close()
        opened.close()
        malformed_skipped(r.rt, r.ctx, opened)
        r.account(passed=False, usage=False)  # the client went away: no answer, so no usage to miss
