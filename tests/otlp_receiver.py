"""A real OTLP/HTTP receiver on 127.0.0.1: POST /v1/traces with a protobuf `ExportTraceServiceRequest`,
POST /v1/metrics with an `ExportMetricsServiceRequest` (decoded by opentelemetry-proto), as a collector
receives them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from tests.loopback_app import serve_on_loopback


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@dataclass
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str  # SERVER, CLIENT, ...
    attributes: dict[str, Any]
    events: list[str]
    status_code: int
    service_name: str


@dataclass
class ReceivedPoint:
    """One data point of a pushed metric: a histogram's (bucket counts, bounds, sum) or a sum's value."""

    metric: str
    unit: str
    kind: str  # histogram | sum
    cumulative: bool
    attributes: dict[str, Any]
    count: int = 0
    sum: float = 0.0
    bucket_counts: list[int] = field(default_factory=list)
    bounds: list[float] = field(default_factory=list)
    value: float = 0.0
    monotonic: bool = False


@dataclass
class OtlpReceiver:
    spans: list[ReceivedSpan] = field(default_factory=list)
    metric_exports: list[list[ReceivedPoint]] = field(default_factory=list)  # one list per export request
    raw: list[bytes] = field(default_factory=list)  # every request body, to search for what must not leak
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/metrics", self._metrics)
        self._runner, self.port = await serve_on_loopback(app, port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.raw.append(body)
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            service = next((_value(a.value) for a in rs.resource.attributes if a.key == "service.name"), "")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(ReceivedSpan(
                        s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name,
                        PbSpan.SpanKind.Name(s.kind).removeprefix("SPAN_KIND_"),
                        {a.key: _value(a.value) for a in s.attributes}, [e.name for e in s.events],
                        s.status.code, service))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.raw.append(body)
        points = []
        for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    points += _points(m)
        self.metric_exports.append(points)
        return web.Response(body=ExportMetricsServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")


def _points(m: Any) -> list[ReceivedPoint]:
    kind = m.WhichOneof("data")
    cumulative = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    if kind == "histogram":
        return [ReceivedPoint(m.name, m.unit, kind, m.histogram.aggregation_temporality == cumulative,
                              {a.key: _value(a.value) for a in p.attributes}, p.count, p.sum,
                              list(p.bucket_counts), list(p.explicit_bounds)) for p in m.histogram.data_points]
    assert kind == "sum", kind
    return [ReceivedPoint(m.name, m.unit, kind, m.sum.aggregation_temporality == cumulative,
                          {a.key: _value(a.value) for a in p.attributes}, value=p.as_double,
                          monotonic=m.sum.is_monotonic) for p in m.sum.data_points]
