"""Every Prometheus object of docs/reference.md, "Metrics", declared once, and a per-request recorder.

Label values come only from config (model, provider, deployment, guardrail, rule and key names) or from
fixed enumerations (api, outcome, token type) — never from request text. Metrics are built by
`create_metrics()` at start-up, not at import, so `--workers` can switch prometheus-client to
multiprocess mode first.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, GCCollector, ProcessCollector, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge as PromGauge
from prometheus_client import Histogram as PromHistogram
from prometheus_client.multiprocess import MultiProcessCollector

from gateway import __version__
from gateway.config.types import Config, ModelConfig, Price
from gateway.core.api import ClientApi
from gateway.core.events import Usage
from gateway.core.redact.rules import expand
from gateway.observe import metrics_labels as labels
from gateway.observe.genai import GenAi, configure, create_genai
from gateway.observe.metrics_local import LocalCounter, LocalGauge, LocalHistogram, ThreadSafeCounter
from gateway.observe.metrics_mp import MP_GAUGE as _MP_GAUGE
from gateway.observe.metrics_mp import Renamed as _Renamed

TTFT_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0,
                15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0)
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
PER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0)
DELAY_BUCKETS = (0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                 0.25, 0.5, 1.0)
# `llm_gateway_overhead_seconds` (issue #62): from 0.1 ms (a streamed token's own hop) to 1 s (a gateway in
# trouble)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05,
                    0.1, 0.25, 0.5, 1.0)


@dataclass(frozen=True, slots=True)
class Metrics:
    # prometheus_client's classes with `--workers` (multiprocess files), else `metrics_local`'s: the
    # same calls (`labels`, `inc`, `dec`, `set`, `observe`)
    registry: CollectorRegistry | None
    requests: Any
    duration: Any
    ttft: Any
    upstream_ttft: Any
    tpot: Any
    tokens: Any
    usage_missing: Any
    cost: Any
    attempts: Any
    stream_failures: Any
    malformed_events: Any
    hedges: Any
    guardrail_verdicts: Any
    redactions: Any
    text_delay: Any
    inflight: Any
    rate_limited: Any
    build_info: Any
    state_degraded: Any
    http_refused: Any
    spans_dropped: Any
    learned_fallbacks: Any
    local_limit_workers: Any
    store_up: Any
    store_errors: Any
    team_requests: Any
    team_cost: Any
    continuations: Any = None  # always set by `make_metrics`; a default keeps the field order additive
    state_degraded_now: Any = None  # always set by `create_metrics`: the gauge beside the counter
    ledger_pending: Any = None  # always set by `create_metrics`
    stored_shadowed: Any = None  # always set by `create_metrics`
    affinity: Any = None  # always set by `create_metrics`
    routing_decisions: Any = None  # always set by `create_metrics`
    deployment_ttft: Any = None  # always set by `create_metrics`
    websocket_connections: Any = None  # always set by `create_metrics`
    websocket_refusals: Any = None  # always set by `create_metrics`
    # -- issue #62: the gateway's own share of TTFT, and the GenAI convention metrics (`observe.genai`) --
    overhead: Any = None  # always set by `create_metrics`
    estimated_tokens: Any = None  # always set by `create_metrics`
    genai: GenAi | None = None  # always set by `create_metrics`
    _children: dict[tuple[object, tuple[str, ...]], Any] = field(default_factory=dict)

    def child(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)`, looked up once. prometheus_client's `labels()` validates and locks
        on every call (~2 µs); a request makes about a dozen. Label values are config names or fixed
        enumerations (see the module docstring), so the cache stays small."""
        key = (metric, values)
        try:
            return self._children[key]
        except KeyError:
            labelled = self._children[key] = metric.labels(*values)
            return labelled

    # -- the process's own points (the per-request ones are `observe.record.RequestRecorder`'s) ------

    def learned(self, deployment: str, api: str, fact: str, in_force: bool) -> None:
        """A learn-once fact came into force (or expired)."""
        self.child(self.learned_fallbacks, deployment, api, fact).set(1 if in_force else 0)

    def state_degraded_op(self) -> None:
        """A state operation served locally: the shared backend was unavailable."""
        self.state_degraded.inc()

    def state_mode(self, degraded: bool) -> None:
        """The shared state backend went away (limits now counted locally) or came back."""
        self.state_degraded_now.set(1 if degraded else 0)  # no labels: prometheus_client refuses labels()

    def refused(self, reason: str) -> None:
        """The HTTP server refused or cut a client before a handler ran."""
        self.child(self.http_refused, reason).inc()

    def span_dropped(self, n: int = 1) -> None:
        self.spans_dropped.inc(n)

    def store_health(self, ok: bool) -> None:
        # a gauge without labels is set directly: prometheus_client's `labels()` refuses one (--workers)
        self.store_up.set(1 if ok else 0)

    def store_error(self, op: str) -> None:
        self.child(self.store_errors, op).inc()

    def ledger_pending_rows(self, rows: int) -> None:
        """Spend rows queued and not yet committed, after each commit or failed one (docs/reference.md)."""
        self.ledger_pending.set(rows)

    def stored_keys_shadowed(self, keys: int) -> None:
        """Stored keys this replica refuses because a config key has their name or secret (docs/reference.md)."""
        self.stored_shadowed.set(keys)

    def websocket_opened(self) -> None:
        """A WebSocket-mode connection was accepted (docs/reference.md, Metrics)."""
        self.child(self.websocket_connections).inc()

    def websocket_closed(self) -> None:
        self.child(self.websocket_connections).dec()

    def websocket_refused(self, reason: str) -> None:
        """A WebSocket upgrade refused before the `101`, `reason` one of `WEBSOCKET_REFUSED_REASONS`."""
        self.child(self.websocket_refusals, reason).inc()

    def local_limits(self, workers: int) -> None:
        """Worker processes that each enforce every limit on their own."""
        self.local_limit_workers.set(workers)


