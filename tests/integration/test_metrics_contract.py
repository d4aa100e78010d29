"""Every metric of CONTRACT §6 on a live /metrics scrape after representative traffic: name, type, label
set, fixed label values, and label values that come only from config."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import parse_config
from gateway.observe.metrics import TTFT_BUCKETS
from tests.chat_scripts import chunk, error_script, text_stream
from tests.contract_metrics import METRICS, TTFT_MAX_BUCKET_S, TTFT_MIN_BUCKET_S, TTFT_SLO_BOUNDS_S
from tests.fake_upstream import FakeUpstream, Pause, Script, sse
from tests.harness import GatewayServer

A, B = "/a/v1/chat/completions", "/b/v1/chat/completions"
CONFIG_VALUES = {"model": {"m", "unknown"}, "provider": {"a", "b"}, "deployment": {"a/x", "b/y"},
                 "guardrail": {"words"}, "key": {"team", "none"},
                 "api": {"chat", "responses", "embeddings", "messages", "count_tokens"},
                 "stream": {"true", "false"}}


def config(url: str) -> Any:
    return parse_config({
        "auth": {"keys": [{"name": "team", "key": "k", "rpm": 7}]},
        "providers": {"a": {"type": "openai", "base_url": f"{url}/a/v1"},
                      "b": {"type": "openai", "base_url": f"{url}/b/v1"}},
        "models": [{"name": "m", "hedge_after_ms": 100, "redaction": "p", "guardrails": ["words"],
                    "deployments": [{"provider": "a", "model": "x", "price": {"input": 1, "output": 2}},
                                    {"provider": "b", "model": "y"}],
                    "retry": {"per_deployment": 1, "initial_backoff_ms": 1}}],
        "guardrails": [{"name": "words", "type": "terms", "terms": ["forbidden words"], "stage": "both"}],
        "redaction": {"profiles": {"p": {"rules": ["secrets", "pii"]}}},
    }, env={})


def traffic(gw: GatewayServer, upstream: FakeUpstream) -> None:
    c = openai.OpenAI(base_url=gw.base_url, api_key="k", max_retries=0, timeout=20)
    hi = [{"role": "user", "content": "hi"}]

    def stream() -> None:
        try:
            list(c.chat.completions.create(model="m", messages=hi, stream=True))
        except openai.APIError:
            pass

    upstream.enqueue(A, text_stream(["mail ", "me@example.com ", "ok"]))  # ok, usage, redaction
    stream()
    upstream.enqueue(A, error_script(500, None, "x", "server_error"))  # attempt failure then fallback
    upstream.enqueue(B, text_stream(["fine"], usage="none"))  # usage missing
    stream()
    upstream.enqueue(A, Script([sse(chunk({"content": "part"})), sse({"error": {"code": "server_error"}})]))
    stream()  # stream failure after the first token
    upstream.enqueue(A, Script([Pause(1.0), *text_stream(["slow"]).parts]))
    upstream.enqueue(B, text_stream(["fast"]))
    stream()  # hedge wins
    upstream.enqueue(A, text_stream(["these are forbidden words indeed"]))
    stream()  # guardrail block
    try:
        c.chat.completions.create(model="no-such-model", messages=hi)
    except openai.NotFoundError:
        pass
    for _ in range(3):
        try:
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "forbidden words"}])
        except openai.APIStatusError:
            pass  # input guardrail blocks, then the rpm limit


def test_every_contract_metric_with_its_type_labels_and_config_values(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    traffic(gw, upstream)
    families = {f.name: f for f in text_string_to_metric_families(gw.scrape())}
    for name, spec in METRICS.items():
        base = name.removesuffix("_total") if spec.type == "counter" else name
        assert base in families, f"{name} missing"
        fam = families[base]
        assert fam.type == spec.type, name
        samples = [s for s in fam.samples if not s.name.endswith("_created")]
        assert samples, f"{name} has no samples after representative traffic"
        for s in samples:
            labels = {k: v for k, v in s.labels.items() if k != "le"}
            assert set(labels) == set(spec.labels), (name, labels)
            for label, value in labels.items():
                allowed = spec.values.get(label) or CONFIG_VALUES.get(label)
                if allowed is not None:
                    assert value in allowed, (name, label, value)
    assert "no-such-model" not in gw.scrape()


def test_ttft_buckets_reach_from_25ms_to_120s_and_hold_the_slo_bounds() -> None:
    assert TTFT_BUCKETS[0] == TTFT_MIN_BUCKET_S and TTFT_BUCKETS[-1] == TTFT_MAX_BUCKET_S
    assert set(TTFT_SLO_BOUNDS_S) <= set(TTFT_BUCKETS)
