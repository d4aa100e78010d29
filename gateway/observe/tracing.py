"""OpenTelemetry traces (CONTRACT §8): one SERVER span per API request, a CLIENT span per upstream attempt.

The client's W3C `traceparent`/`tracestate` is continued; each attempt's span is announced to its
upstream (`core.propagation`). Attributes follow the GenAI semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/): span names `{operation} {model}`,
`gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.provider.name`,
`gen_ai.usage.*`, `error.type`; the gateway's own under `gateway.*`. Values come from config (model, key,
deployment names) or fixed sets, never from message text, and no secret is ever one.

Built once per process at start (`Tracing`, from `config.telemetry`), not on reload; a TracerProvider of
our own, never the global one. Spans leave through `span_export.BoundedBatchProcessor`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import Span, SpanKind, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway import __version__
from gateway.config.types import Deployment, ProviderConfig, TelemetryConfig
from gateway.core.api import ClientApi
from gateway.core.events import Failure
from gateway.core.propagation import TRACE_HEADERS
from gateway.observe.recorder import NO_TRACE, RequestTrace
from gateway.observe.span_export import BoundedBatchProcessor

if TYPE_CHECKING:
    from gateway.observe.context import RequestContext

T = TypeVar("T")
log = structlog.get_logger("gateway")
_ERROR_OUTCOMES = frozenset({"upstream_error", "timeout"})


def _sampler(cfg: TelemetryConfig) -> Sampler:
    ratio = TraceIdRatioBased(cfg.sampling_ratio)
    root: Sampler = {"always_on": ALWAYS_ON, "always_off": ALWAYS_OFF}.get(cfg.sampler.removeprefix("parentbased_"),
                                                                          ratio)
    return ParentBased(root) if cfg.sampler.startswith("parentbased_") else root


class _Watched(SpanExporter):
    """The OTLP exporter, with one warning when exports start failing and one when they recover (the
    SDK's own log lines, one per batch, are silenced: the dropped-span counter tells the rate)."""

    def __init__(self, inner: SpanExporter, endpoint: str):
        self.inner, self.endpoint, self.failing = inner, endpoint, False

    def export(self, spans: Any) -> SpanExportResult:
        result = self.inner.export(spans)
        failing = result is not SpanExportResult.SUCCESS
        if failing != self.failing:
            self.failing = failing
            (log.warning if failing else log.info)("trace_export_failing" if failing else "trace_export_recovered")
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()


class Tracing:
    """The process's tracer: provider, sampler, exporter and propagator."""

    def __init__(self, cfg: TelemetryConfig, on_dropped: Callable[[int], None]):
        assert cfg.traces_endpoint is not None
        logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
        resource = Resource({**cfg.resource_attributes, "service.name": cfg.service_name,
                             "service.version": __version__})
        self.provider = TracerProvider(resource=resource, sampler=_sampler(cfg))
        exporter = OTLPSpanExporter(endpoint=cfg.traces_endpoint, headers=dict(cfg.headers),
                                    timeout=cfg.export_timeout_s, compression=Compression.NoCompression)
        self.processor = BoundedBatchProcessor(
            _Watched(exporter, cfg.traces_endpoint), on_dropped, max_queue_size=cfg.max_queue_size,
            max_batch=cfg.max_export_batch_size, schedule_delay_s=cfg.schedule_delay_s)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("llm-gateway", __version__)
        self.propagator = TraceContextTextMapPropagator()

    def start(self, headers: Mapping[str, str], api: ClientApi, path: str,
              providers: Mapping[str, ProviderConfig]) -> RequestTrace:
        """The server span of one API request, child of the client's `traceparent` when it sent one. A
        request the sampler drops is not recorded at all (NO_TRACE), nor announced upstream."""
        op = api.operation
        parent = self.propagator.extract(headers)
        span = self.tracer.start_span(op, context=parent, kind=SpanKind.SERVER, attributes={
            "gen_ai.operation.name": op, "gateway.api": api.name, "http.route": path})
        if not span.is_recording():
            return NO_TRACE
        return SpanTrace(self, span, op, providers)

    def flush(self) -> bool:
        return self.processor.force_flush()

    def shutdown(self) -> None:
        self.provider.shutdown()


class SpanTrace(RequestTrace):
    """The recorder of one traced request."""

    __slots__ = ("_epoch_ns", "_last", "_op", "_open", "_parent", "_providers", "_server", "_t", "_winner")

    def __init__(self, tracing: Tracing, server: Span, op: str, providers: Mapping[str, ProviderConfig]):
        self._t, self._server, self._op, self._providers = tracing, server, op, providers
        self._parent = set_span_in_context(server)
        self._epoch_ns = time.time_ns() - time.perf_counter_ns()  # perf_counter instants -> span times
        self._winner: tuple[Span, Deployment] | None = None
        self._last: str | None = None  # the previous attempt's deployment
        self._open = 0  # attempts running now: one more starting is a hedge

    def _ns(self, perf: float) -> int:
        return self._epoch_ns + int(perf * 1e9)

    def _provider_name(self, d: Deployment) -> str:
        p = self._providers.get(d.provider)
        return p.genai_name if p is not None and p.genai_name else d.provider

    def attempt(self, d: Deployment, run: Callable[[Deployment], Awaitable[T]]) -> Awaitable[T]:
        return self._attempt(d, run)

    async def _attempt(self, d: Deployment, run: Callable[[Deployment], Awaitable[T]]) -> T:
        kind = "hedge" if self._open else "first" if self._last is None else (
            "retry" if self._last == d.label else "fallback")
        self._last = d.label
        span = self._t.tracer.start_span(f"{self._op} {d.model}", context=self._parent, kind=SpanKind.CLIENT,
                                         attributes={
            "gen_ai.operation.name": self._op, "gen_ai.request.model": d.model,
            "gen_ai.provider.name": self._provider_name(d), "gateway.deployment": d.label,
            "gateway.provider": d.provider, "gateway.attempt.kind": kind})
        carrier: dict[str, str] = {}
        self._t.propagator.inject(carrier, context=set_span_in_context(span))
        token = TRACE_HEADERS.set(tuple(carrier.items()))
        self._open += 1
        try:
            result = await run(d)
        except asyncio.CancelledError:
            _end_attempt(span, "hedge_cancelled" if self._winner is not None else "cancelled", None)
            raise
        except BaseException as exc:
            failure = getattr(exc, "failure", None)  # an UpstreamError carries the classified Failure
            _end_attempt(span, "failed", failure if isinstance(failure, Failure) else None)
            raise
        finally:
            self._open -= 1
            TRACE_HEADERS.reset(token)
        if self._winner is not None:  # a hedge's two attempts both won at once: the loser is discarded
            _end_attempt(self._winner[0], "hedge_cancelled", None)
        self._winner = (span, d)
        return result

    def committed(self, t_first: float) -> None:
        at = self._ns(t_first)
        self._server.add_event("first_token", timestamp=at)
        if self._winner is not None:
            self._winner[0].add_event("first_token", timestamp=at)
        self._server.add_event("commit")

    def stream_ended(self) -> None:
        self._server.add_event("stream_end")

    def finish(self, ctx: RequestContext | None, status: int, outcome: str) -> None:
        server = self._server
        attrs: dict[str, Any] = {"http.response.status_code": status, "gateway.outcome": outcome}
        if ctx is not None:
            server.update_name(f"{self._op} {ctx.model.name}")
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
            answered = self._answered(ctx)
            attrs.update(answered)
            if self._winner is not None:
                span, _ = self._winner
                span.set_attributes({k: v for k, v in answered.items() if k.startswith("gen_ai.")})
                span.set_attribute("gateway.attempt.outcome", "ok")
                span.end()
        if outcome in _ERROR_OUTCOMES or status >= 500:
            attrs["error.type"] = outcome
            server.set_status(StatusCode.ERROR)
        server.set_attributes(attrs)
        server.end()

    def _answered(self, ctx: RequestContext) -> dict[str, Any]:
        """What the serving deployment answered: its model, its provider, the provider's usage."""
        d, u = ctx.deployment, ctx.usage
        out: dict[str, Any] = {}
        if d is not None:
            out.update({"gen_ai.response.model": d.model, "gen_ai.provider.name": self._provider_name(d),
                        "gateway.deployment": d.label})
        if u is not None and ctx.usage_estimated:  # our estimate, not the provider's: not gen_ai.usage
            out["gateway.usage_estimated"] = True
        elif u is not None:  # the optional parts only when the provider reported them (fewer to encode)
            out.update({"gen_ai.usage.input_tokens": u.input, "gen_ai.usage.output_tokens": u.output})
            for name, value in (("gen_ai.usage.cache_read.input_tokens", u.cached_input),
                                ("gen_ai.usage.cache_creation.input_tokens", u.cache_creation_input),
                                ("gateway.usage.reasoning_tokens", u.reasoning)):
                if value:
                    out[name] = value
        return out


def _end_attempt(span: Span, outcome: str, failure: Failure | None) -> None:
    attrs: dict[str, Any] = {"gateway.attempt.outcome": outcome}
    if failure is not None:
        attrs["error.type"] = failure.kind.value
        if failure.status is not None:
            attrs["http.response.status_code"] = failure.status
    if outcome == "failed":
        span.set_status(StatusCode.ERROR)
    span.set_attributes(attrs)
    span.end()


__all__ = ["NO_TRACE", "ReadableSpan", "RequestTrace", "SpanTrace", "Tracing"]
