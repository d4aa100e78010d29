"""Mid-stream continuation (docs/continuation.md, issue #32): a committed stream whose upstream failed after
the first token (a cut, an idle stall, an in-band error) is continued on the model's next deployment, and
the client reads one answer.

The relay asks (`Continuation.__call__`) only on that failure path, for a model with `continuation: on`;
a stream that does not fail pays nothing. The text so far comes from the first stream's core
(`StreamCore.resume_point`: None inside a tool call, reasoning, or a choice of several, which then end as
before). The continuing attempt is opened like any attempt (`opener.open_stream`: its span, first-token
deadline, learn-once facts, breaker and attempt metric) on a request built by `core.continuation`:
**prefill** where the deployment continues a trailing assistant message (its `prefill`, unless it has
learned `no_prefill` from a 400 that never reaches the client), else **regenerate**. Its stream is read
through its own core (so its protocol, usage and end are read as always) with a tap on its parser: the
typed events go through `core.continuation.Seam` and into the first core (`continue_with`), whose id,
lifecycle, output filter (redaction window, stream guardrails) and end carry on across the seam.

Each attempt's usage is counted against its own deployment; the client gets the sum of what the
upstreams reported, the request's record (spend, `tpm`, budget, log line) the sum of what each attempt is
charged: an attempt cut before its usage came, or without any, the estimate of its prompt and output,
marked estimated (`account`). Candidates are the model's other deployments in its order after the one that
failed, while the breaker allows and `retry.max_attempts` has attempts left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.config.types import Deployment
from gateway.core.continuation import Diverged, Mode, Seam, add_usage, prefill_text
from gateway.core.events import (
    DeltaKind,
    Failure,
    FailureKind,
    Finish,
    OutputDelta,
    StreamEvent,
    StreamFailed,
    ToolCallDelta,
    Usage,
)
from gateway.core.policy.learned import Fact
from gateway.core.stream import StreamCore
from gateway.core.usage_estimate import reported
from gateway.observe.context import Leg, RequestContext
from gateway.pipeline.api import ServedApi
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.attempts import after_failure, run_one
from gateway.pipeline.opener import open_stream
from gateway.pipeline.runtime import Runtime
from gateway.upstream import UpstreamError

Write = Callable[[bytes], Awaitable[None]]  # the relay's write of client bytes (and its refusal check)
_CONTENT = DeltaKind.CONTENT


class _Rejected(Exception):
    """A prefill attempt's 400: the deployment does not continue an assistant message."""


class Tap:
    """A provider's stream parser, with every parsed item's typed events kept for the taker. It reads
    every event whole (no learned envelope, no native fast path): a continuation is not the hot path."""

    shape = None  # chat: no content-only fast path
    native = False  # messages: no by-the-bytes fast path

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.events: list[StreamEvent] = []

    def parse(self, event: Any) -> list[Any]:
        return self._keep(self.inner.parse(event))

    def finish(self) -> list[Any]:
        return self._keep(self.inner.finish())

    def _keep(self, items: list[Any]) -> list[Any]:
        for item in items:
            self.events.extend(item.events)
        return items

    def take(self) -> list[StreamEvent]:
        events, self.events = self.events, []
        return events


