"""Every client API takes the same path through the gateway (issue #29: the copies had drifted), with the
official SDKs over loopback sockets against a scripted upstream.

- a streamed `/v1/messages` cache hit records its TTFT under `provider="cache"`, as chat's does (CONTRACT
  §4.8): test_a_streamed_messages_cache_hit_records_ttft_as_provider_cache
- a self-contained Responses request (no `previous_response_id`, `store: false`) is cached like the others,
  streamed or not: test_a_self_contained_responses_request_is_cached_streamed_and_not
- a Responses request that is not self-contained is never cached:
  test_a_responses_request_that_is_not_self_contained_is_never_cached
- every API's series exist at zero before the first request:
  test_every_apis_series_are_preinitialised_at_zero
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer
from tests.responses_scripts import Answer, body_script, stream_script

TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
USER = [{"role": "user", "content": "Cache me"}]
RESPONSES = "/oai/v1/responses"


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {
            "claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET",
                       "timeouts": TIMEOUTS},
            "oai": {"type": "openai", "base_url": f"{upstream.base_url}/oai/v1", "api_key": "sk-oai-SECRET",
                    "timeouts": TIMEOUTS},
        },
        "models": [
            {"name": "claude", "cache": True, "deployments": [{"provider": "claude", "model": "claude-dep"}]},
            {"name": "gpt", "cache": True, "deployments": [{"provider": "oai", "model": "gpt-dep"}]},
        ],
    }, env={}))


def test_a_streamed_messages_cache_hit_records_ttft_as_provider_cache(upstream: FakeUpstream,
                                                                      gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream([a.message_start(), *a.text_block(0, ["Cached ", "answer."]),
                                       a.message_delta("end_turn"), a.message_stop()]))
    c = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="k", max_retries=0, timeout=20)
    texts = []
    for _ in range(2):
        with c.messages.stream(model="claude", max_tokens=20, messages=USER) as s:
            texts.append(s.get_final_text())
    assert texts == ["Cached answer.", "Cached answer."] and len(upstream.received) == 1
    ttft = "llm_gateway_time_to_first_token_seconds_count"
    assert gw.sample(ttft, api="messages", model="claude", provider="claude") == 1
    assert gw.sample(ttft, api="messages", model="claude", provider="cache") == 1


def _client(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="k", max_retries=0, timeout=20)


def test_a_self_contained_responses_request_is_cached_streamed_and_not(upstream: FakeUpstream,
                                                                      gw: GatewayServer) -> None:
    answer = Answer().message(["Cached ", "once."])
    upstream.enqueue(RESPONSES, stream_script(answer.stream_events()))
    c = _client(gw)
    with c.responses.stream(model="gpt", input="hi", store=False) as s:
        first = s.get_final_response()
    with c.responses.with_streaming_response.create(model="gpt", input="hi", store=False, stream=True) as raw:
        assert raw.headers["x-gateway-cache"] == "hit"
        events = list(raw.parse())
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Cached once."
    assert events[-1].type == "response.completed"
    assert events[-1].response.model_dump(exclude_none=True) == first.model_dump(exclude_none=True)
    body = c.responses.with_raw_response.create(model="gpt", input="hi", store=False)
    assert body.headers["x-gateway-cache"] == "hit" and body.parse().output_text == "Cached once."
    assert len(upstream.received) == 1
    ttft = "llm_gateway_time_to_first_token_seconds_count"
    assert gw.sample(ttft, api="responses", model="gpt", provider="cache") == 1

    upstream.enqueue(RESPONSES, body_script(Answer().message(["A body."])))
    assert c.responses.create(model="gpt", input="other", store=False).output_text == "A body."
    again = c.responses.with_raw_response.create(model="gpt", input="other", store=False)
    assert again.headers["x-gateway-cache"] == "hit" and again.parse().output_text == "A body."
    assert len(upstream.received) == 2


@pytest.mark.parametrize("extra", [{}, {"store": True}, {"store": False, "previous_response_id": "resp_1"}],
                         ids=["store-default", "store-true", "previous-response"])
def test_a_responses_request_that_is_not_self_contained_is_never_cached(
        upstream: FakeUpstream, gw: GatewayServer, extra: dict[str, Any]) -> None:
    c = _client(gw)
    if "previous_response_id" in extra:  # an id the gateway relayed (docs/responses-bridge.md, ownership)
        upstream.enqueue(RESPONSES, body_script(Answer("resp_1").message(["zero"])))
        assert c.responses.create(model="gpt", input="zero").id == "resp_1"
        upstream.received.clear()
    upstream.enqueue(RESPONSES, body_script(Answer().message(["one"])), body_script(Answer().message(["two"])))
    got = [c.responses.with_raw_response.create(model="gpt", input="hi", **extra) for _ in range(2)]
    assert [r.parse().output_text for r in got] == ["one", "two"]
    assert all("x-gateway-cache" not in r.headers for r in got) and len(upstream.received) == 2


STREAMED = ("chat", "responses", "messages")


def test_every_apis_series_are_preinitialised_at_zero(gw: GatewayServer) -> None:
    for api in STREAMED:
        assert _has(gw, "llm_gateway_time_to_first_token_seconds_count", api=api, model="gpt", provider="oai")
        for name, labels in (("llm_gateway_time_per_output_token_seconds_count", {"provider": "oai"}),
                             ("llm_gateway_request_duration_seconds_count", {"stream": "true", "outcome": "ok"}),
                             ("llm_gateway_requests_total", {"stream": "true", "outcome": "ok"})):
            assert _has(gw, name, api=api, model="gpt", **labels), (name, api)
        assert _has(gw, "llm_gateway_text_delay_seconds_count", api=api), api
        assert _has(gw, "llm_gateway_time_to_first_token_seconds_count", api=api, model="gpt", provider="cache")
    for api in ("chat", "responses", "messages", "embeddings", "count_tokens"):
        assert _has(gw, "llm_gateway_request_duration_seconds_count", api=api, model="claude", stream="false",
                    outcome="ok"), api
        assert _has(gw, "llm_gateway_inflight_requests", api=api), api


def _has(gw: GatewayServer, name: str, **labels: str) -> bool:
    """A series with these labels exists, at zero (nothing has been asked yet)."""
    assert gw.metrics.registry is not None
    values = [s.value for fam in gw.metrics.registry.collect() for s in fam.samples
              if s.name == name and labels.items() <= s.labels.items()]
    return bool(values) and all(v == 0 for v in values)
