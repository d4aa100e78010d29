"""After the commit: relay the winning attempt to the client, one client write per upstream read, for
every client API alike.

`pump` reads upstream, feeds the API's stream core, writes what it returns, and stops at the core's end
or on a failure; the per-chunk work (bytes -> SSE decoder -> provider parser -> assembler -> text windows
(redaction, stream guardrails) -> client bytes, unchanged chunks as the upstream's own bytes) is the
core's (`core.stream.StreamCore`). `Relay` is the whole life after the commit: the held preamble, the
pump, then the end the core kept (`[DONE]`, the terminal event, `message_delta` + `message_stop`) once
the whole-answer guardrails have judged it, or one error event. The bytes of every end are the core's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from gateway.config.types import Deployment
from gateway.core.events import Failure, StreamFailed
from gateway.core.stages import Refusal
from gateway.core.stream import Ended, StreamCore
from gateway.core.usage_estimate import reported
from gateway.errors import GuardrailBlocked, UpstreamFailed, UpstreamTimeout
from gateway.http import StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.guardrails import record
from gateway.pipeline.held_line import judge_keeping_alive
from gateway.pipeline.ledger import commit_spend
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import ModelSafety, SafetyRun
from gateway.pipeline.sink import ClientSink, StreamEnded
from gateway.upstream import UpstreamError, UpstreamResponse

log = structlog.get_logger("gateway")


class OutputFilter(Protocol):
    """What the relay reads of an API's output filter."""

    output_released: bool

    @property
    def refusal(self) -> Refusal | None: ...


async def pump(resp: UpstreamResponse | None, stream: StreamCore, filt: OutputFilter, sink: ClientSink,
               d: Deployment, keep_last: bool) -> tuple[bytes, float]:
    """Relay until the core is done or the upstream's bytes end. With `keep_last`, what the read that
    ends the stream released is handed back (with its read time) instead of written: it goes out with the
    end, in one write (a paced stream's last tokens, finish and usage arrive in one read)."""
    while not stream.done and resp is not None:
        try:
            data = await resp.next_chunk()
            if not data:
                stream.end_of_input()
                break
            t_read = time.perf_counter()
            out = stream.feed(data)
        except (UpstreamError, StreamFailed) as exc:
            raise after_token_error(d, exc.failure) from None
        if out:
            if keep_last and stream.done and filt.refusal is None:
                return out, t_read
            await sink.emit(out, t_read, filt.output_released)
        check_refusal(filt)
    return b"", 0.0


def after_token_error(d: Deployment, failure: Failure) -> StreamEnded:
    reason = failure.kind.value
    cls = UpstreamTimeout if failure.is_timeout else UpstreamFailed
    return StreamEnded(reason, cls(f"{d.label}: {reason.replace('_', ' ')} after the first token"))


def check_refusal(filt: OutputFilter) -> None:
    r = filt.refusal
    if r is not None:
        raise StreamEnded("guardrail", GuardrailBlocked(f"output refused by guardrail {r.guardrail}",
                                                        param=r.guardrail))


class Resume(Protocol):
    """Continuation (docs/continuation.md, `pipeline.continuation.Continuation`), asked only after the upstream
    failed past the first token: whether the answer is now whole, its rest written through `write`."""

    @property
    def used(self) -> bool: ...

    async def __call__(self, opened: Opened[StreamCore], write: Callable[[bytes], Awaitable[None]]) -> bool: ...

    def account(self, opened: Opened[StreamCore]) -> None: ...


