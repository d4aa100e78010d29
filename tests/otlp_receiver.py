"""A real OTLP/HTTP trace receiver on 127.0.0.1: POST /v1/traces with a protobuf
`ExportTraceServiceRequest` (decoded by opentelemetry-proto), as a collector receives it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
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
class OtlpReceiver:
    spans: list[ReceivedSpan] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)  # every request body, to search for what must not leak
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
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
