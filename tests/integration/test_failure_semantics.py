"""Failure semantics that never degrade other traffic (CONTRACT §3, §4.2, §4.6), end to end with the
official SDKs against a scripted upstream.

Scope of the issue, bullet by bullet:
- learn-once facts per deployment and API, with an expiry, a gauge and log lines:
  test_a_json_answer_changes_only_that_deployment_and_api_and_expires
- the symmetric case (an upstream that rejects `stream: false`): test_a_stream_only_upstream_serves_a_body_client
- the buffered path under total_s, TTFT at its first delta: test_the_buffered_path_runs_under_total_s_not_first_token_s
  (TTFT also in test_a_json_answer_...); cache hits labelled: test_a_cache_hit_records_ttft_as_provider_cache
- quota fails fast as 429 with the provider's code: test_quota_on_every_deployment_is_one_429_per_request
- `x-should-retry: false` after our retries: test_every_error_after_our_retries_says_do_not_retry
- an empty stream moves on: test_an_empty_stream_moves_to_the_next_deployment,
  test_an_empty_stream_on_the_last_deployment_is_the_answer
- stream_options retried without on any 400/422, learned per deployment only on success:
  test_stream_options_rejected_by_a_422_without_param_is_retried_without_and_learned_per_deployment,
  test_a_rejection_that_persists_without_stream_options_is_not_learned
- SSE told from the body: test_an_event_stream_labelled_json_is_streamed
- a reset before any byte is a connect error: test_a_reset_before_any_byte_is_a_connect_error
- the breaker before every attempt, a probe is one attempt: test_a_failure_that_opens_the_breaker_is_not_retried_there
- the backoff floor: tests/unit/test_retry.py::test_backoff_bounds
- a usage estimate for a stream without usage: test_a_stream_without_usage_is_charged_an_estimate
- /v1/responses routed to a server without that endpoint: test_responses_on_a_server_without_the_endpoint
- Gemini-style tool calls and malformed events after the first token: tests/integration/test_tool_call_index.py
  and test_malformed_after_first_token.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import openai
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests.chat_scripts import chunk, error_script, text_stream
from tests.fake_upstream import FakeUpstream, Pause, Script, json_script, sse
from tests.harness import GatewayServer
from tests.responses_scripts import Answer, stream_script

CHAT = "/p/v1/chat/completions"
RESP = "/p/v1/responses"
B_CHAT = "/b/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]
BODY = {"id": "c1", "object": "chat.completion", "created": 1, "model": "model-a",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "buffered answer"},
                     "finish_reason": "stop"}], "usage": {"prompt_tokens": 2, "completion_tokens": 2}}
FAST = {"max_attempts": 4, "per_deployment": 2, "initial_backoff_ms": 1, "max_backoff_ms": 5}


def config(url: str, *, models: list[dict[str, Any]] | None = None, timeouts: dict[str, float] | None = None,
           breaker: dict[str, float] | None = None, cache: bool = False, keys: list[dict[str, Any]] | None = None,
           ) -> Any:
    t = {"connect_s": 1, "first_token_s": 5, "idle_s": 5, "total_s": 30, **(timeouts or {})}
    return parse_config({
        "server": {"keepalive_after_s": 30},
        "auth": {"keys": keys} if keys else {"allow_unauthenticated": True},
        "providers": {
            "p": {"type": "openai", "base_url": f"{url}/p/v1", "api_key": "kp", "timeouts": t, "learn_ttl_s": 60,
                  **({"breaker": breaker} if breaker else {})},
            "b": {"type": "openai", "base_url": f"{url}/b/v1", "api_key": "kb", "timeouts": t},
        },
        "models": models or [
            {"name": "a", "deployments": [{"provider": "p", "model": "model-a"}], "retry": FAST, "cache": cache},
            {"name": "b", "deployments": [{"provider": "p", "model": "model-b"}], "retry": FAST},
        ],
        "cache": {"enabled": cache},
    }, env={})


def two_deployments(url: str, **kw: Any) -> Any:
    return config(url, models=[{"name": "m", "retry": FAST, "deployments": [
        {"provider": "p", "model": "model-a"}, {"provider": "b", "model": "model-b"}]}], **kw)


def sdk(gw: GatewayServer, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=kw.pop("api_key", "x"), timeout=30,
                         max_retries=kw.pop("max_retries", 0), **kw)


def stream_text(gw: GatewayServer, model: str, **kw: Any) -> str:
    chunks = sdk(gw).chat.completions.create(model=model, messages=MESSAGES, stream=True, **kw)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def ttft_count(gw: GatewayServer, model: str, provider: str, api: str = "chat") -> float:
    return gw.sample("llm_gateway_time_to_first_token_seconds_count", api=api, model=model, provider=provider)


def test_a_json_answer_changes_only_that_deployment_and_api_and_expires(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(CHAT, json_script(BODY), text_stream(["streamed"]), json_script(BODY), text_stream(["again"]))
    upstream.enqueue(RESP, stream_script(Answer().message(["resp ", "streamed"]).stream_events()))
    with capture_logs() as logs:
        assert stream_text(gw, "a") == "buffered answer"
    assert [e["fact"] for e in logs if e["event"] == "learned_upstream_fact"] == ["no_stream"]
    gauge = {"deployment": "p/model-a", "api": "chat", "fact": "no_stream"}
    assert gw.sample("llm_gateway_learned_fallbacks", **gauge) == 1
    assert ttft_count(gw, "a", "p") == 1, "a buffered answer's TTFT is recorded at its first delta"

    assert stream_text(gw, "b") == "streamed", "another model of the same provider still streams"
    events = list(sdk(gw).responses.create(model="a", input="x", stream=True))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "resp streamed"
    assert upstream.bodies(RESP)[0]["stream"] is True, "the other API of the same deployment still streams"
    assert ttft_count(gw, "b", "p") == 1 and ttft_count(gw, "a", "p", "responses") == 1

    assert stream_text(gw, "a") == "buffered answer"
    chat = upstream.bodies(CHAT)
    assert [b.get("stream") for b in chat] == [True, True, None], "while the fact holds, model a asks for a body"
    assert [b["model"] for b in chat] == ["model-a", "model-b", "model-a"]

    assert gw.app is not None
    learned = gw.app.runtime.learned
    now = learned.clock()
    learned.clock = lambda: now + 61  # past learn_ttl_s
    with capture_logs() as logs:
        assert stream_text(gw, "a") == "again"
    assert upstream.bodies(CHAT)[3]["stream"] is True, "after the expiry model a is probed with a stream"
    assert [e["event"] for e in logs if e["event"].startswith("learned_")] == ["learned_upstream_fact_expired"]
    assert gw.sample("llm_gateway_learned_fallbacks", **gauge) == 0


def test_a_stream_only_upstream_serves_a_body_client(upstream: FakeUpstream,
                                                     make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(CHAT, error_script(400, "invalid_value", "stream must be true", param="stream"),
                     text_stream(["only ", "streams"]), text_stream(["second"]))
    got = sdk(gw).chat.completions.create(model="a", messages=MESSAGES)
    assert got.choices[0].message.content == "only streams" and got.choices[0].finish_reason == "stop"
    assert got.usage is not None and got.usage.completion_tokens == 7
    assert sdk(gw).chat.completions.create(model="a", messages=MESSAGES).choices[0].message.content == "second"
    assert [b.get("stream") for b in upstream.bodies(CHAT)] == [None, True, True]
    assert gw.sample("llm_gateway_learned_fallbacks", deployment="p/model-a", api="chat", fact="stream_only") == 1


def test_the_buffered_path_runs_under_total_s_not_first_token_s(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, timeouts={"first_token_s": 0.3}))
    slow_body = Script([Pause(0.6), b"", *json_script(BODY).parts], headers={"Content-Type": "application/json"})
    upstream.enqueue(CHAT, json_script(BODY), slow_body)
    assert stream_text(gw, "a") == "buffered answer"  # learned: model a answers with bodies
    assert stream_text(gw, "a") == "buffered answer", "a body slower than first_token_s is waited for"
    assert gw.sample("llm_gateway_upstream_attempts_total", model="a", deployment="p/model-a",
                     outcome="first_token_timeout") == 0


def test_a_cache_hit_records_ttft_as_provider_cache(upstream: FakeUpstream,
                                                     make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, cache=True))
    upstream.enqueue(CHAT, text_stream(["cached ", "text"]))
    assert stream_text(gw, "a", temperature=0) == "cached text"
    assert stream_text(gw, "a", temperature=0) == "cached text"
    assert len(upstream.bodies(CHAT)) == 1
    assert ttft_count(gw, "a", "p") == 1 and ttft_count(gw, "a", "cache") == 1


QUOTAS = {
    "openai": error_script(429, "insufficient_quota", "You exceeded your current quota", "insufficient_quota"),
    "kimi": json_script({"error": {"message": "quota exceeded", "type": "exceeded_current_quota_error"}}, 429),
    "zai": json_script({"error": {"code": "1113", "message": "balance is not enough"}}, 429),
    "deepseek": json_script({"error": {"message": "Insufficient Balance", "type": "unknown_error"}}, 402),
}


@pytest.mark.parametrize("provider", list(QUOTAS))
def test_quota_on_every_deployment_is_one_429_per_request(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], provider: str) -> None:
    gw = make_gateway(two_deployments(upstream.base_url))
    upstream.defaults[CHAT] = upstream.defaults[B_CHAT] = QUOTAS[provider]
    with pytest.raises(openai.RateLimitError) as info:  # the SDK's default retries are on
        sdk(gw, max_retries=2).chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert len(upstream.bodies(CHAT)) == 1 and len(upstream.bodies(B_CHAT)) == 1, "one call per deployment"
    err = info.value
    assert err.status_code == 429 and err.response.headers["x-should-retry"] == "false"
    expected_code = {"openai": "insufficient_quota", "kimi": "exceeded_current_quota_error", "zai": "1113",
                     "deepseek": "unknown_error"}[provider]
    assert err.code == expected_code
    assert "kp" not in err.message and "127.0.0.1" not in err.message


@pytest.mark.parametrize(("script", "status"), [
    (error_script(503, None, "busy", "server_error"), 502),
    (error_script(400, "content_policy_violation", "no"), 400),
])
def test_every_error_after_our_retries_says_do_not_retry(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], script: Script, status: int) -> None:
    gw = make_gateway(two_deployments(upstream.base_url))
    upstream.defaults[CHAT] = upstream.defaults[B_CHAT] = script
    with pytest.raises(openai.APIStatusError) as info:
        sdk(gw, max_retries=2).chat.completions.create(model="m", messages=MESSAGES)
    assert info.value.status_code == status
    assert info.value.response.headers["x-should-retry"] == "false"
    calls = len(upstream.bodies(CHAT)) + len(upstream.bodies(B_CHAT))
    assert calls == (4 if status == 502 else 1), "the SDK did not multiply our attempts"


def test_a_502_names_each_failed_deployment_and_no_address(upstream: FakeUpstream,
                                                           make_gateway: Callable[..., GatewayServer]) -> None:
    """5xx failures are described by deployment (docs/reference.md, "Errors"), so a client or an on-call
    engineer can tell which one fails; never by URL or address."""
    gw = make_gateway(two_deployments(upstream.base_url))
    upstream.defaults[CHAT] = error_script(500, None, "boom", "server_error")
    upstream.defaults[B_CHAT] = error_script(503, None, "busy", "server_error")
    with pytest.raises(openai.APIStatusError) as info:
        sdk(gw).chat.completions.create(model="m", messages=MESSAGES)
    message = info.value.message
    assert info.value.status_code == 502
    assert "p/model-a: http_5xx HTTP 500" in message and "b/model-b: http_5xx HTTP 503" in message, message
    assert "127.0.0.1" not in message and "boom" not in message


def test_an_empty_stream_moves_to_the_next_deployment(upstream: FakeUpstream,
                                                      make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url))
    upstream.enqueue(CHAT, Script([b"data: [DONE]\n\n"]))
    upstream.enqueue(B_CHAT, text_stream(["from ", "b"]))
    assert stream_text(gw, "m") == "from b"
    assert len(upstream.bodies(CHAT)) == 1, "an empty answer is not asked again of the same deployment"
    assert gw.sample("llm_gateway_upstream_attempts_total", model="m", deployment="p/model-a",
                     outcome="inband_error") == 1  # an empty answer is an in-band failure


def test_an_empty_stream_on_the_last_deployment_is_the_answer(upstream: FakeUpstream,
                                                             make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.defaults[CHAT] = Script([sse(chunk({"role": "assistant", "content": ""})), b"data: [DONE]\n\n"])
    chunks = list(sdk(gw, max_retries=2).chat.completions.create(model="a", messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    assert len(upstream.bodies(CHAT)) == 1, "one call: no 502 for the SDK to retry"


def test_stream_options_rejected_by_a_422_without_param_is_retried_without_and_learned_per_deployment(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    rejected = json_script({"detail": [{"msg": "extra fields not permitted"}]}, 422)
    upstream.enqueue(CHAT, rejected, text_stream(["ok"], usage="none"), text_stream(["b"]), text_stream(["again"]))
    assert stream_text(gw, "a") == "ok"
    assert stream_text(gw, "b") == "b"
    assert stream_text(gw, "a") == "again"
    sent = upstream.bodies(CHAT)
    assert ["stream_options" in b for b in sent] == [True, False, True, False]
    assert sent[2]["model"] == "model-b", "the other model of the provider keeps its usage"
    assert gw.sample("llm_gateway_learned_fallbacks", deployment="p/model-a", api="chat",
                     fact="no_stream_options") == 1


def test_a_rejection_that_persists_without_stream_options_is_not_learned(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    bad = error_script(400, None, "messages must not be empty")
    upstream.enqueue(CHAT, bad, bad, text_stream(["fine"]))
    with pytest.raises(openai.BadRequestError) as info:
        stream_text(gw, "a")
    assert "must not be empty" in info.value.message and info.value.response.headers["x-should-retry"] == "false"
    assert stream_text(gw, "a") == "fine"
    assert ["stream_options" in b for b in upstream.bodies(CHAT)] == [True, False, True]
    assert gw.sample("llm_gateway_learned_fallbacks", deployment="p/model-a", api="chat",
                     fact="no_stream_options") == 0


def test_an_event_stream_labelled_json_is_streamed(upstream: FakeUpstream,
                                                  make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    lying = text_stream(["labelled ", "json"])
    lying.headers = {"Content-Type": "application/json"}
    upstream.enqueue(CHAT, lying, text_stream(["next"]))
    assert stream_text(gw, "a") == "labelled json"
    assert stream_text(gw, "a") == "next"
    assert upstream.bodies(CHAT)[1]["stream"] is True, "nothing was learned from a stream with a wrong label"


def test_a_reset_before_any_byte_is_a_connect_error(upstream: FakeUpstream,
                                                   make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(CHAT, Script(reset=True), text_stream(["after reset"]))
    assert stream_text(gw, "a") == "after reset"
    labels = {"model": "a", "deployment": "p/model-a"}
    assert gw.sample("llm_gateway_upstream_attempts_total", **labels, outcome="connect_error") == 1
    assert gw.sample("llm_gateway_upstream_attempts_total", **labels, outcome="inband_error") == 0


def test_a_failure_that_opens_the_breaker_is_not_retried_there(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, breaker={"failures": 1, "window_s": 60, "cooldown_s": 60}))
    upstream.defaults[CHAT] = error_script(503, None, "down", "server_error")
    upstream.enqueue(B_CHAT, text_stream(["b answers"]))
    assert stream_text(gw, "m") == "b answers"
    assert len(upstream.bodies(CHAT)) == 1, "per_deployment is 2, but the open breaker is asked first"


def test_a_stream_without_usage_is_charged_an_estimate(upstream: FakeUpstream,
                                                       make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, keys=[{"name": "team", "key": "gw-key-1", "tpm": 100000}]))
    upstream.enqueue(CHAT, text_stream(["x" * 400], usage="none"))
    with capture_logs() as logs:
        client = sdk(gw, api_key="gw-key-1")
        list(client.chat.completions.create(model="a", messages=MESSAGES, stream=True))
        deadline = time.monotonic() + 10  # the line is written just after the response: bounded wait
        while not [e for e in logs if e["event"] == "request"] and time.monotonic() < deadline:
            time.sleep(0.01)
    line = next(e for e in logs if e["event"] == "request")
    assert line["estimated"] is True and line["output_tokens"] == 100 and line["input_tokens"] > 0
    assert gw.sample("llm_gateway_tokens_total", model="a", provider="p", type="output") == 0
    assert gw.sample("llm_gateway_usage_missing_total", model="a", provider="p") == 1


@pytest.mark.parametrize("stream", [True, False])
def test_responses_on_a_server_without_the_endpoint(upstream: FakeUpstream,
                                                    make_gateway: Callable[..., GatewayServer], stream: bool) -> None:
    gw = make_gateway(two_deployments(upstream.base_url))
    upstream.defaults[RESP] = Script([b"404 page not found"], status=404, headers={"Content-Type": "text/plain"})
    answer = Answer().message(["from ", "b"])
    upstream.enqueue("/b/v1/responses", stream_script(answer.stream_events()) if stream else json_script(answer.body()))
    got = sdk(gw).responses.create(model="m", input="x", stream=stream)
    if stream:
        assert "".join(e.delta for e in got if e.type == "response.output_text.delta") == "from b"
    else:
        assert got.output_text == "from b"
    assert len(upstream.bodies(RESP)) == 1, "a missing endpoint is not asked again"

    upstream.defaults["/b/v1/responses"] = upstream.defaults[RESP]
    with pytest.raises(openai.APIStatusError) as info:
        r = sdk(gw, max_retries=2).responses.create(model="m", input="x", stream=stream)
        list(r) if stream else None
    assert info.value.status_code == 502 and info.value.response.headers["x-should-retry"] == "false"
    assert "upstream_not_found HTTP 404" in info.value.message
