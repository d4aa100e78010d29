"""The gateway's Prometheus metrics as CONTRACT.md §6 defines them: names, types, labels, fixed values.

This module is the one copy of that table inside the repository. The dashboard and alert tests check
every PromQL expression against it, and the gateway's own metrics tests import it to check what
`gateway.observe.metrics` declares, so a rename has to change the contract, the code and the dashboards together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

MetricType = Literal["counter", "histogram", "gauge"]

# Labels Prometheus adds at scrape time; every series has them besides the contract's own.
TARGET_LABELS: frozenset[str] = frozenset({"job", "instance"})

REQUEST_OUTCOMES = (
    "ok", "client_error", "auth_error", "rate_limited", "guardrail_blocked", "upstream_error",
    "timeout", "cancelled",
)
ATTEMPT_OUTCOMES = (
    "ok", "connect_error", "http_429", "http_5xx", "http_4xx", "inband_error", "first_token_timeout",
    "idle_timeout", "quota", "hedge_cancelled", "client_cancelled",
)
TOKEN_TYPES = ("input", "output", "cached_input", "cache_creation_input", "reasoning")

# "TTFT buckets reach from 25 ms to 120 s": the smallest and largest finite bucket bounds.
TTFT_MIN_BUCKET_S = 0.025
TTFT_MAX_BUCKET_S = 120.0
# Bucket bounds that deploy/prometheus/alerts.yaml uses as TTFT SLO thresholds. The TTFT histogram
# must have these bounds, or the SLO alerts cannot tell fast first tokens from slow ones.
TTFT_SLO_BOUNDS_S = (2.0, 10.0)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    type: MetricType
    labels: tuple[str, ...]
    # Labels whose values the contract fixes; other labels take values from config.
    values: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def series_names(self) -> tuple[str, ...]:
        """The names this metric's samples carry in a PromQL query."""
        if self.type == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)

    def labels_of(self, series: str) -> frozenset[str]:
        """Labels one of `series_names` carries, target labels included (`le` only on buckets)."""
        extra = {"le"} if series.endswith("_bucket") and self.type == "histogram" else set()
        return frozenset(self.labels) | TARGET_LABELS | extra


def _spec(name: str, kind: MetricType, labels: str, **values: tuple[str, ...]) -> MetricSpec:
    return MetricSpec(name, kind, tuple(labels.split()), MappingProxyType(dict(values)))


METRICS: Mapping[str, MetricSpec] = MappingProxyType({m.name: m for m in (
    _spec("llm_gateway_requests_total", "counter", "api model stream outcome key", outcome=REQUEST_OUTCOMES),
    _spec("llm_gateway_request_duration_seconds", "histogram", "api model stream outcome",
          outcome=REQUEST_OUTCOMES),
    _spec("llm_gateway_time_to_first_token_seconds", "histogram", "api model provider"),
    _spec("llm_gateway_upstream_time_to_first_token_seconds", "histogram", "model provider deployment"),
    _spec("llm_gateway_time_per_output_token_seconds", "histogram", "api model provider"),
    _spec("llm_gateway_tokens_total", "counter", "model provider key type", type=TOKEN_TYPES),
    _spec("llm_gateway_usage_missing_total", "counter", "model provider"),
    _spec("llm_gateway_cost_usd_total", "counter", "model provider key"),
    _spec("llm_gateway_upstream_attempts_total", "counter", "model deployment outcome",
          outcome=ATTEMPT_OUTCOMES),
    _spec("llm_gateway_stream_failures_total", "counter", "model deployment reason"),
    _spec("llm_gateway_hedges_total", "counter", "model winner", winner=("primary", "hedge")),
    _spec("llm_gateway_guardrail_verdicts_total", "counter", "guardrail stage verdict",
          verdict=("pass", "block")),
    _spec("llm_gateway_redactions_total", "counter", "rule"),
    _spec("llm_gateway_text_delay_seconds", "histogram", "api"),
    _spec("llm_gateway_inflight_requests", "gauge", "api"),
    _spec("llm_gateway_rate_limited_total", "counter", "key limit", limit=("rpm", "tpm")),
    _spec("llm_gateway_build_info", "gauge", "version"),
)})

# The control plane's (CONTRACT §11), present only with `store.url`: dashboards may use them too.
CONTROL_PLANE_METRICS: Mapping[str, MetricSpec] = MappingProxyType({m.name: m for m in (
    _spec("llm_gateway_store_up", "gauge", ""),
    _spec("llm_gateway_store_errors_total", "counter", "op", op=("refresh", "ledger", "admin")),
    _spec("llm_gateway_stored_keys_shadowed", "gauge", ""),
    _spec("llm_gateway_team_requests_total", "counter", "team model"),
    _spec("llm_gateway_team_cost_usd_total", "counter", "team model"),
)})

# Mid-stream continuation's (CONTRACT §4.9), present only for a model with `continuation: on`.
CONTINUATION_METRICS: Mapping[str, MetricSpec] = MappingProxyType({m.name: m for m in (
    _spec("llm_gateway_continuations_total", "counter", "model deployment mode outcome",
          mode=("prefill", "regenerate"), outcome=("ok", "diverged", "failed")),
)})

# Routing's (docs/routing.md): decisions present at 0 from start; the learned TTFT only once learned, and
# only for models routed by `latency` or `cost`.
ROUTING_METRICS: Mapping[str, MetricSpec] = MappingProxyType({m.name: m for m in (
    _spec("llm_gateway_routing_decisions_total", "counter", "model deployment policy",
          policy=("ordered", "balanced", "weighted", "latency", "cost")),
    _spec("llm_gateway_deployment_ttft_seconds", "gauge", "model deployment api"),
)})
# Issue #62's operations dashboard: the gateway's own share of TTFT and session affinity (declared here),
# and the gauges of the store's ledger, Redis-degraded state and WebSocket connections (CONTRACT §6, added
# by other branches: `OTHER_BRANCHES` lists them for the live Prometheus test until they are merged).
OPERATIONS_METRICS: Mapping[str, MetricSpec] = MappingProxyType({m.name: m for m in (
    _spec("llm_gateway_overhead_seconds", "histogram", "api model"),
    _spec("llm_gateway_affinity_total", "counter", "model result", result=("kept", "moved", "new")),
    _spec("llm_gateway_ledger_pending_rows", "gauge", ""),
    _spec("llm_gateway_state_degraded", "gauge", ""),
    _spec("llm_gateway_websocket_connections", "gauge", ""),
)})
OTHER_BRANCHES: frozenset[str] = frozenset()

# Every name a PromQL query may use for a contract metric, mapped to its spec.
SERIES: Mapping[str, MetricSpec] = MappingProxyType(
    {series: spec for spec in (*METRICS.values(), *CONTROL_PLANE_METRICS.values(), *CONTINUATION_METRICS.values(),
                               *ROUTING_METRICS.values(), *OPERATIONS_METRICS.values())
     for series in spec.series_names}
)