def create_metrics(registry: CollectorRegistry | None = None) -> Metrics:
    """Declare every metric. With `registry=None` and PROMETHEUS_MULTIPROC_DIR set, values go to the
    multiprocess files and the exporter aggregates them; a single process keeps them in lock-free
    series (`metrics_local`), rendered by prometheus_client the same way."""
    multiproc = "PROMETHEUS_MULTIPROC_DIR" in os.environ and registry is None
    reg = registry if registry is not None else (None if multiproc else CollectorRegistry())
    kw: dict[str, Any] = {"registry": reg, "namespace": "llm_gateway"}
    Counter, Gauge, Histogram = (  # the classes of one of the two kinds
        (PromCounter, PromGauge, PromHistogram) if multiproc else (LocalCounter, LocalGauge, LocalHistogram))
    m = Metrics(
        registry=reg,
        requests=Counter("requests", "Requests by outcome", ["api", "model", "stream", "outcome", "key"], **kw),
        duration=Histogram("request_duration_seconds", "Request duration",
                           ["api", "model", "stream", "outcome"], buckets=DURATION_BUCKETS, **kw),
        ttft=Histogram("time_to_first_token_seconds",
                       "Request received to first output token written to the client, retries included",
                       ["api", "model", "provider"], buckets=TTFT_BUCKETS, **kw),
        upstream_ttft=Histogram("upstream_time_to_first_token_seconds",
                                "Winning attempt: request sent to first output token received",
                                ["model", "provider", "deployment"], buckets=TTFT_BUCKETS, **kw),
        tpot=Histogram("time_per_output_token_seconds", "Stream time after the first token per output token",
                       ["api", "model", "provider"], buckets=PER_TOKEN_BUCKETS, **kw),
        tokens=Counter("tokens", "Provider-reported tokens", ["model", "provider", "key", "type"], **kw),
        usage_missing=Counter("usage_missing", "Responses that carried no usage", ["model", "provider"], **kw),
        cost=Counter("cost_usd", "Spend from deployment prices", ["model", "provider", "key"], **kw),
        attempts=Counter("upstream_attempts", "Upstream attempts by outcome",
                         ["model", "deployment", "outcome"], **kw),
        stream_failures=Counter("stream_failures", "Failures after the first token",
                                ["model", "deployment", "reason"], **kw),
        malformed_events=Counter("malformed_events", "Unreadable upstream events after the first token, "
                                 "skipped (the stream went on)", ["model", "deployment"], **kw),
        hedges=Counter("hedges", "Hedged requests by winner", ["model", "winner"], **kw),
        guardrail_verdicts=Counter("guardrail_verdicts", "Guardrail verdicts",
                                   ["guardrail", "stage", "verdict"], **kw),
        redactions=Counter("redactions", "Masked matches by rule", ["rule"], **kw),
        text_delay=Histogram("text_delay_seconds", "Time text spends inside the gateway",
                             ["api"], buckets=DELAY_BUCKETS, **kw),
        inflight=Gauge("inflight_requests", "Requests in flight", ["api"], multiprocess_mode="livesum", **kw),
        rate_limited=Counter("rate_limited", "Requests refused by a key limit", ["key", "limit"], **kw),
        build_info=Gauge("build_info", "Build information", ["version"], multiprocess_mode="max", **kw),
        state_degraded=Counter("state_degraded", "State operations served locally because the shared "
                               "backend was unavailable", [], **kw),
        # exported as llm_gateway_state_degraded, beside the counter's llm_gateway_state_degraded_total
        state_degraded_now=Gauge(_MP_GAUGE if multiproc else "state_degraded",
                                 "1 while rate limits and budgets are counted locally because the shared "
                                 "state backend (Redis) is away", [], multiprocess_mode="max", **kw),
        http_refused=Counter("http_refused", "Client connections or requests the API port refused or cut "
                             "before a handler ran", ["reason"], **kw),
        # the export thread counts into it too: a locked counter
        spans_dropped=(PromCounter if multiproc else ThreadSafeCounter)(
            "trace_spans_dropped", "Finished spans that never reached the collector: export queue full, or "
            "the export failed", [], **kw),
        learned_fallbacks=Gauge("learned_fallbacks", "Learn-once facts in force (1) or expired (0)",
                                ["deployment", "api", "fact"], multiprocess_mode="max", **kw),
        local_limit_workers=Gauge("local_limit_workers", "Worker processes that each enforce every rate limit "
                                  "and budget on their own (--workers > 1 with state.backend memory)", [],
                                  multiprocess_mode="max", **kw),
        # "max" over the processes: with --workers the supervisor, which serves /metrics and runs no store
        # client, holds this gauge at 0 too; "min" read 0 with every worker's store answering
        store_up=Gauge("store_up", "1 while the control plane's store (store.url) answers, 0 while it does not "
                       "(stored keys are then served from each replica's cache)", [], multiprocess_mode="max", **kw),
        store_errors=Counter("store_errors", "Failed store operations", ["op"], **kw),
        # every worker loads the same store against the same config: any one's count is the replica's
        stored_shadowed=Gauge("stored_keys_shadowed", "Stored keys refused because a config key has their name "
                              "or secret (the config key wins)", [], multiprocess_mode="max", **kw),
        ledger_pending=Gauge("ledger_pending_rows", "Spend rows queued in this process and not yet committed to "
                             "the store's ledger (bounded; committed when the store answers)", [],
                             multiprocess_mode="livesum", **kw),
        team_requests=Counter("team_requests", "Answered requests of stored keys, by team", ["team", "model"], **kw),
        team_cost=Counter("team_cost_usd", "Spend of stored keys, by team", ["team", "model"], **kw),
        affinity=Counter("affinity", "Session requests of affinity models: served by the session's own "
                         "deployment (kept), by the next of its ranking (moved), or a session's first (new)",
                         ["model", "result"], **kw),
        routing_decisions=Counter("routing_decisions", "The deployment routing chose first for a request "
                                  "(not fallbacks or hedges), by the model's policy",
                                  ["model", "deployment", "policy"], **kw),
        # each process's own average; with --workers the most recent write of any of them
        deployment_ttft=Gauge("deployment_ttft_seconds", "The learned upstream TTFT average (30 s half-life) "
                              "the latency policy routes by", ["model", "deployment", "api"],
                              multiprocess_mode="mostrecent", **kw),
        continuations=Counter("continuations", "Continuation attempts of streams that failed after the first "
                              "token (docs/continuation.md)", ["model", "deployment", "mode", "outcome"], **kw),
        websocket_connections=Gauge("websocket_connections", "Open WebSocket-mode connections (GET /v1/responses)",
                                    [], multiprocess_mode="livesum", **kw),
        websocket_refusals=Counter("websocket_refused", "WebSocket upgrades refused before the 101, by reason",
                                  ["reason"], **kw),
        overhead=Histogram("overhead_seconds", "The gateway's own share of the time to first token: TTFT minus the "
                           "upstream's time (docs/overhead.md)", ["api", "model"], buckets=OVERHEAD_BUCKETS, **kw),
        estimated_tokens=Counter("estimated_tokens", "Estimated tokens", ["model", "provider", "key", "type"], **kw),
        genai=create_genai(reg, (Counter, Histogram)),  # issue #62
    )
    m.build_info.labels(__version__).set(1)
    if reg is not None:
        add_process_collectors(reg)
    return m


