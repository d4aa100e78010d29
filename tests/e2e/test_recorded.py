"""What the real llama.cpp server does that a hand-written fake might not, pinned as regression tests:
its recorded answers (tests/fixtures/e2e/, made by `python -m tests.e2e.record_fixtures`) replayed byte
for byte, chunk by chunk, through the gateway by the scripted upstream. An integration test: no model
server needed here.

- Its streams carry no usage chunk, even when asked: the gateway counts the answer as missing usage and
  invents no token counts or cost.
- A queued stream gets `: ping` comments before its first token: not a token, not a failure.
- An over-long prompt, streamed, is HTTP 200 with an empty body: the attempt failed, not an empty answer.
- The same prompt without streaming is a 400 `context_length_exceeded`."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from gateway.core.sse import DONE, SSEDecoder
from tests.fake_upstream import FakeUpstream, Script
from tests.harness import GatewayServer, LoopThread, wait_until

FIXTURES = Path(__file__).parent.parent / "fixtures" / "e2e"
PATH = "/v1/chat/completions"
SECOND = "/second/v1/chat/completions"  # a second provider's path on the same scripted upstream


@cache
def fixture(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def replay(name: str) -> Script:
    """The recorded answer: same status, content type and chunks (each its own write)."""
    fx = fixture(name)
    return Script([c["data"].encode() for c in fx["chunks"]], fx["status"], {"Content-Type": fx["content_type"]})


def recorded_text(name: str) -> str:
    decoder = SSEDecoder()
    events = [e for c in fixture(name)["chunks"] for e in decoder.feed(c["data"].encode())]
    objs = [orjson.loads(e.data) for e in events if e.data != DONE]
    return "".join(ch["delta"].get("content") or "" for o in objs for ch in o["choices"])


def call(gw: GatewayServer, name: str, **kw: Any) -> Any:
    """The recorded request, sent by the official SDK to the gateway's model `m`."""
    body = {k: v for k, v in fixture(name)["request"].items() if k != "model"}
    client = openai.OpenAI(base_url=gw.base_url, api_key="client-key", max_retries=0, timeout=20)
    resp = client.chat.completions.create(model="m", **{**body, **kw})
    return list(resp) if body["stream"] else resp


def settle(servers: LoopThread, cond: Callable[[], bool]) -> None:
    """Usage is recorded as the upstream stream closes, which can be just after the client's [DONE]."""
    servers.run(wait_until(cond))


def two_providers(upstream: FakeUpstream) -> dict[str, Any]:
    timeouts = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
    return {
        "providers": {"llama": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "timeouts": timeouts},
                      "second": {"type": "openai", "base_url": f"{upstream.base_url}/second/v1",
                                 "timeouts": timeouts}},
        "models": [{"name": "m", "deployments": [{"provider": "llama", "model": "gemma-3-270m"},
                                                 {"provider": "second", "model": "other"}]}],
    }


def test_fixtures_are_what_the_server_did() -> None:
    """Guards the recordings themselves (a re-recording that lost a behaviour fails here)."""
    assert recorded_text("stream_no_usage").strip()
    assert not any('"usage"' in c["data"] and '"usage": null' not in c["data"]
                   for c in fixture("stream_no_usage")["chunks"])
    assert fixture("stream_no_usage")["request"]["stream_options"] == {"include_usage": True}
    assert fixture("stream_queued_with_pings")["chunks"][0]["data"].startswith(": ping")
    assert fixture("stream_prompt_too_long")["status"] == 200
    assert fixture("stream_prompt_too_long")["chunks"] == []
    assert fixture("complete_prompt_too_long")["status"] == 400
    assert fixture("complete_with_usage")["status"] == 200


