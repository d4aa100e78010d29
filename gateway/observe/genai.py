"""The OpenTelemetry GenAI semantic-convention metrics, beside the gateway's own (docs/reference.md,
Metrics; docs/observability.md). Declared here, apart from `metrics.py`, and written from the same
per-request record points (`observe.record`): a request's GenAI series are labelled children looked up
once from the same cache (`Metrics.child`), never a dict built per request.

Names, units, attributes and bucket boundaries are those of the conventions' metrics page
(https://github.com/open-telemetry/semantic-conventions-genai, its GenAI metrics page): the
gateway is the model server its clients talk to, so it reports the `gen_ai.server.*` latencies and the
token usage histogram. On /metrics they take the names the OTel-to-Prometheus compatibility rules give
(https://opentelemetry.io/docs/specs/otel/compatibility/prometheus_and_openmetrics/): dots and other
invalid characters become `_`, unit `s` adds `_seconds`, an annotation unit (`{token}`) adds nothing,
a counter ends in `_total`; attribute keys become label names the same way (`gen_ai.request.model` ->
`gen_ai_request_model`). `observe.genai_push` sends the same values by OTLP under the dotted names.

Attribute values come from config only: the configured model (`gen_ai.request.model`), the deployment's
upstream model (`gen_ai.response.model`), the provider type's well-known name (`gen_ai.provider.name`),
the API's operation and the request's `outcome` (`error.type`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from gateway.config.types import Deployment
from gateway.core.events import Usage

if TYPE_CHECKING:
    from gateway.observe.context import RequestContext

# the conventions' advised boundaries; TTFT's are extended past 10 s to 120 s (a coding agent's cold
# prefill takes 30-75 s: every such first token would otherwise land in +Inf)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)

# (OTel attribute, Prometheus label) of every GenAI series, in label order
COMMON = (("gen_ai.operation.name", "gen_ai_operation_name"), ("gen_ai.provider.name", "gen_ai_provider_name"),
          ("gen_ai.request.model", "gen_ai_request_model"), ("gen_ai.response.model", "gen_ai_response_model"))
TOKEN_TYPE = ("gen_ai.token.type", "gen_ai_token_type")
ERROR_TYPE = ("error.type", "error_type")
MODALITY = ("gen_ai.token.modality", "gen_ai_token_modality")


@dataclass(frozen=True, slots=True)
class Instrument:
    """One GenAI instrument as the conventions define it, and its Prometheus family's name."""

    name: str  # the OTel name (OTLP)
    prometheus: str  # its exposition name, without `_total` (prometheus_client adds it to counters)
    unit: str  # UCUM, as the conventions give it
    kind: str  # histogram | counter
    description: str
    attributes: tuple[tuple[str, str], ...]
    buckets: tuple[float, ...] = ()


TTFT = Instrument("gen_ai.server.time_to_first_token", "gen_ai_server_time_to_first_token_seconds", "s",
                  "histogram", "Time to generate first token for successful responses.", COMMON, TTFT_BUCKETS)
REQUEST_DURATION = Instrument(
    "gen_ai.server.request.duration", "gen_ai_server_request_duration_seconds", "s", "histogram",
    "Generative AI server request duration such as time-to-last byte or last output token.",
    (*COMMON, ERROR_TYPE), DURATION_BUCKETS)
TPOT = Instrument("gen_ai.server.time_per_output_token", "gen_ai_server_time_per_output_token_seconds", "s",
                  "histogram", "Time per output token generated after the first token for successful responses.",
                  COMMON, TPOT_BUCKETS)
TOKEN_USAGE = Instrument("gen_ai.client.token.usage", "gen_ai_client_token_usage", "{token}", "histogram",
                         "Number of input and output tokens used.", (*COMMON, TOKEN_TYPE),
                         tuple(float(b) for b in TOKEN_BUCKETS))
RELEASED = (TTFT, REQUEST_DURATION, TPOT, TOKEN_USAGE)

# The conventions' newer token counters (model/gen-ai/token-metrics.yaml), which are to replace the token
# usage histogram: only with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental, as the conventions
# ask of instrumentations that already emit an older version. (Usage field, instrument.)
_COUNTER_ATTRS = (*COMMON, MODALITY)
EXPERIMENTAL = tuple(
    (field, Instrument(name, name.replace(".", "_"), "{token}", "counter", brief, _COUNTER_ATTRS))
    for field, name, brief in (
        ("input", "gen_ai.client.inference.usage.input_tokens",
         "The number of input (prompt) tokens used, including cached tokens."),
        ("output", "gen_ai.client.inference.usage.output_tokens",
         "The number of output (completion) tokens used, including reasoning tokens."),
        ("cached_input", "gen_ai.client.inference.usage.cache_read.input_tokens",
         "The number of input tokens served from a provider-managed cache."),
        ("cache_creation_input", "gen_ai.client.inference.usage.cache_write.input_tokens",
         "The number of input tokens written to a provider-managed cache."),
        ("reasoning", "gen_ai.client.inference.usage.reasoning.output_tokens",
         "The number of output tokens used for reasoning."),
    ))