# -- issue #62 --------------------------------------------------------------------------------------------
def _preinitialise_issue62(m: Metrics, config: Config, apis: tuple[ClientApi, ...]) -> None:
    """The overhead series of every API with a first token and model; the GenAI switch, operations and
    provider names (from config: `telemetry.genai_metrics`, OTEL_SEMCONV_STABILITY_OPT_IN)."""
    first_token_apis = [api for api in apis if api.ttft_series]
    for model in config.models:
        for api in first_token_apis:
            m.overhead.labels(api.name, model)
    assert m.genai is not None
    t = config.telemetry
    configure(m.genai, t.genai_metrics, t.semconv_latest_experimental,
              {api.name: api.operation for api in first_token_apis},
              {name: p.genai_name or name for name, p in config.providers.items()},
              # an API that cannot stream generates no text (embeddings): no output token usage
              [api.name for api in first_token_apis if not api.streamed])


def exposition(m: Metrics) -> tuple[bytes, str]:
    """The text a scrape of /metrics gets, and its content type. With `--workers` (no registry of our
    own) every worker's files are aggregated, with this process's collectors."""
    registry = m.registry
    if registry is None:
        registry = CollectorRegistry()
        registry.register(_Renamed(MultiProcessCollector(None)))  # type: ignore[no-untyped-call]
        add_process_collectors(registry)
    return generate_latest(registry), CONTENT_TYPE_LATEST


