"""The OpenTelemetry GenAI semantic-convention metrics on /metrics (issue #62, docs/observability.md), after
traffic on every API with the official SDKs: each metric's Prometheus name (the OTel-to-Prometheus rules:
dots to `_`, unit `s` -> `_seconds`, `{token}` -> nothing), type, label set, bucket boundaries (the
conventions' advice; TTFT's extended to 120 s) and label values (from config only).

- every GenAI metric, with the conventions' shape: test_genai_metrics_after_traffic_on_every_api
- `telemetry.genai_metrics: false` leaves none: test_genai_metrics_can_be_turned_off
- the newer token counters only with OTEL_SEMCONV_STABILITY_OPT_IN: test_experimental_names_only_when_opted_in
- the same values pushed by OTLP/HTTP with OTEL_METRICS_EXPORTER=otlp, decoded by opentelemetry-proto:
  test_the_same_metrics_are_pushed_by_otlp
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests import chat_scripts as c
from tests.fake_upstream import FakeUpstream, json_script
from tests.harness import GatewayServer, LoopThread
from tests.otlp_receiver import OtlpReceiver

TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
CHAT, EMBED, RESPONSES = "/oai/v1/chat/completions", "/oai/v1/embeddings", "/oai/v1/responses"
USER = [{"role": "user", "content": "hi"}]

# The conventions (semantic-conventions-genai, docs/gen-ai/gen-ai-metrics.md), written out here on their
# own so that the gateway's table is checked against them, not against itself
COMMON = {"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_response_model"}
EXPECTED = {
    "gen_ai_server_time_to_first_token_seconds": (
        COMMON, [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0]),
    "gen_ai_server_request_duration_seconds": (
        COMMON | {"error_type"},
        [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]),
    "gen_ai_server_time_per_output_token_seconds": (
        COMMON, [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]),
    "gen_ai_client_token_usage": (
        COMMON | {"gen_ai_token_type"},
        [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]),
}
CONFIG_VALUES = {"gen_ai_operation_name": {"chat", "embeddings"}, "gen_ai_provider_name": {"openai", "anthropic"},
                 "gen_ai_request_model": {"gpt", "claude"}, "gen_ai_response_model": {"gpt-dep", "claude-dep", ""},
                 "gen_ai_token_type": {"input", "output"}, "error_type": {"", "upstream_error"}}


def _config(upstream: FakeUpstream, env: dict[str, str] | None = None, **telemetry: Any) -> Any:
    return parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {
            "claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET",
                       "timeouts": TIMEOUTS},
            "oai": {"type": "openai", "base_url": f"{upstream.base_url}/oai/v1", "api_key": "sk-oai-SECRET",
                    "timeouts": TIMEOUTS},
        },
        "models": [{"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep"}]},
                   {"name": "gpt", "deployments": [{"provider": "oai", "model": "gpt-dep"}],
                    "retry": {"per_deployment": 1}}],
        **({"telemetry": telemetry} if telemetry else {}),
    }, env=env or {})


def _traffic(gw: GatewayServer, upstream: FakeUpstream) -> None:
    """Streamed and whole answers on every API that has an operation, and one upstream failure."""
    oai = openai.OpenAI(base_url=gw.base_url, api_key="k", max_retries=0, timeout=20)
    ant = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="k", max_retries=0, timeout=20)
    upstream.enqueue(CHAT, c.text_stream(["Hello ", "there ", "you"]), c.completion("Body"))
    assert "".join(ch.choices[0].delta.content or "" for ch in oai.chat.completions.create(
        model="gpt", messages=USER, stream=True, stream_options={"include_usage": True}) if ch.choices)
    assert oai.chat.completions.create(model="gpt", messages=USER).choices[0].message.content == "Body"
    upstream.enqueue(a.PATH, a.text_stream(["Hi ", "from ", "Claude"]),
                     a.message_body([{"type": "text", "text": "Whole"}]))
    with ant.messages.stream(model="claude", max_tokens=20, messages=USER) as s:
        assert s.get_final_text() == "Hi from Claude"
    assert ant.messages.create(model="claude", max_tokens=20, messages=USER).content[0].type == "text"
    upstream.enqueue(EMBED, json_script({"object": "list", "model": "gpt-dep", "usage": {
        "prompt_tokens": 4, "total_tokens": 4}, "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}]}))
    assert oai.embeddings.create(model="gpt", input="x", encoding_format="float").data
    upstream.enqueue(CHAT, c.error_script(500, None, "boom", "server_error"))
    try:
        oai.chat.completions.create(model="gpt", messages=USER)
    except openai.APIStatusError:
        pass


def _families(gw: GatewayServer) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(gw.scrape())}


def test_genai_metrics_after_traffic_on_every_api(upstream: FakeUpstream,
                                                 make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(_config(upstream))
    _traffic(gw, upstream)
    families = _families(gw)
    for name, (labels, bounds) in EXPECTED.items():
        family = families[name]
        assert family.type == "histogram", name
        buckets = [s for s in family.samples if s.name == f"{name}_bucket"]
        assert buckets, f"{name}: no series after traffic"
        for s in family.samples:
            own = set(s.labels) - {"le"}
            assert own == labels, (name, own)  # an absent error_type is rendered as ""
            for label, value in s.labels.items():
                assert label == "le" or value in CONFIG_VALUES[label], (name, label, value)
        les = sorted({float(s.labels["le"]) for s in buckets} - {float("inf")})
        assert les == [float(b) for b in bounds], name
    def count(name: str, **labels: str) -> float:
        return sum(s.value for s in families[name].samples
                   if s.name == f"{name}_count" and labels.items() <= s.labels.items())
    duration = "gen_ai_server_request_duration_seconds"
    assert count(duration, gen_ai_operation_name="chat", gen_ai_provider_name="openai", error_type="") == 2
    assert count(duration, gen_ai_operation_name="chat", gen_ai_provider_name="anthropic",
                 gen_ai_request_model="claude", gen_ai_response_model="claude-dep") == 2
    assert count(duration, gen_ai_operation_name="embeddings") == 1
    assert count(duration, error_type="upstream_error", gen_ai_response_model="") == 1
    ttft = "gen_ai_server_time_to_first_token_seconds"  # streamed answers: their first token
    assert count(ttft, gen_ai_request_model="gpt") == 1 and count(ttft, gen_ai_request_model="claude") == 1
    usage = "gen_ai_client_token_usage"  # one observation per answer and type, every answer reported usage
    assert count(usage, gen_ai_token_type="input") == 5 and count(usage, gen_ai_token_type="output") == 4
    sums = {s.labels["gen_ai_token_type"]: s.value for s in families[usage].samples
            if s.name == f"{usage}_sum" and s.labels["gen_ai_request_model"] == "gpt"
            and s.labels["gen_ai_operation_name"] == "chat"}
    assert sums == {"input": 2 * c.USAGE["prompt_tokens"], "output": 2 * c.USAGE["completion_tokens"]}
    assert not any(n.startswith("gen_ai_client_inference") for n in families)  # not opted in


def test_genai_metrics_can_be_turned_off(upstream: FakeUpstream,
                                         make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(_config(upstream, genai_metrics=False))
    _traffic(gw, upstream)
    text = gw.scrape()
    assert "gen_ai_" not in text
    assert "llm_gateway_time_to_first_token_seconds_count" in text


def test_experimental_names_only_when_opted_in(upstream: FakeUpstream,
                                               make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(_config(upstream, {"OTEL_SEMCONV_STABILITY_OPT_IN": "http,gen_ai_latest_experimental"}))
    _traffic(gw, upstream)
    families = _families(gw)
    read = "gen_ai_client_inference_usage_cache_read_input_tokens"
    samples = {n: [s for s in families[n].samples if s.name == f"{n}_total"] for n in (
        "gen_ai_client_inference_usage_input_tokens", "gen_ai_client_inference_usage_output_tokens", read)}
    assert all(families[n].type == "counter" for n in samples)
    for series in samples.values():
        assert series and all(set(s.labels) == COMMON | {"gen_ai_token_modality"} for s in series)
    # the Anthropic answers' cache reads (a.USAGE_START), as the provider reported them
    assert sum(s.value for s in samples[read] if s.labels["gen_ai_provider_name"] == "anthropic") == (
        2 * a.USAGE_START["cache_read_input_tokens"])
    assert "gen_ai_client_token_usage" in families  # the released histogram stays


ATTRIBUTES = {"gen_ai_operation_name": "gen_ai.operation.name", "gen_ai_provider_name": "gen_ai.provider.name",
              "gen_ai_request_model": "gen_ai.request.model", "gen_ai_response_model": "gen_ai.response.model",
              "gen_ai_token_type": "gen_ai.token.type", "error_type": "error.type"}
OTEL_NAMES = {"gen_ai_server_time_to_first_token_seconds": ("gen_ai.server.time_to_first_token", "s"),
              "gen_ai_server_request_duration_seconds": ("gen_ai.server.request.duration", "s"),
              "gen_ai_server_time_per_output_token_seconds": ("gen_ai.server.time_per_output_token", "s"),
              "gen_ai_client_token_usage": ("gen_ai.client.token.usage", "{token}")}


def test_the_same_metrics_are_pushed_by_otlp(servers: LoopThread, upstream: FakeUpstream, receiver: OtlpReceiver,
                                             make_gateway: Callable[..., GatewayServer]) -> None:
    env = {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"{receiver.endpoint}/v1/metrics",
           "OTEL_METRIC_EXPORT_INTERVAL": "3600000"}  # pushed below, when the traffic is over
    gw = make_gateway(_config(upstream, env))
    _traffic(gw, upstream)
    assert gw.app is not None and gw.app.genai_push is not None
    assert servers.run(gw.app.genai_push.push())
    (pushed,) = receiver.metric_exports
    families = _families(gw)
    compared = 0
    for name, (otel, unit) in OTEL_NAMES.items():
        for s in families[name].samples:
            if s.name != f"{name}_count":
                continue
            attrs = {ATTRIBUTES[label]: v for label, v in s.labels.items() if v}  # "": no such attribute
            (point,) = [p for p in pushed if p.metric == otel and p.attributes == attrs]
            buckets = sorted((float(b.labels["le"]), b.value) for b in families[name].samples
                              if b.name == f"{name}_bucket" and {**b.labels, "le": ""} == {**s.labels, "le": ""})
            cumulative = [sum(point.bucket_counts[:i + 1]) for i in range(len(point.bucket_counts))]
            assert (point.unit, point.kind, point.cumulative) == (unit, "histogram", True)
            assert point.count == s.value and cumulative == [v for _, v in buckets]
            assert point.bounds == [float(b) for b in EXPECTED[name][1]]
            compared += 1
    assert compared == len([p for p in pushed if p.metric in {o for o, _ in OTEL_NAMES.values()}]) >= 8