class Switched(Collector):
    """The GenAI families on /metrics while `telemetry.genai_metrics` is on (a reload may turn it off):
    the families themselves live in a registry of their own."""

    def __init__(self, families: Iterable[Any]) -> None:
        self.families = tuple(families)
        self.on = True

    def collect(self) -> Iterator[Metric]:
        if self.on:
            for family in self.families:
                yield from family.collect()


@dataclass(slots=True)
class GenAi:
    """The GenAI instruments of one process, and what a request's labels are looked up from: the
    operation of each API that has one (not token counting), the well-known name of each provider."""

    ttft: Any
    duration: Any
    tpot: Any
    tokens: Any
    experimental: tuple[tuple[str, Any], ...]  # (usage field, counter); filled only when opted in
    switch: Switched | None  # None with `--workers` (multiprocess files: nothing recorded, nothing shown)
    operations: Mapping[str, str]
    providers: Mapping[str, str]
    enabled: bool = True
    no_output: frozenset[str] = frozenset()  # APIs whose answers generate no output tokens (embeddings)


def create_genai(registry: CollectorRegistry | None, classes: tuple[Any, Any]) -> GenAi:
    """The instruments, as `classes` (counter, histogram) of the kind `metrics.create_metrics` uses. With
    a registry of our own they are collected through a `Switched`; without (multiprocess), directly."""
    Counter, Histogram = classes
    own = CollectorRegistry() if registry is not None else None

    def histogram(i: Instrument) -> Any:
        return Histogram(i.prometheus, i.description, [label for _, label in i.attributes], buckets=i.buckets,
                         registry=own)

    experimental = tuple((f, Counter(i.prometheus, i.description, [label for _, label in i.attributes],
                                     registry=own)) for f, i in EXPERIMENTAL)
    g = GenAi(histogram(TTFT), histogram(REQUEST_DURATION), histogram(TPOT), histogram(TOKEN_USAGE),
              experimental, None, {}, {})
    if registry is not None:
        g.switch = Switched([g.ttft, g.duration, g.tpot, g.tokens])
        g.switch.families += tuple(c for _, c in experimental)
        registry.register(g.switch)
    return g


def instruments(g: GenAi) -> list[tuple[Instrument, Any]]:
    """Each instrument with its family, the opted-in counters included."""
    experimental = dict(EXPERIMENTAL)
    return [*zip(RELEASED, (g.ttft, g.duration, g.tpot, g.tokens), strict=True),
            *((experimental[f], counter) for f, counter in g.experimental)]


def configure(g: GenAi, enabled: bool, latest_experimental: bool, operations: Mapping[str, str],
              providers: Mapping[str, str], no_output: Iterable[str]) -> None:
    """At start and on every reload: on or off, which APIs and providers there are."""
    g.enabled, g.operations, g.providers = enabled, dict(operations), dict(providers)
    g.no_output = frozenset(no_output)
    if not latest_experimental:
        g.experimental = ()
    if g.switch is not None:
        g.switch.on = enabled
        if not latest_experimental:
            g.switch.families = (g.ttft, g.duration, g.tpot, g.tokens)


def record(g: GenAi, child: Any, api: str, ctx: RequestContext, duration: float, tpot: float | None,
           error_type: str, answer: tuple[Deployment, Usage | None] | None = None) -> None:
    """A request's GenAI values, at its end (`RequestRecorder.finished`): its duration; for a success, its
    TTFT, time per output token and the usage its answer's upstream reported (`answer`: the deployment
    that answered and that usage; a continued stream's is its last attempt's), never the charges of
    attempts that did not answer, nor an estimate (the provider reported none: the conventions forbid
    guessing). A cache hit (no provider answered) is not recorded. `child` is `Metrics.child`: the
    labelled children come from its cache."""
    op = g.operations.get(api)
    d = ctx.deployment or ctx.failed_deployment
    if op is None or ctx.cache_hit or (d is None and not ctx.model.deployments):
        return
    if d is None:
        d = ctx.model.deployments[0]
    provider = g.providers.get(d.provider, d.provider)
    model = ctx.model.name
    served = d.model if ctx.deployment is not None else ""
    child(g.duration, op, provider, model, served, error_type).observe(duration)
    if error_type:
        return
    if ctx.ttft_s is not None:
        child(g.ttft, op, provider, model, served).observe(ctx.ttft_s)
    if tpot is not None:
        child(g.tpot, op, provider, model, served).observe(tpot)
    answering, usage = answer if answer is not None else (d, None)
    if usage is None:
        return
    if answering.label != d.label:  # a continued stream: its last attempt answered the rest
        provider, served = g.providers.get(answering.provider, answering.provider), answering.model
    child(g.tokens, op, provider, model, served, "input").observe(usage.input)
    if api not in g.no_output:  # an embedding has no output: not a zero-token answer
        child(g.tokens, op, provider, model, served, "output").observe(usage.output)
    for field, counter in g.experimental:
        n = getattr(usage, field)
        if n:
            child(counter, op, provider, model, served, "text").inc(n)
