"""OpenTelemetry traces (docs/extensions.md, "Traces"): one SERVER span per API request, a CLIENT span per upstream
attempt.

The client's W3C `traceparent`/`tracestate` is continued; each attempt's span is announced to its
upstream (`core.propagation`). Attributes follow the GenAI semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/): span names `{operation} {model}`,
`gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.provider.name`,
`gen_ai.usage.*`, `error.type`; the gateway's own under `gateway.*`. Values come from config (model, key,
deployment names) or fixed sets, never from message text, and no secret is ever one.

Built once per process at start (`Tracing`, from `config.telemetry`), not on reload. Why not the
OpenTelemetry SDK's tracer: creating, filling and ending its two spans per request, then building the
export's protobuf messages from them, cost about as much CPU as the rest of a streamed request (issue
#34). Here a request fills two slotted `otlp.SpanRecord`s and the export thread encodes them in one pass
(`otlp`, `span_export`). What the SDK decided is kept: its samplers (`always_on`, `always_off`,
`traceidratio` on the trace id's low 64 bits, and `parentbased_*`: a client's sampled flag decides),
random 128/64-bit ids, and the API's W3C propagator to read a client's `traceparent`/`tracestate`
(parsing untrusted headers stays with the library).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from opentelemetry.trace import get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway import __version__
from gateway.config.types import Deployment, ProviderConfig, TelemetryConfig
from gateway.core.api import ClientApi
from gateway.core.events import Failure, Usage
from gateway.core.propagation import TRACE_HEADERS
from gateway.observe.otlp import (
    FLAG_HAS_IS_REMOTE,
    FLAG_IS_REMOTE,
    KIND_CLIENT,
    KIND_SERVER,
    AttrValue,
    SpanRecord,
    resource_scope,
)
from gateway.observe.recorder import NO_TRACE, RequestTrace
from gateway.observe.span_export import BoundedBatchProcessor, OtlpHttpExporter

if TYPE_CHECKING:
    from gateway.observe.context import RequestContext

T = TypeVar("T")
_ERROR_OUTCOMES = frozenset({"upstream_error", "timeout"})
_LOW64 = (1 << 64) - 1


class Sampler:
    """The SDK's samplers by their OTEL_TRACES_SAMPLER names: `traceidratio` samples a trace when its
    id's low 64 bits are below ratio x 2^64 (so every span of a trace decides alike); `parentbased_*`
    follows a client's sampled flag when it sent a valid `traceparent`, the root sampler otherwise."""

    __slots__ = ("_bound", "_parent_based")

    def __init__(self, name: str, ratio: float):
        self._parent_based = name.startswith("parentbased_")
        root = name.removeprefix("parentbased_")
        self._bound = 1 << 64 if root == "always_on" else 0 if root == "always_off" else round(ratio * (1 << 64))

    def sampled(self, trace_id: int, parent_sampled: bool | None) -> bool:
        if self._parent_based and parent_sampled is not None:
            return parent_sampled
        return trace_id & _LOW64 < self._bound


def _new_id(bits: int) -> int:
    """A random non-zero id (W3C: all zeros is invalid), as the SDK's RandomIdGenerator."""
    while True:
        n = random.getrandbits(bits)
        if n:
            return n


class Tracing:
    """The process's tracer: sampler, ids, propagation, and the exporting processor."""

    def __init__(self, cfg: TelemetryConfig, on_dropped: Callable[[int], None]):
        assert cfg.traces_endpoint is not None
        resource = {**cfg.resource_attributes, "service.name": cfg.service_name, "service.version": __version__}
        head = resource_scope(resource, "llm-gateway", __version__)
        exporter = OtlpHttpExporter(cfg.traces_endpoint, cfg.headers, cfg.export_timeout_s, head)
        self.processor = BoundedBatchProcessor(
            exporter, on_dropped, max_queue_size=cfg.max_queue_size, max_batch=cfg.max_export_batch_size,
            schedule_delay_s=cfg.schedule_delay_s)
        self.sampler = Sampler(cfg.sampler, cfg.sampling_ratio)
        self.propagator = TraceContextTextMapPropagator()

    def start(self, headers: Mapping[str, str], api: ClientApi, path: str,
              providers: Mapping[str, ProviderConfig]) -> RequestTrace:
        """The server span of one API request, child of the client's `traceparent` when it sent a valid
        one. A request the sampler drops is not recorded at all (NO_TRACE), nor announced upstream."""
        parent_id, state, flags, parent_sampled = 0, "", FLAG_HAS_IS_REMOTE, None
        trace_id = 0
        if headers.get("traceparent"):
            parent = get_current_span(self.propagator.extract(headers)).get_span_context()
            if parent.is_valid:
                trace_id, parent_id, parent_sampled = parent.trace_id, parent.span_id, parent.trace_flags.sampled
                state, flags = parent.trace_state.to_header(), FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE
        if not trace_id:
            trace_id = _new_id(128)
        if not self.sampler.sampled(trace_id, parent_sampled):
            return NO_TRACE
        op = api.operation
        server = SpanRecord(trace_id, _new_id(64), parent_id, op, KIND_SERVER, time.time_ns(), {
            "gen_ai.operation.name": op, "gateway.api": api.name, "http.route": path}, state, flags)
        return SpanTrace(self.processor, server, op, providers)

    def flush(self) -> bool:
        return self.processor.force_flush()

    def shutdown(self) -> None:
        self.processor.shutdown()