def worker_gone(pid: int) -> None:
    """A worker process has exited: its live gauges leave the multiprocess aggregate."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def add_process_collectors(registry: CollectorRegistry) -> None:
    """`process_*` (CPU, memory, open fds) and `python_gc_*`, as prometheus_client's default registry has
    them. With `--workers` the exporter's registry is built per scrape and these are its own process's."""
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)


def preinitialise(m: Metrics, config: Config, apis: Iterable[ClientApi]) -> None:
    """Create the known label sets at zero so dashboards show real zeros (with the target's `job` and
    `instance`), not gaps and not `or vector(0)`'s label-less phantom series; `apis`: the client APIs
    served (`apis/catalog.py`)."""
    apis = tuple(apis)
    _preinitialise_issue62(m, config, apis)
    for reason in labels.HTTP_REFUSED_REASONS:
        m.http_refused.labels(reason)
    for reason in labels.WEBSOCKET_REFUSED_REASONS:
        m.websocket_refusals.labels(reason)
    if config.store.url is not None:
        for op in labels.STORE_OPS:
            m.store_errors.labels(op)
    _preinitialise_safety(m, config)
    for api_key in config.auth.keys:
        for limit, value in (("rpm", api_key.rpm), ("tpm", api_key.tpm)):
            if value is not None:
                m.rate_limited.labels(api_key.name, limit)
    for model in config.models.values():
        providers = {d.provider for d in model.deployments}
        keys = [k.name for k in config.auth.keys if k.models is None or model.name in k.models] or ["none"]
        _preinitialise_apis(m, apis, model.name, providers, cached=model.cache or config.cache.enabled)
        for d in model.deployments:
            m.upstream_ttft.labels(model.name, d.provider, d.label)
            for outcome in ("ok", "inband_error"):
                m.attempts.labels(model.name, d.label, outcome)
            for reason in labels.STREAM_FAILURE_REASONS:
                m.stream_failures.labels(model.name, d.label, reason)
            _preinitialise_usage(m, model.name, d.provider, keys)
        for api in apis:
            for stream in api.streams:
                for key in keys:
                    m.requests.labels(api.name, model.name, stream, "ok", key)
        for winner in ("primary", "hedge"):
            m.hedges.labels(model.name, winner)
        for d in model.deployments:
            m.routing_decisions.labels(model.name, d.label, model.routing)
        _preinitialise_options(m, model)


def _preinitialise_usage(m: Metrics, model: str, provider: str, keys: list[str]) -> None:
    """A deployment's usage series: tokens by type, estimated tokens, cost, usage missing."""
    for key in keys:
        for t in labels.TOKEN_TYPES:
            m.tokens.labels(model, provider, key, t)
        for t in ("input", "output"):
            m.estimated_tokens.labels(model, provider, key, t)
        m.cost.labels(model, provider, key)
    m.usage_missing.labels(model, provider)


