"""Keys, rate limits, budgets and the response cache through the gateway, shared through a real Redis."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests.chat_scripts import completion, text_stream
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer
from tests.redis_server import RedisServer

# times a Redis outage: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

PATH = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def config(url: str, redis_url: str | None = None, keys: list[dict[str, Any]] | None = None,
           cache: dict[str, Any] | None = None, model_cache: bool = False) -> Any:
    return parse_config({
        "auth": {"keys": keys or [{"name": "team-a", "key": "key-a"}]},
        # a wide Redis budget: a busy test machine must not turn shared counting local (docs/scale-out.md)
        "state": ({"backend": "redis", "redis_url": redis_url, "timeout_ms": 1000} if redis_url
                  else {"backend": "memory"}),
        "cache": cache or {},
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x",
                                                  "price": {"input": 1000, "output": 1000}}],
                    "cache": model_cache},
                   {"name": "other", "deployments": [{"provider": "up", "model": "y"}]}],
    }, env={})


def sdk(gw: GatewayServer, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0, timeout=20)


def status_of(gw: GatewayServer, key: str = "key-a", **kw: Any) -> int:
    try:
        sdk(gw, key).chat.completions.create(model="m", messages=HI, **kw)
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


def test_two_replicas_share_one_rpm(redis: RedisServer, upstream: FakeUpstream,
                                    make_gateway: Callable[..., GatewayServer]) -> None:
    keys = [{"name": "team-a", "key": "key-a", "rpm": 7}]
    gws = [make_gateway(config(upstream.base_url, redis.url, keys)) for _ in range(2)]
    upstream.defaults[PATH] = completion("ok")
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda i: status_of(gws[i % 2]), range(20)))
    assert statuses.count(200) == 7 and statuses.count(429) == 13
    assert len(upstream.bodies(PATH)) == 7
    limited = sum(g.sample("llm_gateway_rate_limited_total", key="team-a", limit="rpm") for g in gws)
    assert limited == 13


def test_tpm_is_charged_with_real_usage(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, keys=[{"name": "team-a", "key": "key-a", "tpm": 1000}]))
    upstream.defaults[PATH] = completion("ok")  # real usage: 18 tokens
    assert status_of(gw, max_tokens=900) == 200, "reserved ~900, then settled at the real 18"
    assert status_of(gw, max_tokens=900) == 200, "would be refused if the reservation had stood"
    assert status_of(gw, max_tokens=990) == 429


def test_bad_keys_wrong_models_and_budgets_never_reach_upstream(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    keys = [{"name": "team-a", "key": "key-a", "models": ["m"], "budget_usd": 0.03}]
    gw = make_gateway(config(upstream.base_url, keys=keys))
    with pytest.raises(openai.AuthenticationError) as auth:
        sdk(gw, "wrong-key").chat.completions.create(model="m", messages=HI)
    assert auth.value.code == "invalid_api_key"
    with pytest.raises(openai.NotFoundError) as denied:  # as an unknown name: names don't leak
        sdk(gw).chat.completions.create(model="other", messages=HI)
    assert denied.value.code == "model_not_found"
    assert [m.id for m in sdk(gw).models.list()] == ["m"]
    assert upstream.bodies(PATH) == []
    upstream.defaults[PATH] = completion("ok")  # 18 tokens at $1000/M = $0.018 each
    assert status_of(gw) == 200 and status_of(gw) == 200
    with pytest.raises(openai.RateLimitError) as budget:
        sdk(gw).chat.completions.create(model="m", messages=HI)
    assert budget.value.code == "budget_exceeded"
    assert len(upstream.bodies(PATH)) == 2


def test_cache_hit_streams_without_upstream_and_expires(upstream: FakeUpstream,
                                                        make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, cache={"ttl_s": 0.5}, model_cache=True))
    upstream.enqueue(PATH, text_stream(["cached ", "answer"]), text_stream(["fresh ", "answer"]))

    def ask() -> tuple[str, str | None]:
        with sdk(gw).chat.completions.with_streaming_response.create(model="m", messages=HI, stream=True) as raw:
            text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
            return text, raw.headers.get("x-gateway-cache")

    assert ask() == ("cached answer", None)
    assert ask() == ("cached answer", "hit")
    assert len(upstream.bodies(PATH)) == 1, "a hit makes no upstream request"
    deadline = time.monotonic() + 5
    while ask()[1] == "hit":  # the TTL is the scenario under test, not synchronisation
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert len(upstream.bodies(PATH)) == 2


def test_cache_by_header_and_non_stream(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, completion("from upstream"))
    on = {"x-gateway-cache": "on"}
    first = sdk(gw).chat.completions.create(model="m", messages=HI, extra_headers=on)
    second = sdk(gw).chat.completions.create(model="m", messages=HI, extra_headers=on)
    assert first.choices[0].message.content == second.choices[0].message.content == "from upstream"
    assert len(upstream.bodies(PATH)) == 1


def test_redis_outage_degrades_to_local_limits_and_recovers(
        redis: RedisServer, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    keys = [{"name": "team-a", "key": "key-a", "rpm": 3}]
    gw = make_gateway(config(upstream.base_url, redis.url, keys))
    upstream.defaults[PATH] = completion("ok")
    ready = f"http://127.0.0.1:{gw.port}/readyz"
    assert _ready(ready) == (200, "ok")
    assert status_of(gw) == 200
    with capture_logs() as logs:
        redis.kill()
        statuses = [status_of(gw) for _ in range(5)]
        assert statuses.count(200) == 3, "local limits still hold while Redis is down"
        # still ready: a 503 would take every replica out of its Service at once (the chart probes /readyz)
        assert _ready(ready) == (200, "degraded")
        assert gw.sample("llm_gateway_state_degraded_total") > 0
    warnings = [e for e in logs if e.get("log_level") == "warning" and e["event"] == "state_backend_degraded"]
    assert len(warnings) == 1
    redis.start()
    deadline = time.monotonic() + 10
    while _ready(ready) != (200, "ok"):  # recovery is automatic: the backend probes Redis about every second
        assert time.monotonic() < deadline
        time.sleep(0.1)


def _ready(url: str) -> tuple[int, str]:
    """/readyz's status and the state it reports."""
    with urllib.request.urlopen(url, timeout=3) as r:
        return int(r.status), str(json.loads(r.read())["state"])