class Continuation:
    """Per request with `continuation: on`: `await cont(opened, write)` continues the failed stream and
    says whether its answer is now whole (False: it ends with one error event, as without)."""

    __slots__ = ("ctx", "legs", "rt", "served")

    def __init__(self, rt: Runtime, ctx: RequestContext, served: ServedApi) -> None:
        self.rt, self.ctx, self.served = rt, ctx, served
        self.legs: list[Leg] = []  # the answer's attempts, the one that failed first

    @property
    def used(self) -> bool:
        return len(self.legs) > 1

    async def __call__(self, opened: Opened[StreamCore], write: Write) -> bool:
        stream, model = opened.stream, self.ctx.model
        if not self.legs:  # cut: its text so far is all it sent
            asm = stream.assembler
            self.legs.append(Leg(opened.deployment, reported(asm.usage), asm.output_bytes()))
        for d in self._candidates(opened.deployment):
            text = stream.resume_point()
            if text is None or self.ctx.attempts >= model.retry.max_attempts:
                return False
            if not self.rt.allowed(d):  # asked just before the attempt: asking admits a half-open probe
                continue
            if await self._on(d, text, stream, write):
                return True
        return False

    def _candidates(self, failed: Deployment) -> list[Deployment]:
        """The model's other deployments that serve the API, in its order after the one that failed (tier
        by tier, config order inside: a later tier only after every deployment of the earlier ones)."""
        model = self.ctx.model
        ds = [model.deployments[i] for i in model.table.flat]
        at = next((i for i, d in enumerate(ds) if d.label == failed.label), -1)
        return [d for d in (*ds[at + 1:], *ds[:max(at, 0)])
                if d.label != failed.label and self.rt.translator(self.ctx.schema, d) is not None]

    async def _on(self, d: Deployment, text: str, stream: StreamCore, write: Write) -> bool:
        rt, ctx = self.rt, self.ctx
        prefill = d.prefill and not rt.learned.knows(ctx, d, Fact.NO_PREFILL) and bool(prefill_text(text))
        if prefill:
            try:
                return await self._leg(d, Mode.PREFILL, text, stream, write)
            except _Rejected:
                rt.learned.learn(ctx, d, Fact.NO_PREFILL, rt.provider(d).learn_ttl_s)
                self._outcome(d, Mode.PREFILL, "failed")
                if ctx.attempts >= ctx.model.retry.max_attempts:
                    return False
        return await self._leg(d, Mode.REGENERATE, text, stream, write)

    async def _leg(self, d: Deployment, mode: Mode, text: str, stream: StreamCore, write: Write) -> bool:
        """One continuing attempt on `d`: True when the answer is whole."""
        ctx, tap, outcome = self.ctx, None, "failed"
        prefilled = prefill_text(text) if mode is Mode.PREFILL else ""
        body = self.served.prefill(ctx.body, prefilled) if mode is Mode.PREFILL else ctx.body

        def core(parser: Any, label: str) -> StreamCore:
            nonlocal tap
            tap = Tap(parser)
            return self.served.stream_core(tap, label)

        served = dataclasses.replace(self.served, stream_core=core)
        ctx.attempts += 1
        ctx.rec.continuing(mode.value)
        try:
            second = await run_one(self.rt, ctx, d, lambda dd: open_stream(self.rt, ctx, served, dd, body))
        except UpstreamError as exc:
            return self._not_opened(d, mode, exc.failure)
        ctx.rec.attempt_ended(ctx.model.name, d, "ok")  # it opened: how it went on is its `continuations` outcome
        assert tap is not None
        try:
            outcome = await self._read(second, tap, Seam(mode, text), stream, write)
        finally:  # a guardrail's refusal or the client's leaving too: its usage is the request's
            if second.response is not None:
                second.response.close()
            asm = second.stream.assembler
            self.legs.append(Leg(d, reported(asm.usage), asm.output_bytes(), len(prefilled.encode()),
                                 outcome == "ok"))
        self._outcome(d, mode, outcome)
        return outcome == "ok"

    def _not_opened(self, d: Deployment, mode: Mode, f: Failure) -> bool:
        """A continuing attempt that failed before its first token. A prefill's 400 is the deployment's
        answer to the prefill (told by its status: the upstreams word it each their own way), learned and
        never shown to the client."""
        rejected = f.status == 400 and f.kind in (FailureKind.HTTP_4XX, FailureKind.STREAM_OPTIONS_REJECTED)
        if mode is Mode.PREFILL and rejected:
            self.ctx.rec.attempt_ended(self.ctx.model.name, d, "http_4xx")
            raise _Rejected
        after_failure(self.rt, self.ctx, d, f)
        self._outcome(d, mode, "failed")
        return False

    async def _read(self, second: Opened[StreamCore], tap: Tap, seam: Seam, stream: StreamCore,
                    write: Write) -> str:
        """The continuing stream through its own core, its events through the seam into the first core."""
        core = second.stream
        try:
            if second.response is None:
                return "failed"  # a deployment that answers streams with a body: its events are not tapped
            core.commit(self.served.output_filter(None, False))  # its own bytes are for no client
            await _pass(tap.take(), seam, stream, write)
            while not core.done:
                data = await second.response.next_chunk()
                if not data:
                    core.end_of_input()
                    break
                core.feed(data)
                await _pass(tap.take(), seam, stream, write)
            core.drain()
            await _pass(tap.take(), seam, stream, write)
            if core.upstream_end(self.rt.safety.scrubber_for(self.ctx.model.name)) is not None:
                return "failed"
            seam.end()
        except Diverged:
            return "diverged"
        except (UpstreamError, StreamFailed):
            return "failed"
        second.response.finish()  # a whole answer: its connection may serve the next request
        second.response = None
        total = add_usage(self._before(), core.assembler.usage)
        end: list[StreamEvent] = [Finish(0, core.end_reason() or "")]
        await write(stream.continue_with(end if total is None else [*end, total]))
        return "ok"

    def _before(self) -> Usage | None:
        """What the upstreams of the earlier attempts reported, summed: the client's usage counts no
        estimate (as a stream without usage tells none)."""
        total: Usage | None = None
        for leg in self.legs:
            total = add_usage(total, leg.usage)
        return total

    def _outcome(self, d: Deployment, mode: Mode, outcome: str) -> None:
        ctx = self.ctx
        ctx.rec.continuation(ctx.model.name, d, mode.value, outcome)
        ctx.continued = f"{mode.value}:{outcome}"  # the request's log line says how its stream ended

    def account(self, opened: Opened[StreamCore]) -> None:
        """A continued stream's end: each attempt's reported usage and cost against its own deployment
        (the last one's as a stream's end: time per token too); the request's usage and cost (its key
        is charged) the sum of each attempt's charge, estimated where its upstream reported no whole
        usage (`RequestContext.charge_of`)."""
        ctx, asm = self.ctx, opened.stream.assembler
        *before, last = self.legs
        for leg in before:
            ctx.rec.usage(ctx.model.name, leg.deployment, leg.usage, ctx.key_name)
        served, ctx.deployment = ctx.deployment, last.deployment
        try:
            ctx.stream_ended(last.usage, opened.t_first if asm.first_token else None)
        finally:
            ctx.deployment = served
        ctx.charge_legs(self.legs)


async def _pass(events: list[StreamEvent], seam: Seam, stream: StreamCore, write: Write) -> None:
    """A continuing attempt's events that go on to the client: content past the seam (its other kinds
    of text the client has read already: the answer was in its content) and tool calls. Its end and
    usage go on once it is whole (`Continuation._read`); an in-band error ends its own core."""
    out: list[StreamEvent] = []
    for e in events:
        t = type(e)
        if t is OutputDelta:
            assert isinstance(e, OutputDelta)
            if e.kind is _CONTENT and e.choice == 0:
                rest = seam.feed(e.text)
                if rest:
                    out.append(OutputDelta(0, _CONTENT, rest))
        elif t is ToolCallDelta:
            seam.other_output()
            out.append(e)
    if out:
        await write(stream.continue_with(out))