class Relay:
    """One committed stream's life: `await Relay(...).run()`; the upstream response is released and the
    request accounted whatever happens."""

    def __init__(self, rt: Runtime, ctx: RequestContext, opened: Opened[StreamCore], client: StreamResponse,
                 safety: ModelSafety, run: SafetyRun | None, filt: OutputFilter, resume: Resume | None = None,
                 ended: Callable[[], object] | None = None):
        self.rt, self.ctx, self.opened, self.client, self.safety = rt, ctx, opened, client, safety
        self.ended = ended  # told once the answer is whole or cut, with the accounting, before its end is written
        self.stream, self.run_safety, self.filt = opened.stream, run, filt
        self.sink = ClientSink(rt, ctx, client, safety.hold_guards[0].name if safety.hold_guards else None)
        self.accounted = False
        self.resume = resume  # the model continues a stream that fails after the first token
        self.last, self.t_last = b"", 0.0  # the last read's output, written with the end (`pump`)

    async def run(self) -> None:
        opened = self.opened
        try:
            await self._relay()
            if opened.response is not None:
                opened.response.finish()  # keep the upstream connection for the next request
        except StreamEnded as end:
            await self._end_with_error(end)
        finally:
            self.sink.close()
            opened.close()
            malformed_skipped(self.ctx, opened)
            # the client went away mid-stream: the upstream charged the prompt and what it sent, so the
            # key is charged too (docs/extensions.md, "A stream without usage")
            self.account(passed=False, client_gone=True)

    async def _relay(self) -> None:
        stream, filt, sink, client = self.stream, self.filt, self.sink, self.client
        first = stream.commit(filt)
        keep_last = sink.hold is None and not self.safety.audit_guards  # nothing is judged between the writes
        if stream.done and keep_last:
            client.cork()  # the whole answer is in hand and nothing below waits: one write for all of it
        await sink.emit(first, self.opened.t_first, filt.output_released)
        check_refusal(filt)
        try:
            self.last, self.t_last = await pump(self.opened.response, stream, filt, sink, self.opened.deployment,
                                                keep_last)
        except StreamEnded as failed:
            if failed.reason == "guardrail" or not await self._continue(failed.reason):
                raise
        else:
            drained = stream.drain()  # what a translator's parser still owed (its closing events)
            if drained:
                await self._write(drained)
            ended = stream.upstream_end(self.rt.safety.scrubber_for(self.ctx.model.name))
            # the failure's own event is read (and numbered) only when the stream ends with it
            if ended is not None:
                await self._flush_last()  # what came before the failure goes out before its event
                if not await self._continue(ended.reason):
                    raise self._ended(ended)
        tail = stream.tail()
        await self._check_refusal()
        if self.safety.hold_guards or self.safety.audit_guards:
            await self._judge(tail)
        end = stream.finish()
        await self._check_refusal()
        self.account(passed=True)  # before the client can see the end
        if self.rt.control is not None:  # commit_spend checks too; this spares the usual no-store stream a coroutine
            await commit_spend(self.rt, self.ctx)
        if sink.hold is not None:
            await sink.release_held(tail + end)
            return
        # the last read's data, the windows' tail and the terminator in one write
        await sink.end(self.last + tail + end, filt.output_released, self.t_last)

    async def _check_refusal(self) -> None:
        """A refusal ends the stream; what the last read released before it goes out first."""
        if self.filt.refusal is not None:
            await self._flush_last()
            check_refusal(self.filt)

    async def _judge(self, tail: bytes) -> None:
        """The whole-answer guardrails (hold, audit) judge the answer before its end is written."""
        safety, sink = self.safety, self.sink
        verdict = await judge_keeping_alive(self.rt, self.ctx, sink.keeper, self.stream.assembler,
                                            safety.hold_guards + safety.audit_guards)
        if verdict is not None:
            if sink.hold is None:  # audit: the text was out already
                await sink.emit(tail, time.perf_counter(), self.filt.output_released)
            raise StreamEnded("guardrail", verdict)

    async def _continue(self, reason: str) -> bool:
        """The upstream failed after the first token: continued on another deployment (a model with
        `continuation: on`, docs/continuation.md), or not."""
        opened, resume = self.opened, self.resume
        if resume is None:
            return False
        if opened.response is not None:
            opened.response.close()  # the failed one is never reused
            opened.response = None
        if not await resume(opened, self._write):
            return False
        self.ctx.rec.stream_failed(self.ctx.model.name, opened.deployment, reason)  # it did fail
        return True

    async def _write(self, data: bytes) -> None:
        """Write `data` (a continuation's, a parser's closing events) after the last read's output kept
        for the end, if any."""
        await self._flush_last()
        if data:
            await self.sink.emit(data, time.perf_counter(), self.filt.output_released)
            check_refusal(self.filt)

    async def _flush_last(self) -> None:
        """The last read's output kept for the end (`pump`), written now: the stream ends otherwise."""
        if self.last:
            last, self.last = self.last, b""
            await self.sink.emit(last, self.t_last, self.filt.output_released)

    def _ended(self, ended: Ended) -> StreamEnded:
        """The upstream's failure event forwarded (an API that passes those on), unless a hold guardrail
        kept the answer back (the client has seen nothing of it: only our error); else our error."""
        if ended.forward is not None and self.sink.hold is None:
            return StreamEnded(ended.reason, payload=ended.forward())
        f = ended.failure
        cls = UpstreamTimeout if f is not None and f.is_timeout else UpstreamFailed
        return StreamEnded(ended.reason, cls(ended.message))

    async def _end_with_error(self, end: StreamEnded) -> None:
        """One closing event; text already sent stands. Held text that redaction masked is released
        first (it is safe); after a guardrail refusal, or with a hold guardrail, nothing more is."""
        ctx = self.ctx
        payload = end.payload if end.error is None else self.stream.fail(
            end.error.client_error(), held=self.sink.hold is not None, refused=end.reason == "guardrail")
        ctx.stream_error = end.reason
        d = ctx.deployment
        assert d is not None
        if end.reason != "guardrail":  # counted before the client can see the event
            ctx.rec.stream_failed(ctx.model.name, d, end.reason)
        self.account(passed=False)
        await commit_spend(self.rt, ctx)
        await self.sink.quiet()
        await self.client.write(payload)

    def account(self, passed: bool, client_gone: bool = False) -> None:
        """Once per request, before the last write (or once the client went away): stream guardrail
        verdicts (all pass when the stream completed, a block for the one that refused), redactions,
        usage, cost and time per token, and the charges of the attempts that did not answer."""
        if self.accounted:
            return
        self.accounted = True
        ctx = self.ctx
        refused = self.filt.refusal
        guards = self.safety.stream_guards
        if guards and (passed or refused is not None):
            for g in guards:
                record(self.rt, ctx, g.name, "output", refused is None or g.name != refused.guardrail)
        if self.run_safety is not None:
            ctx.redactions += ctx.rec.redactions(self.run_safety.redaction_counts().items())
        if self.resume is not None and self.resume.used:
            self.resume.account(self.opened)
            malformed_skipped(ctx, self.opened)
        else:
            stream_ended(ctx, self.opened, passed, client_gone)
        if ctx.unanswered is not None:  # attempts billed before this one answered (`pipeline.unanswered`)
            ctx.fold_unanswered()
        if self.ended is not None:
            self.ended()