def _preinitialise_options(m: Metrics, model: ModelConfig) -> None:
    """The series of a model's opt-in behaviours: session affinity's results, continuation's modes."""
    for result in labels.AFFINITY_RESULTS if model.affinity == "session" else ():
        m.affinity.labels(model.name, result)
    for d in model.deployments if model.continuation else ():
        for mode in ("prefill", "regenerate"):
            m.continuations.labels(model.name, d.label, mode, "ok")


def _preinitialise_apis(m: Metrics, apis: tuple[ClientApi, ...], model: str, providers: set[str], *,
                        cached: bool) -> None:
    """Every API's own series: in flight, duration, TTFT, and for a streamed one TTFT of a cache hit (when
    the model caches), time per output token and text delay."""
    for api in apis:
        m.inflight.labels(api.name)
        for stream in api.streams:
            m.duration.labels(api.name, model, stream, "ok")
        for provider in providers if api.ttft_series else ():
            m.ttft.labels(api.name, model, provider)
        if not api.streamed:
            continue
        m.text_delay.labels(api.name)
        for provider in providers:
            m.tpot.labels(api.name, model, provider)
        if cached:
            m.ttft.labels(api.name, model, "cache")


def _preinitialise_safety(m: Metrics, config: Config) -> None:
    """Verdicts of every configured guardrail at the stages it judges, and every redaction rule in use."""
    for g in config.guardrails.values():
        for stage in ("input", "output") if g.stage == "both" else (g.stage,):
            for verdict in ("pass", "block"):
                m.guardrail_verdicts.labels(g.name, stage, verdict)
    used = {m_.redaction for m_ in config.models.values()}
    for name, profile in config.redaction_profiles.items():
        if name in used:
            for rule in [r.name for r in expand(profile.rules)] + [c.name for c in profile.custom]:
                m.redactions.labels(rule)


def usage_cost(usage: Usage, price: Price) -> float:
    """USD for one answer: uncached input, cached input and cache writes at their own prices; each cache
    price left unset is the input price (docs/caching.md, "Usage, metrics, cost, ledger"), the
    1-hour writes' too."""
    cached_price = price.cached_input if price.cached_input is not None else price.input
    creation_price = price.cache_creation_input if price.cache_creation_input is not None else price.input
    hour_price = price.cache_creation_input_1h if price.cache_creation_input_1h is not None else price.input
    uncached = max(0, usage.input - usage.cached_input - usage.cache_creation_input)
    hour = min(usage.cache_creation_input_1h, usage.cache_creation_input)
    return (uncached * price.input + usage.cached_input * cached_price
            + (usage.cache_creation_input - hour) * creation_price + hour * hour_price
            + usage.output * price.output) / 1_000_000