@pytest.mark.parametrize("name", ["stream_no_usage", "stream_queued_with_pings"])
def test_stream_without_usage_is_counted_missing_and_no_numbers_are_invented(
        name: str, servers: LoopThread, upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, replay(name))
    chunks = call(gateway, name)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == recorded_text(name)
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1
    assert all(c.usage is None for c in chunks), "the gateway must not make up a usage chunk"
    sent = upstream.bodies(PATH)[0]
    assert sent["max_tokens"] == fixture(name)["request"]["max_tokens"] and sent["seed"] == 1234

    labels = {"model": "m", "provider": "up"}
    settle(servers, lambda: gateway.sample("llm_gateway_usage_missing_total", **labels) == 1)
    for kind in ("input", "output"):
        assert gateway.sample("llm_gateway_tokens_total", **labels, type=kind) == 0
    assert gateway.sample("llm_gateway_cost_usd_total", **labels) == 0
    assert gateway.sample("llm_gateway_time_to_first_token_seconds_count", api="chat", **labels) == 1
    assert gateway.sample("llm_gateway_upstream_attempts_total", model="m", deployment="up/up-model",
                          outcome="ok") == 1, "the ping before the first token is neither a token nor a failure"
    assert gateway.sample("llm_gateway_requests_total", api="chat", model="m", stream="true", outcome="ok") == 1


def test_empty_200_stream_for_an_over_long_prompt_is_a_failed_attempt_not_an_empty_answer(
        upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.defaults[PATH] = replay("stream_prompt_too_long")
    with pytest.raises(openai.APIStatusError) as err:
        call(gateway, "stream_prompt_too_long")
    assert err.value.status_code == 502
    assert err.value.body["code"] == "upstream_error"  # type: ignore[index]
    assert "before the first token" in err.value.body["message"]  # type: ignore[index]
    assert len(upstream.bodies(PATH)) >= 1
    labels = {"model": "m", "provider": "up"}
    assert gateway.sample("llm_gateway_time_to_first_token_seconds_count", api="chat", **labels) == 0
    assert gateway.sample("llm_gateway_tokens_total", **labels, type="input") == 0
    assert gateway.sample("llm_gateway_requests_total", api="chat", model="m", stream="true",
                          outcome="upstream_error") == 1


def test_empty_200_stream_falls_back_to_the_next_deployment(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    upstream.defaults[PATH] = replay("stream_prompt_too_long")
    upstream.enqueue(SECOND, replay("stream_no_usage"))
    gw = make_gateway(**two_providers(upstream))
    chunks = call(gw, "stream_prompt_too_long")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == recorded_text("stream_no_usage")
    assert upstream.bodies(SECOND)[0]["model"] == "other"
    assert [b["model"] for b in upstream.bodies(PATH)] == ["gemma-3-270m"] * len(upstream.bodies(PATH))


def test_context_length_exceeded_passes_through_with_the_servers_reason(
        upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.defaults[PATH] = replay("complete_prompt_too_long")
    with pytest.raises(openai.BadRequestError) as err:
        call(gateway, "complete_prompt_too_long")
    assert err.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    assert "maximum context length is 512 tokens" in err.value.body["message"]  # type: ignore[index]
    assert len(upstream.bodies(PATH)) == 1, "never retried on the same deployment"


def test_context_length_exceeded_moves_to_the_next_deployment_once(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    upstream.defaults[PATH] = replay("complete_prompt_too_long")
    upstream.enqueue(SECOND, replay("complete_with_usage"))
    gw = make_gateway(**two_providers(upstream))
    resp = call(gw, "complete_prompt_too_long")
    recorded = orjson.loads(fixture("complete_with_usage")["chunks"][0]["data"])
    assert resp.choices[0].message.content == recorded["choices"][0]["message"]["content"]
    assert len(upstream.bodies(PATH)) == 1 and len(upstream.bodies(SECOND)) == 1
    # a non-streamed answer does carry usage: counted as the server reported it, on the serving provider
    labels = {"model": "m", "provider": "second"}
    settle(servers, lambda: gw.sample("llm_gateway_tokens_total", **labels, type="input") > 0)
    assert gw.sample("llm_gateway_tokens_total", **labels, type="input") == recorded["usage"]["prompt_tokens"]
    assert gw.sample("llm_gateway_tokens_total", **labels, type="output") == recorded["usage"]["completion_tokens"]
    assert gw.sample("llm_gateway_usage_missing_total", **labels) == 0