def stream_ended(ctx: RequestContext, opened: Opened[StreamCore], passed: bool, client_gone: bool = False) -> None:
    """Account a committed stream's end, whatever the API: its assembler's usage, its first token's time
    and the unreadable events it skipped. Without usage (a translation's placeholder zeros are none) the
    key is charged an estimate; a stream that ended before its answer did (`passed` False, the answer
    unfinished) has at most part of its usage (Anthropic's input at `message_start`), raised to the
    estimate where it falls short (docs/extensions.md, "A stream without usage"). A client that went away
    before any usage came leaves no answer whose usage went missing (`llm_gateway_usage_missing_total`
    counts the upstreams' omissions)."""
    asm = opened.stream.assembler
    usage = reported(asm.usage)
    if usage is not None or not client_gone:
        ctx.stream_ended(usage, opened.t_first if asm.first_token else None)
    if usage is None or not (passed or asm.finished):
        ctx.estimate_unreported_usage(asm.output_bytes())
    malformed_skipped(ctx, opened)


def malformed_skipped(ctx: RequestContext, opened: Opened[StreamCore]) -> None:
    """The unreadable events the stream core skipped after the first token, taken from it: counted and
    logged (the count, never the event: its text is the upstream's, maybe the model's output). At the
    stream's end, before its last write (`stream_ended`), and once more when the client went away first."""
    n, opened.stream.skipped_malformed = opened.stream.skipped_malformed, 0
    if n:
        ctx.rec.malformed_skipped(ctx.model.name, opened.deployment, n)
        log.warning("malformed_events_skipped", count=n, model=ctx.model.name, deployment=opened.deployment.label)