class SpanTrace(RequestTrace):
    """The recorder of one traced request."""

    __slots__ = ("_continuing", "_epoch_ns", "_last", "_op", "_open", "_out", "_providers", "_returned", "_server")

    def __init__(self, out: BoundedBatchProcessor, server: SpanRecord, op: str,
                 providers: Mapping[str, ProviderConfig]):
        self._out, self._server, self._op, self._providers = out, server, op, providers
        self._epoch_ns = time.time_ns() - time.perf_counter_ns()  # perf_counter instants -> span times
        # attempts that returned and whose spans are still open, in the order they returned: the last is
        # the one that answers, until the loop drops it (`dropped`); two at once when a hedge's both won
        self._returned: list[tuple[Deployment, SpanRecord]] = []
        self._continuing: str | None = None  # the mode of the continuation the next attempt is
        self._last: str | None = None  # the previous attempt's deployment
        self._open = 0  # attempts running now: one more starting is a hedge

    def _provider_name(self, d: Deployment) -> str:
        p = self._providers.get(d.provider)
        return p.genai_name if p is not None and p.genai_name else d.provider

    def attempt(self, d: Deployment, run: Callable[[Deployment], Awaitable[T]]) -> Awaitable[T]:
        return self._attempt(d, run)

    async def _attempt(self, d: Deployment, run: Callable[[Deployment], Awaitable[T]]) -> T:
        kind = "continuation" if self._continuing else "hedge" if self._open else "first" if self._last is None \
            else ("retry" if self._last == d.label else "fallback")
        self._last = d.label
        server = self._server
        span = SpanRecord(server.trace_id, _new_id(64), server.span_id, f"{self._op} {d.model}", KIND_CLIENT,
                          time.time_ns(), {
            "gen_ai.operation.name": self._op, "gen_ai.request.model": d.model,
            "gen_ai.provider.name": self._provider_name(d), "gateway.deployment": d.label,
            "gateway.provider": d.provider, "gateway.attempt.kind": kind}, server.trace_state, FLAG_HAS_IS_REMOTE)
        if self._continuing:
            span.attributes["gateway.continuation.mode"] = self._continuing
            self._continuing = None
        # W3C traceparent: version 00, the trace, this attempt's span as the parent, sampled
        announce: tuple[tuple[str, str], ...] = (("traceparent", f"00-{span.trace_id:032x}-{span.span_id:016x}-01"),)
        if span.trace_state:
            announce += (("tracestate", span.trace_state),)
        token = TRACE_HEADERS.set(announce)
        self._open += 1
        try:
            result = await run(d)
        except asyncio.CancelledError:  # a hedge's loser once the other returned, else the client's leaving
            self._end_attempt(span, "hedge_cancelled" if self._returned else "cancelled", None)
            raise
        except BaseException as exc:
            failure = getattr(exc, "failure", None)  # an UpstreamError carries the classified Failure
            self._end_attempt(span, "failed", failure if isinstance(failure, Failure) else None)
            raise
        finally:
            self._open -= 1
            TRACE_HEADERS.reset(token)
        self._returned.append((d, span))
        return result

    def dropped(self, d: Deployment, outcome: str) -> None:
        for i in range(len(self._returned) - 1, -1, -1):
            if self._returned[i][0].label == d.label:
                self._end_attempt(self._returned.pop(i)[1], outcome, None)
                return

    def committed(self, t_first: float) -> None:
        at = self._epoch_ns + int(t_first * 1e9)
        events = self._server.events
        events.append(("first_token", at))
        if self._returned:
            self._returned[-1][1].events.append(("first_token", at))
        events.append(("commit", time.time_ns()))

    def continuing(self, mode: str) -> None:
        """The winner's stream failed after its first token: its span ends so; the next attempt's span
        is the continuation's (and the winner when it continues the answer)."""
        if self._returned:
            self._end_attempt(self._returned.pop()[1], "stream_failed", None)
        self._continuing = mode

    def stream_ended(self) -> None:
        self._server.events.append(("stream_end", time.time_ns()))

    def finish(self, ctx: RequestContext | None, status: int, outcome: str, answer: Usage | None = None) -> None:
        server = self._server
        attrs = server.attributes
        attrs["http.response.status_code"] = status
        attrs["gateway.outcome"] = outcome
        now = time.time_ns()
        self._end_winner(ctx, answer, now)
        if ctx is not None:
            server.name = f"{self._op} {ctx.model.name}"
            attrs.update({
                "gen_ai.request.model": ctx.model.name, "gateway.model": ctx.model.name,
                "gateway.key": ctx.key.name if ctx.key is not None else "none", "gateway.stream": ctx.stream,
                "gateway.attempts": ctx.attempts, "gateway.request_id": ctx.request_id})
            if ctx.cost_usd:
                attrs["gateway.cost_usd"] = ctx.cost_usd
            if ctx.cache_hit:
                attrs["gateway.cache_hit"] = True
            if ctx.stream_error is not None:
                attrs["gateway.stream_error"] = ctx.stream_error
            if ctx.session is not None:  # hashed at once: the client's id itself is never kept
                attrs["gateway.session_hash"] = ctx.session
            if ctx.affinity is not None:
                attrs["gateway.affinity"] = ctx.affinity
            if ctx.overhead_s is not None:  # docs/overhead.md
                attrs["gateway.overhead_ms"] = round(ctx.overhead_s * 1000, 3)
            self._answered(ctx, attrs)
        if outcome in _ERROR_OUTCOMES or status >= 500:
            attrs["error.type"] = outcome
            server.error = True
        server.end_ns = now
        self._out.on_end(server)

    def _end_winner(self, ctx: RequestContext | None, answer: Usage | None, now: int) -> None:
        """The answering attempt's span ends with the request: its own deployment's model and its own
        usage (a continuation's too), `stream_failed` when its stream ended with an error event."""
        winner = self._returned.pop() if self._returned else None
        for _, left in self._returned:  # none the loop left undropped: ended all the same, never leaked
            self._end_attempt(left, "hedge_cancelled", None)
        self._returned.clear()
        if winner is None:
            return
        d, span = winner
        self._usage(span.attributes, answer)
        span.attributes["gen_ai.response.model"] = d.model
        failed = ctx is not None and ctx.stream_error is not None and ctx.stream_error != "guardrail"
        span.attributes["gateway.attempt.outcome"] = "stream_failed" if failed else "ok"
        span.end_ns = now
        self._out.on_end(span)

    def _answered(self, ctx: RequestContext, attrs: dict[str, AttrValue]) -> None:
        """What the serving deployment answered, on the server span: its model, its provider, and the
        request's usage (the log line's: the answer's, plus any attempt billed without answering)."""
        d, u = ctx.deployment, ctx.usage
        if d is not None:
            attrs["gateway.deployment"] = d.label
            attrs["gen_ai.response.model"] = d.model
            attrs["gen_ai.provider.name"] = self._provider_name(d)
        if u is not None and ctx.usage_estimated:  # our estimate, not the provider's: not gen_ai.usage
            attrs["gateway.usage_estimated"] = True
        else:
            self._usage(attrs, u)

    @staticmethod
    def _usage(attrs: dict[str, AttrValue], u: Usage | None) -> None:
        """A provider's usage as `gen_ai.usage.*`: the optional parts only when reported (fewer to encode)."""
        if u is None:
            return
        attrs["gen_ai.usage.input_tokens"] = u.input
        attrs["gen_ai.usage.output_tokens"] = u.output
        if u.cached_input:
            attrs["gen_ai.usage.cache_read.input_tokens"] = u.cached_input
        if u.cache_creation_input:
            attrs["gen_ai.usage.cache_creation.input_tokens"] = u.cache_creation_input
        if u.reasoning:
            attrs["gateway.usage.reasoning_tokens"] = u.reasoning

    def _end_attempt(self, span: SpanRecord, outcome: str, failure: Failure | None) -> None:
        attrs = span.attributes
        attrs["gateway.attempt.outcome"] = outcome
        if failure is not None:
            attrs["error.type"] = failure.kind.value
            if failure.status is not None:
                attrs["http.response.status_code"] = failure.status
        span.error = outcome == "failed"
        span.end_ns = time.time_ns()
        self._out.on_end(span)


__all__ = ["NO_TRACE", "RequestTrace", "Sampler", "SpanTrace", "Tracing"]
