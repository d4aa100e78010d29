"""The GenAI metrics pushed by OTLP/HTTP (https://opentelemetry.io/docs/specs/otlp/#otlphttp), beside
/metrics, when OTEL_METRICS_EXPORTER=otlp (docs/observability.md): every OTEL_METRIC_EXPORT_INTERVAL, the
same values under the conventions' dotted names, units and attributes, cumulative from the process's
start, as one ExportMetricsServiceRequest (opentelemetry-proto's metrics.proto, written directly as
`observe.otlp` writes spans). The values are copied on the event loop, which is the only writer; the
POST runs on a thread, with the span exporter's retries and timeout. With `--workers` nothing is pushed
(each worker's values are in the multiprocess files, which only the /metrics exporter aggregates).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import Iterable
from typing import Any

from gateway import __version__
from gateway.config.types import TelemetryConfig
from gateway.observe.genai import GenAi, Instrument, instruments
from gateway.observe.metrics import Metrics
from gateway.observe.otlp import key_values, resource_scope
from gateway.observe.span_export import OtlpHttpExporter

_CUMULATIVE = b"\x10\x02"  # aggregation_temporality = 2: AGGREGATION_TEMPORALITY_CUMULATIVE


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(tag: int, payload: bytes) -> bytes:
    """A length-delimited field whose key byte is `tag`."""
    return bytes((tag,)) + _varint(len(payload)) + payload


def _attributes(i: Instrument, values: tuple[str, ...], tag: int) -> bytes:
    """The point's attributes under their OTel names; an empty value (no error, no serving deployment)
    is an absent attribute, as on /metrics."""
    return key_values(tag, {otel: v for (otel, _), v in zip(i.attributes, values, strict=True) if v})


def _histogram(i: Instrument, points: list[tuple[tuple[str, ...], list[int], float]], times: bytes) -> bytes:
    dps = []
    bounds = struct.pack(f"<{len(i.buckets)}d", *i.buckets)
    for values, counts, total in points:
        dp = (times + b"\x21" + struct.pack("<Q", sum(counts)) + b"\x29" + struct.pack("<d", total)
              + _ld(0x32, struct.pack(f"<{len(counts)}Q", *counts)) + _ld(0x3A, bounds)
              + _attributes(i, values, 0x4A))
        dps.append(_ld(0x0A, dp))
    return _ld(0x4A, b"".join(dps) + _CUMULATIVE)  # Metric.histogram = 9


def _sum(i: Instrument, points: list[tuple[tuple[str, ...], float]], times: bytes) -> bytes:
    dps = [_ld(0x0A, times + b"\x21" + struct.pack("<d", value) + _attributes(i, values, 0x3A))
           for values, value in points]
    return _ld(0x3A, b"".join(dps) + _CUMULATIVE + b"\x18\x01")  # Metric.sum = 7, is_monotonic


def encode_metrics(head: tuple[bytes, bytes], families: Iterable[tuple[Instrument, Any]], start_ns: int,
                   now_ns: int) -> bytes:
    """An ExportMetricsServiceRequest of one resource and scope holding every family with a series."""
    resource, scope = head
    times = b"\x11" + struct.pack("<Q", start_ns) + b"\x19" + struct.pack("<Q", now_ns)
    metrics = [scope]
    for i, family in families:
        points = family.points()
        if not points:
            continue
        data = _histogram(i, points, times) if i.kind == "histogram" else _sum(i, points, times)
        metric = _ld(0x0A, i.name.encode()) + _ld(0x12, i.description.encode()) + _ld(0x1A, i.unit.encode())
        metrics.append(_ld(0x12, metric + data))
    scope_metrics = b"".join(metrics)
    return _ld(0x0A, resource + _ld(0x12, scope_metrics))


class GenAiPush:
    """The periodic push of one process's GenAI metrics; `start` on the running loop, `close` at the end
    (one last push, so a short-lived process reports too)."""

    def __init__(self, g: GenAi, cfg: TelemetryConfig) -> None:
        assert cfg.metrics_endpoint is not None
        resource = {**cfg.resource_attributes, "service.name": cfg.service_name, "service.version": __version__}
        self._g, self._interval = g, cfg.metric_export_interval_s
        self._head = resource_scope(resource, "llm-gateway", __version__)
        self._exporter = OtlpHttpExporter(cfg.metrics_endpoint, cfg.metrics_headers, cfg.export_timeout_s,
                                          self._head)
        self._start_ns = time.time_ns()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.push()

    async def push(self) -> bool:
        """Copy the values here (the loop's thread), send them from a thread; whether they were taken."""
        if not self._g.enabled:
            return True
        body = encode_metrics(self._head, instruments(self._g), self._start_ns, time.time_ns())
        return await asyncio.to_thread(self._exporter.send, body, "metric_export")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.push()
        self._exporter.close()


def start_push(cfg: TelemetryConfig, metrics: Metrics) -> GenAiPush | None:
    """The push, started on the running loop (docs/observability.md); none with `--workers`, whose values
    only the /metrics exporter aggregates."""
    g = metrics.genai
    if g is None or g.switch is None:
        return None
    push = GenAiPush(g, cfg)
    push.start()
    return push
