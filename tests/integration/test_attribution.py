"""Per-key attribution (CONTRACT §6 `key`): requests, tokens and cost carry the key's configured name, and
`GET /v1/gateway/spend` tells a key what it spent in its current budget period."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import openai
import pytest

from gateway.config import parse_config
from gateway.state.base import period_id
from tests.chat_scripts import USAGE, completion, text_stream
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, wait_until

PATH = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
# price per million tokens: 1000 for input (cached at the same price) and 2000 for output
COST = (USAGE["prompt_tokens"] * 1000 + USAGE["completion_tokens"] * 2000) / 1_000_000


def config(url: str, **auth: Any) -> Any:
    return parse_config({
        "auth": {"keys": [{"name": "team-a", "key": "key-a", "budget_usd": 1, "budget_period": "month"},
                          {"name": "team-b", "key": "key-b"}], **auth},
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x",
                                                  "price": {"input": 1000, "output": 2000}}]}],
    }, env={})


def spend(gw: GatewayServer, headers: dict[str, str]) -> tuple[int, Any]:
    req = urllib.request.Request(f"{gw.base_url}/gateway/spend", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_requests_tokens_and_cost_are_labelled_with_the_key_and_each_key_reads_its_own_spend(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], servers: Any) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, text_stream(["a"]), completion("b"), completion("c"))
    a = openai.OpenAI(base_url=gw.base_url, api_key="key-a", max_retries=0)
    b = openai.OpenAI(base_url=gw.base_url, api_key="key-b", max_retries=0)
    assert "".join(c.choices[0].delta.content or "" for c in
                   a.chat.completions.create(model="m", messages=HI, stream=True) if c.choices) == "a"
    a.chat.completions.create(model="m", messages=HI)
    b.chat.completions.create(model="m", messages=HI)
    servers.run(wait_until(lambda: gw.sample("llm_gateway_requests_total", model="m") == 3))
    assert gw.sample("llm_gateway_requests_total", key="team-a", outcome="ok") == 2
    assert gw.sample("llm_gateway_requests_total", key="team-b", outcome="ok") == 1
    assert gw.sample("llm_gateway_tokens_total", key="team-a", type="output") == 2 * USAGE["completion_tokens"]
    assert gw.sample("llm_gateway_cost_usd_total", model="m", provider="up", key="team-a") == pytest.approx(2 * COST)
    assert gw.sample("llm_gateway_cost_usd_total", model="m", provider="up", key="team-b") == pytest.approx(COST)

    status, body = spend(gw, {"Authorization": "Bearer key-a"})
    assert status == 200
    assert body == {"object": "gateway.key_spend", "key": "team-a", "period": "month",
                    "period_id": period_id("month", time.time()), "spend_usd": pytest.approx(2 * COST),
                    "budget_usd": 1.0, "remaining_usd": pytest.approx(1 - 2 * COST), "limited_by": "key"}
    status, body = spend(gw, {"api-key": "key-b"})  # a key without a budget has its spend kept too
    assert (status, body["key"], body["spend_usd"], body["budget_usd"]) == (200, "team-b", pytest.approx(COST), None)
    status, body = spend(gw, {"x-api-key": "key-b"})  # the Messages API's header, as the docstring says
    assert (status, body["key"]) == (200, "team-b")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-a-key"}, {"x-api-key": "not-a-key"}])
def test_reading_spend_needs_a_valid_key(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
                                         headers: dict[str, str]) -> None:
    gw = make_gateway(config(upstream.base_url, allow_unauthenticated=True))
    status, body = spend(gw, headers)
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert "key-a" not in json.dumps(body)
