"""Counters, gauges and histograms for a single-process gateway, without a lock per update.

prometheus_client guards every value with a `threading.Lock`: a histogram observation is two locked
increments plus argument checks, ~0.85 µs, and a request makes about a dozen updates (~6% of a
streamed request's CPU in `bench/`). The gateway updates its metrics from the event loop's thread
only, and /metrics is rendered in that same thread, so a plain attribute update is already atomic
with respect to every reader. These classes keep prometheus_client's calling surface (`labels(...)`,
`inc`, `dec`, `set`, `observe`) and register as collectors, so the exposition is rendered by
prometheus_client as before (same names, types, help and `le` labels; no `_created` series).

With `--workers` the workers write prometheus_client's multiprocess files instead (`metrics.py`).
`collect` iterates a snapshot of the series, so a reader on another thread (the tests' in-process
scrape) never sees a series added under it.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class _Value:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)


class _CounterValue(_Value):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only increase")
        self.value += amount


class _Buckets:
    """One histogram series: a count per bucket (not cumulative until rendered) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.sum += amount
        self.counts[bisect_left(self.bounds, amount)] += 1  # the first bound >= amount: `le` semantics


class _Metric(Collector):
    """A family: its series by label values, created on first use (as `labels()` does). Counters and
    gauges render each series' one value as a family of `family_type`; histograms override `collect`."""

    family_type: Any = None

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 registry: CollectorRegistry, namespace: str = "", **_: Any) -> None:
        self.name = f"{namespace}_{name}" if namespace else name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.series: dict[tuple[str, ...], Any] = {}
        if not self.labelnames:
            self._only = self._new()
            self.series[()] = self._only
        registry.register(self)

    def _new(self) -> Any:
        raise NotImplementedError

    def labels(self, *values: str) -> Any:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected {len(self.labelnames)} label values")
        key = tuple(str(v) for v in values)
        child = self.series.get(key)
        if child is None:
            child = self.series[key] = self._new()
        return child

    def collect(self) -> Iterator[Metric]:
        family = self.family_type(self.name, self.documentation, labels=self.labelnames)
        for key, child in list(self.series.items()):
            family.add_metric(list(key), child.value)
        yield family


class LocalCounter(_Metric):
    family_type = CounterMetricFamily

    def _new(self) -> _CounterValue:
        return _CounterValue()

    def points(self) -> list[tuple[tuple[str, ...], float]]:
        """Every series' label values and value, copied (for the OTLP push, `observe.genai_push`)."""
        return [(key, child.value) for key, child in list(self.series.items())]

    def inc(self, amount: float = 1.0) -> None:
        self._only.inc(amount)


class _LockedCounterValue(_CounterValue):
    __slots__ = ("_lock",)

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            _CounterValue.inc(self, amount)


class ThreadSafeCounter(LocalCounter):
    """A counter another thread updates too (the span export thread's dropped spans): increments take a
    lock, which only this metric pays."""

    def _new(self) -> _LockedCounterValue:
        return _LockedCounterValue()


class LocalGauge(_Metric):
    family_type = GaugeMetricFamily

    def _new(self) -> _Value:
        return _Value()

    def set(self, value: float) -> None:
        """A gauge without labels, as prometheus_client's `Gauge.set`."""
        self._only.set(value)


class LocalHistogram(_Metric):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 buckets: Sequence[float], **kw: Any) -> None:
        self.bounds = tuple(float(b) for b in buckets if b != float("inf"))
        self._les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, **kw)

    def _new(self) -> _Buckets:
        return _Buckets(self.bounds)

    def points(self) -> list[tuple[tuple[str, ...], list[int], float]]:
        """Every series' label values, its count per bucket (not cumulative; the last is +Inf) and sum,
        copied (for the OTLP push, `observe.genai_push`)."""
        return [(key, list(child.counts), child.sum) for key, child in list(self.series.items())]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, child in list(self.series.items()):
            cumulative, total = [], 0
            for le, n in zip(self._les, child.counts, strict=True):
                total += n
                cumulative.append((le, total))
            family.add_metric(list(key), cumulative, child.sum)
        yield family
