"""The lock-free single-process metrics render exactly what prometheus_client's own classes render
for the same updates (but the `_created` series), so dashboards, alerts and scrapers see no change."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.observe.metrics import DELAY_BUCKETS, TTFT_BUCKETS
from gateway.observe.metrics_local import LocalCounter, LocalGauge, LocalHistogram

_VALUES = st.one_of(st.sampled_from([0.0, *TTFT_BUCKETS, *DELAY_BUCKETS]),
                    st.floats(min_value=0, max_value=1e4, allow_nan=False))
_LABELS = st.sampled_from(["chat", "responses", "a b", 'q"uote'])


def _rendered(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_LABELS, _VALUES), max_size=30), st.lists(st.tuples(_LABELS, _VALUES), max_size=10))
def test_local_metrics_render_like_prometheus_client(observations: list[tuple[str, float]],
                                                      increments: list[tuple[str, float]]) -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    kw = {"namespace": "llm_gateway"}
    pairs = [
        (Histogram("ttft_seconds", "TTFT", ["api"], buckets=TTFT_BUCKETS, registry=theirs, **kw),
         LocalHistogram("ttft_seconds", "TTFT", ["api"], buckets=TTFT_BUCKETS, registry=ours, **kw)),
        (Counter("tokens", "Tokens", ["api"], registry=theirs, **kw),
         LocalCounter("tokens", "Tokens", ["api"], registry=ours, **kw)),
        (Gauge("inflight", "In flight", ["api"], registry=theirs, **kw),
         LocalGauge("inflight", "In flight", ["api"], registry=ours, **kw)),
    ]
    for label, value in observations:
        for metric in pairs[0]:
            metric.labels(label).observe(value)
    for label, value in increments:
        for counter, gauge in zip(pairs[1], pairs[2], strict=True):
            counter.labels(label).inc(value)
            gauge.labels(label).inc(value)
            gauge.labels(label).dec(value / 2)
    assert _rendered(ours) == _rendered(theirs)


def test_a_metric_without_labels_and_the_checks_prometheus_client_makes() -> None:
    ours = CollectorRegistry()
    degraded = LocalCounter("state_degraded", "Degraded", [], registry=ours, namespace="llm_gateway")
    degraded.inc()
    assert ours.get_sample_value("llm_gateway_state_degraded_total") == 1.0
    with pytest.raises(ValueError):
        degraded.inc(-1)
    labelled = LocalCounter("requests", "Requests", ["api", "model"], registry=ours, namespace="llm_gateway")
    with pytest.raises(ValueError):
        labelled.labels("chat")
    build = LocalGauge("build_info", "Build", ["version"], registry=ours, namespace="llm_gateway",
                       multiprocess_mode="max")
    build.labels("1.2.3").set(1)
    assert ours.get_sample_value("llm_gateway_build_info", {"version": "1.2.3"}) == 1.0
