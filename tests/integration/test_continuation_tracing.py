"""The spans of a continued stream (CONTRACT §4.9, §8): the winner whose stream failed after its first
token ends `stream_failed`; the attempt that continued it is a `continuation` span with its mode, and the
answer's attempt. Exported over OTLP/HTTP to a real receiver on loopback."""

from __future__ import annotations

from typing import Any

import openai

from gateway.config import parse_config
from tests.chat_scripts import USAGE, chunk, text_stream
from tests.fake_upstream import Close, FakeUpstream, Script, sse
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.otlp_receiver import OtlpReceiver

A, B = "/a/v1/chat/completions", "/b/v1/chat/completions"


def config(upstream: str, endpoint: str) -> Any:
    provider = {"type": "openai", "api_key": "k", "timeouts": {"connect_s": 2, "first_token_s": 10, "idle_s": 10,
                                                               "total_s": 30}}
    return parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"a": {**provider, "base_url": f"{upstream}/a/v1"},
                      "b": {**provider, "base_url": f"{upstream}/b/v1"}},
        "models": [{"name": "m", "continuation": "on", "deployments": [
            {"provider": "a", "model": "model-a"}, {"provider": "b", "model": "model-b", "prefill": True}]}],
        "telemetry": {"otlp_endpoint": endpoint, "service_name": "gw-under-test"},
    }, env={})


def test_the_continuation_is_its_own_attempt_span(servers: LoopThread, upstream: FakeUpstream,
                                                  receiver: OtlpReceiver) -> None:
    upstream.enqueue(A, Script([sse(chunk({"role": "assistant", "content": "Hello"})), Close()]))
    upstream.enqueue(B, text_stream([" world"]))
    gw = GatewayServer(config(upstream.base_url, receiver.endpoint))
    servers.run(gw.start())
    try:
        client = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)
        chunks = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello world"
        servers.run(wait_until(lambda: gw.sample("llm_gateway_requests_total", model="m") == 1))
        assert gw.app is not None and gw.app.tracing is not None
        assert gw.app.tracing.flush()
    finally:
        servers.run(gw.stop())
    attempts = {s.attributes["gateway.deployment"]: s for s in receiver.spans if s.kind == "CLIENT"}
    first, second = attempts["a/model-a"], attempts["b/model-b"]
    assert first.attributes["gateway.attempt.kind"] == "first"
    assert first.attributes["gateway.attempt.outcome"] == "stream_failed"
    assert second.attributes["gateway.attempt.kind"] == "continuation"
    assert second.attributes["gateway.continuation.mode"] == "prefill"
    assert second.attributes["gateway.attempt.outcome"] == "ok"
    # the answer's span is its own deployment's, not the first attempt's (the server span's `deployment`)
    assert (second.attributes["gen_ai.request.model"], second.attributes["gen_ai.response.model"]) == (
        "model-b", "model-b")
    assert "gen_ai.response.model" not in first.attributes
    # the GenAI token usage is the answer's last attempt's, as its upstream reported it, under its deployment
    assert gw.sample("gen_ai_client_token_usage_sum", gen_ai_token_type="output") == USAGE["completion_tokens"]
    assert gw.sample("gen_ai_client_token_usage_sum", gen_ai_response_model="model-b", gen_ai_token_type="input") == (
        USAGE["prompt_tokens"])
