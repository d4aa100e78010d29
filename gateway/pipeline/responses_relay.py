"""After the commit: relay the winning Responses attempt to the client, through the one pump (`relay.pump`).

The stream core (`core.responses.stream.ResponsesStream`) does the per-event work and stops at the
terminal event (`response.completed` / `response.incomplete`), which waits for the whole-answer
guardrails (hold, audit): a refusal replaces it with an error event. After the first token nothing is
retried: an upstream `error` is forwarded and ends the stream; a `response.failed` is forwarded and
followed by one error event (the SDKs raise on it); any other failure is one error event (§4.3). A
forwarded failure is scrubbed of our credentials first (§5.3).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from gateway.core.events import InbandError
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.core.responses.wire import ERROR_TYPES, ResponsesEvent
from gateway.core.scrub import scrub_failure, scrub_json
from gateway.errors import UpstreamFailed
from gateway.inbound import StreamResponse
from gateway.observe.context import RequestContext
from gateway.observe.metrics import record_redactions
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.attempts import provider_keys
from gateway.pipeline.guardrails import record
from gateway.pipeline.held_line import judge_keeping_alive
from gateway.pipeline.relay import StreamEnded, check_refusal, malformed_skipped, pump, stream_ended
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import SafetyRun
from gateway.pipeline.sink import ClientSink


class _Relay:
    def __init__(self, rt: Runtime, ctx: RequestContext, opened: Opened[ResponsesStream], client: StreamResponse,
                 run: SafetyRun | None):
        safety = rt.safety.models[ctx.model.name]
        self.rt, self.ctx, self.opened, self.client = rt, ctx, opened, client
        self.stream = opened.stream
        self.run_safety = run
        self.accounted = False
        self.filt = ResponsesOutputFilter(run.factory if run is not None else None)
        self.sink = ClientSink(rt, ctx, client, hold=bool(safety.hold_guards))
        self.judges = safety.hold_guards + safety.audit_guards

    async def run(self) -> None:
        stream, filt, d = self.stream, self.filt, self.opened.deployment
        await self.sink.emit(stream.commit(filt), self.opened.t_first, filt.output_released)
        check_refusal(filt)
        await pump(self.opened.response, stream, filt, self.sink, d)
        if stream.failed is not None:
            raise self._failed(stream.failed)
        terminal = stream.terminal
        if terminal is None:
            raise StreamEnded("early_eof", UpstreamFailed(
                f"{d.label}: upstream ended the stream before the response was complete"))
        tail = filt.flush_open()
        check_refusal(filt)
        verdict = await judge_keeping_alive(self.rt, self.ctx, self.sink.keeper, stream.assembler.as_chat(),
                                            self.judges)
        if verdict is not None:
            if self.sink.hold is None:  # audit: the text was out already
                await self.sink.emit(tail, time.perf_counter(), filt.output_released)
            raise StreamEnded("guardrail", verdict)
        end = filt.apply(terminal)
        check_refusal(filt)
        self.account(passed=True)  # before the client can see the end
        if self.sink.hold is not None:
            await self.sink.release_held(tail + end)
        else:
            await self.sink.emit(tail + end, time.perf_counter(), filt.output_released)

    def _failed(self, ev: ResponsesEvent) -> StreamEnded:
        """An upstream failure after the first token: forwarded (renumbered, scrubbed), and the end."""
        d = self.opened.deployment
        if ev.obj is None:
            return StreamEnded("malformed", UpstreamFailed(f"{d.label}: malformed event after the first token"))
        ev = _scrubbed(ev, provider_keys(self.rt))
        f = ev.failure
        assert f is not None
        if self.sink.hold is not None:  # the client has seen nothing of this lifecycle: only our error
            return StreamEnded("inband_error", UpstreamFailed(
                f"{d.label}: upstream failed after the first token ({f.code or f.kind.value})"))
        payload = self.filt.flush_open() + self.filt.apply(ev)
        if ev.type not in ERROR_TYPES:  # response.failed: close with an error event too
            payload += self.filt.error_event({"message": f.message, "type": f.type or "api_error",
                                              "param": f.param, "code": f.code})
        return StreamEnded("inband_error", payload=payload)

    async def end_with_error(self, end: StreamEnded) -> None:
        """One closing event; text already sent stands. Held text that redaction masked is released
        first (it is safe); after a guardrail refusal, or with a hold guardrail, nothing more is."""
        payload = end.payload
        if end.error is not None and self.sink.hold is not None:
            payload = ResponsesOutputFilter(None).error_event(end.error.body()["error"])  # numbered from 0
        elif end.error is not None:
            tail = b"" if end.reason == "guardrail" else self.filt.flush_open()
            payload = tail + self.filt.error_event(end.error.body()["error"])
        self.ctx.stream_error = end.reason
        d = self.ctx.deployment
        assert d is not None
        if end.reason != "guardrail":  # counted before the client can see the event
            self.rt.metrics.stream_failures.labels(self.ctx.model.name, d.label, end.reason).inc()
        self.account(passed=False)
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
            ctx.redactions += record_redactions(rt.metrics, self.run_safety.redaction_counts().items())
        if usage:
            stream_ended(rt, ctx, self.opened)


def _scrubbed(ev: ResponsesEvent, keys: list[str]) -> ResponsesEvent:
    """The upstream's failure event with our credentials masked (CONTRACT §5.3), the one place after the
    commit where upstream error text reaches the client (the attempt loop scrubs the ones before it).
    Always re-encoded from the parsed, scrubbed object, never forwarded as the upstream's bytes: what
    we checked is then exactly what the client gets (raw bytes can hold a secret the parse does not
    show, e.g. in the first of two duplicate members); an error event is rare, so one dump costs nothing.
    Off the happy path: called only when a failure event has come."""
    assert ev.obj is not None
    events = [InbandError(scrub_failure(e.failure, keys)) if type(e) is InbandError else e for e in ev.events]
    return dataclasses.replace(ev, obj=_scrub_event(ev.obj, keys), raw=None, events=events)


def _scrub_event(obj: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """All of the event but a `response.failed`'s `response.output`: that is the answer so far, model
    output that the redaction filter rewrites and that must stay the text the client was sent as
    deltas (CONTRACT §5.1)."""
    resp = obj.get("response")
    if not (isinstance(resp, dict) and "output" in resp):
        clean: dict[str, Any] = scrub_json(obj, keys)
        return clean
    rest = scrub_json({k: v for k, v in resp.items() if k != "output"}, keys)
    outer = scrub_json({k: v for k, v in obj.items() if k != "response"}, keys)
    return {**outer, "response": {**rest, "output": resp["output"]}}


async def relay(rt: Runtime, ctx: RequestContext, opened: Opened[ResponsesStream], client: StreamResponse,
                run: SafetyRun | None) -> None:
    """Write the held preamble and the first token, then the rest; end with the terminal event or one
    error event."""
    r = _Relay(rt, ctx, opened, client, run)
    try:
        await r.run()
        if opened.response is not None:
            opened.response.finish()  # keep the upstream connection for the next request
    except StreamEnded as end:
        await r.end_with_error(end)
    finally:
        r.sink.close()
        opened.close()
        malformed_skipped(rt, ctx, opened)
        r.account(passed=False, usage=False)  # the client went away: no answer, so no usage to miss
