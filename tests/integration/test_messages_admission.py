"""The Messages API and the gateway's admission and extras: `count_tokens` (passed through to Anthropic,
else an estimate marked as one), the response cache, rate limits and budgets, in Anthropic's shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.chat_scripts import completion
from tests.fake_upstream import FakeUpstream, json_script
from tests.harness import GatewayServer

KEY = "gw-key-admission-0001"
COUNT_PATH = "/v1/messages/count_tokens"
OPENAI_PATH = "/v1/chat/completions"
USER = [{"role": "user", "content": "Count me"}]
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(parse_config({
        "auth": {"keys": [{"name": "team", "key": KEY}, {"name": "slow", "key": "gw-key-rpm-1", "rpm": 1}]},
        "providers": {
            "claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET",
                       "timeouts": TIMEOUTS},
            "oai": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": "sk-oai-SECRET",
                    "timeouts": TIMEOUTS},
        },
        "models": [
            {"name": "claude", "cache": True, "deployments": [{"provider": "claude", "model": "claude-dep"}]},
            {"name": "gpt", "deployments": [{"provider": "oai", "model": "gpt-dep"}]},
        ],
    }, env={}))


def client(gw: GatewayServer, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key=key, max_retries=0, timeout=20)


def test_count_tokens_passes_through_to_anthropic(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(COUNT_PATH, json_script({"input_tokens": 1234}))
    raw = client(gw).messages.with_raw_response.count_tokens(
        model="claude", messages=USER, system="s", extra_headers={"anthropic-beta": "token-counting-2024-11-01"})
    assert raw.parse().input_tokens == 1234 and "x-gateway-token-count" not in raw.headers
    got = upstream.received[0]
    assert got.path == COUNT_PATH and got.body == {"model": "claude-dep", "messages": USER, "system": "s"}
    assert got.headers["x-api-key"] == "sk-ant-SECRET" and got.headers["anthropic-beta"] == "token-counting-2024-11-01"


def test_count_tokens_without_an_anthropic_deployment_is_an_estimate_marked_as_one(gw: GatewayServer) -> None:
    raw = client(gw).messages.with_raw_response.count_tokens(model="gpt", messages=USER)
    counted: Any = raw.parse()
    assert raw.headers["x-gateway-token-count"] == "estimate"
    assert counted.input_tokens > 0 and counted.model_extra == {"estimate": True}


def test_count_tokens_errors_are_anthropic_shaped(upstream: FakeUpstream, gw: GatewayServer) -> None:
    with pytest.raises(anthropic.AuthenticationError):
        client(gw, "nope").messages.count_tokens(model="claude", messages=USER)
    with pytest.raises(anthropic.NotFoundError) as info:
        client(gw).messages.count_tokens(model="missing", messages=USER)
    assert info.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    upstream.enqueue(COUNT_PATH, a.error_body(400, "invalid_request_error", "messages: empty"))
    with pytest.raises(anthropic.BadRequestError) as bad:
        client(gw).messages.count_tokens(model="claude", messages=[])
    assert "messages: empty" in bad.value.message


def test_the_response_cache_serves_a_stream_and_a_body_from_one_answer(upstream: FakeUpstream,
                                                                       gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream([a.message_start(), *a.text_block(0, ["Cached ", "answer."]),
                                       *a.tool_block(1, "toolu_1", "f", ['{"k": 1}']),
                                       a.message_delta("tool_use"), a.message_stop()]))
    c = client(gw)
    with c.messages.stream(model="claude", max_tokens=20, messages=USER) as s:
        first = s.get_final_message()
    with c.messages.with_streaming_response.create(model="claude", max_tokens=20, messages=USER,
                                                   stream=True) as raw:
        assert raw.headers["x-gateway-cache"] == "hit"
    with c.messages.stream(model="claude", max_tokens=20, messages=USER) as s:
        again = s.get_final_message()
    assert again.model_dump() == first.model_dump()
    assert len(upstream.received) == 1
    assert gw.sample("llm_gateway_requests_total", api="messages", model="claude", stream="true", outcome="ok") == 3


def test_rate_limit_is_429_rate_limit_error(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.defaults[OPENAI_PATH] = completion("ok")
    c = client(gw, "gw-key-rpm-1")
    c.messages.create(model="gpt", max_tokens=5, messages=USER)
    with pytest.raises(anthropic.RateLimitError) as info:
        c.messages.create(model="gpt", max_tokens=5, messages=USER)
    assert info.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert info.value.response.headers["retry-after"]


def test_a_used_up_budget_is_429_rate_limit_error(upstream: FakeUpstream,
                                                  make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(parse_config({
        "auth": {"keys": [{"name": "tight", "key": KEY, "budget_usd": 0.00001, "budget_period": "day"}]},
        "providers": {"claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET",
                                 "timeouts": TIMEOUTS}},
        "models": [{"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep",
                                                       "price": {"input": 1.0, "output": 1.0}}]}],
    }, env={}))
    upstream.defaults[a.PATH] = a.message_body([{"type": "text", "text": "costly"}])
    c = client(gw)
    c.messages.create(model="claude", max_tokens=5, messages=USER)  # 42 tokens at $1/M: over the budget
    assert gw.sample("llm_gateway_cost_usd_total", model="claude", provider="claude") > 0.00001
    with pytest.raises(anthropic.RateLimitError) as info:
        c.messages.create(model="claude", max_tokens=5, messages=USER)
    assert info.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert len(upstream.received) == 1
