"""Resilience before the first token, and explicit failure after it (CONTRACT §4), end to end with the
official openai SDK against a scripted upstream.

Mapping of the seed documents' rules to tests:

streaming-guide.txt, "Reliability":
- "Hard deadline + idle watchdog ... keepalive comment lines count":
    test_stall_after_tokens_ends_with_one_error_event_within_idle_s,
    test_keepalive_comments_do_not_count_as_a_first_token (comments keep idle_s alive but not first_token_s)
- "No duplicated partial output ... retried only until the first fragment":
    test_failure_before_first_token_falls_back_invisibly (every kind),
    test_failure_after_first_token_is_one_error_event_and_not_retried
- "Learn-once fallbacks": test_stream_options_rejection_is_learned_once,
    test_plain_json_answer_to_a_stream_is_re_emitted_and_learned
- "Billing errors still fail fast": test_quota_moves_on_and_is_never_retried_on_the_same_deployment
- "Idle watchdog ... retried like any transient failure, as long as nothing was emitted yet":
    test_failure_before_first_token_falls_back_invisibly[idle]
adr-240, "Failures stay on the known path":
- connection failure before the stream opened: test_failure_before_first_token_falls_back_invisibly[connect]
- a provider that answers the request for a stream with an error: [http_500], [http_429]
- overload reported inside the stream before the first text (rate_limit_exceeded, server_error after
  HTTP 200): [inband_rate_limit], [inband_server_error], [openrouter_finish_error]
- "A timeout is not sent again": test_silent_upstream_times_out_at_first_token_s_and_is_not_retried_there
- "Anything after the stream opened stands": test_failure_after_first_token_is_one_error_event_and_not_retried
The decision rows themselves are unit-tested in tests/unit/test_retry.py.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import openai
import pytest

from gateway.config import parse_config
from tests.chat_scripts import chunk, error_script, text_stream
from tests.fake_upstream import Close, FakeUpstream, Hang, Pause, Script, json_script, sse
from tests.harness import GatewayServer, LoopThread
from tests.ports import free_port

# bounds how long failures take to answer: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

A, B = "/a/v1/chat/completions", "/b/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]
ANSWER = ["Second ", "deployment ", "answers."]


def two_deployments(url: str, *, retry: dict[str, Any] | None = None, hedge_after_ms: float = 0,
                    a_url: str | None = None, timeouts: dict[str, float] | None = None,
                    keepalive_after_s: float = 30, breaker: dict[str, float] | None = None,
                    only_a: bool = False) -> Any:
    t = {"connect_s": 1, "first_token_s": 5, "idle_s": 5, "total_s": 30, **(timeouts or {})}
    deployments = [{"provider": "a", "model": "model-a"}] + ([] if only_a else [{"provider": "b", "model": "model-b"}])
    return parse_config({
        "server": {"keepalive_after_s": keepalive_after_s},
        "auth": {"allow_unauthenticated": True},
        "providers": {
            "a": {"type": "openai", "base_url": a_url or f"{url}/a/v1", "api_key": "ka", "timeouts": t,
                  **({"breaker": breaker} if breaker else {})},
            "b": {"type": "openai", "base_url": f"{url}/b/v1", "api_key": "kb", "timeouts": t},
        },
        "models": [{"name": "m", "deployments": deployments, "hedge_after_ms": hedge_after_ms,
                    "retry": retry or {"max_attempts": 4, "per_deployment": 2, "initial_backoff_ms": 1,
                                       "max_backoff_ms": 20}}],
    }, env={})


def sdk(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=30)


def stream_all(gw: GatewayServer) -> tuple[str, list[Any]]:
    chunks = list(sdk(gw).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks


def role_count(chunks: list[Any]) -> int:
    return sum(1 for c in chunks if c.choices and c.choices[0].delta.role)


ROLE = sse(chunk({"role": "assistant", "content": ""}))
FAILURES: dict[str, Script] = {
    "http_500": error_script(500, None, "boom", "server_error"),
    "http_503": error_script(503, None, "unavailable", "server_error"),
    "http_429": error_script(429, "rate_limit_exceeded", "slow down", "requests"),
    "inband_rate_limit": Script([ROLE, sse({"error": {"message": "Rate limit", "type": "requests",
                                                      "code": "rate_limit_exceeded"}})]),
    "inband_server_error": Script([ROLE, sse({"error": {"message": "oops", "type": "server_error",
                                                        "code": "server_error"}}), b"data: [DONE]\n\n"]),
    "openrouter_finish_error": Script([ROLE, sse({**chunk({"content": ""}, "error"),
                                                  "error": {"code": "server_error", "message": "x"}})]),
    "early_eof": Script([ROLE, Close()]),
    "clean_eof_without_token": Script([ROLE]),
    "malformed": Script([ROLE, b"data: {not json\n\n"]),
    "quota": error_script(429, "insufficient_quota", "You exceeded your quota", "insufficient_quota"),
    "context_length": error_script(400, "context_length_exceeded", "too long", "invalid_request_error"),
}


@pytest.mark.parametrize("kind", sorted(FAILURES))
def test_failure_before_first_token_falls_back_invisibly(upstream: FakeUpstream,
                                                         make_gateway: Callable[..., GatewayServer], kind: str) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, retry={"max_attempts": 4, "per_deployment": 1,
                                                                "initial_backoff_ms": 1}))
    upstream.enqueue(A, FAILURES[kind])
    upstream.enqueue(B, text_stream(ANSWER))
    text, chunks = stream_all(gw)
    assert text == "".join(ANSWER)
    assert role_count(chunks) == 1, "exactly one preamble reaches the client"
    assert len(upstream.bodies(A)) == 1 and len(upstream.bodies(B)) == 1
    assert gw.sample("llm_gateway_upstream_attempts_total", model="m", deployment="b/model-b", outcome="ok") == 1


def test_connect_error_and_idle_before_token_fall_back(upstream: FakeUpstream,
                                                       make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, a_url=f"http://127.0.0.1:{free_port()}/v1"))
    upstream.enqueue(B, text_stream(ANSWER))
    text, chunks = stream_all(gw)
    assert text == "".join(ANSWER) and role_count(chunks) == 1
    assert gw.sample("llm_gateway_upstream_attempts_total", model="m", deployment="a/model-a",
                     outcome="connect_error") == 2  # retried on the same deployment, then moved on
    gw2 = make_gateway(two_deployments(upstream.base_url, timeouts={"idle_s": 0.3}))
    upstream.enqueue(A, Script([ROLE, Hang()]))
    upstream.enqueue(B, text_stream(ANSWER))
    text, chunks = stream_all(gw2)
    assert text == "".join(ANSWER) and role_count(chunks) == 1
    assert len(upstream.bodies(A)) == 1, "a timeout is never retried on the same deployment"


@pytest.mark.parametrize(("kind", "status", "code"), [
    ("http_500", 502, "upstream_error"), ("inband_server_error", 502, "upstream_error"),
    ("early_eof", 502, "upstream_error"), ("quota", 429, "insufficient_quota"),
])
def test_single_deployment_gives_the_right_error_and_no_content(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], kind: str, status: int, code: str) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, only_a=True))
    upstream.defaults[A] = FAILURES[kind]
    with pytest.raises(openai.APIStatusError) as info:
        list(sdk(gw).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert info.value.status_code == status
    assert info.value.body["code"] == code  # type: ignore[index]
    assert "127.0.0.1" not in info.value.message
    assert info.value.response.headers["x-should-retry"] == "false", "the gateway spent the retries"


def test_silent_upstream_times_out_at_first_token_s_and_is_not_retried_there(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, timeouts={"first_token_s": 0.4, "idle_s": 10}))
    upstream.defaults[A] = Script(silent=True)
    upstream.enqueue(B, text_stream(ANSWER))
    text, _ = stream_all(gw)
    assert text == "".join(ANSWER)
    assert len(upstream.bodies(A)) == 1
    assert gw.sample("llm_gateway_upstream_attempts_total", model="m", deployment="a/model-a",
                     outcome="first_token_timeout") == 1
    gw1 = make_gateway(two_deployments(upstream.base_url, timeouts={"first_token_s": 0.3}, only_a=True))
    with pytest.raises(openai.APIStatusError) as info:
        stream_all(gw1)
    assert info.value.status_code == 504 and info.value.body["code"] == "upstream_timeout"  # type: ignore[index]


def test_keepalive_comments_do_not_count_as_a_first_token(upstream: FakeUpstream,
                                                          make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, timeouts={"first_token_s": 0.5, "idle_s": 5}))
    upstream.defaults[A] = Script([ROLE] + [b": keepalive\n\n", Pause(0.1)] * 20)
    upstream.enqueue(B, text_stream(ANSWER))
    text, chunks = stream_all(gw)
    assert text == "".join(ANSWER) and role_count(chunks) == 1
    assert gw.sample("llm_gateway_upstream_attempts_total", model="m", deployment="a/model-a",
                     outcome="first_token_timeout") == 1


def test_failure_after_first_token_is_one_error_event_and_not_retried(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url))
    upstream.enqueue(A, Script([ROLE, sse(chunk({"content": "partial "})),
                                sse({"error": {"message": "died", "type": "server_error", "code": "server_error"}})]))
    received: list[str] = []
    with pytest.raises(openai.APIError) as info:
        for c in sdk(gw).chat.completions.create(model="m", messages=MESSAGES, stream=True):
            received.append(c.choices[0].delta.content or "" if c.choices else "")
    assert "".join(received) == "partial "
    assert "after the first token" in info.value.message
    assert upstream.bodies(B) == [] and len(upstream.bodies(A)) == 1
    assert gw.sample("llm_gateway_stream_failures_total", model="m", deployment="a/model-a",
                     reason="inband_error") == 1


def raw_stream(gw: GatewayServer) -> tuple[int, bytes]:
    req = urllib.request.Request(f"{gw.base_url}/chat/completions", headers={"content-type": "application/json"},
                                 data=b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}')
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read()


def test_stall_after_tokens_ends_with_one_error_event_within_idle_s(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, timeouts={"idle_s": 0.4}))
    upstream.enqueue(A, Script([ROLE, sse(chunk({"content": "so far"})), Hang()]))
    start = time.monotonic()
    status, body = raw_stream(gw)
    elapsed = time.monotonic() - start
    assert status == 200
    assert body.count(b'data: {"error"') == 1 and b"[DONE]" not in body and b"so far" in body
    assert b"idle" in body
    assert elapsed < 0.4 + 2.0


def test_keepalive_before_first_token_then_in_stream_error(upstream: FakeUpstream,
                                                           make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, keepalive_after_s=0.1, only_a=True,
                                      timeouts={"first_token_s": 2}))
    upstream.enqueue(A, Script([ROLE, Pause(0.4), sse(chunk({"content": "late"})), sse(chunk({}, "stop")),
                                b"data: [DONE]\n\n"]))
    status, body = raw_stream(gw)
    assert status == 200 and body.startswith(b": keepalive\n\n") and b"late" in body and body.endswith(b"[DONE]\n\n")
    upstream.defaults[A] = error_script(503, None, "down", "server_error")
    upstream.enqueue(A, Script([ROLE, Pause(0.3), Close()]))
    status, body = raw_stream(gw)
    assert status == 200 and b": keepalive" in body
    assert body.count(b'data: {"error"') == 1 and b"[DONE]" not in body


def test_hedging_takes_the_faster_deployment_and_closes_the_slower(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, hedge_after_ms=150))
    upstream.enqueue(A, Script([ROLE, Pause(3.0), sse(chunk({"content": "slow"})), sse(chunk({}, "stop"))]))
    upstream.enqueue(B, text_stream(ANSWER))
    start = time.monotonic()
    text, chunks = stream_all(gw)
    assert text == "".join(ANSWER) and role_count(chunks) == 1
    assert time.monotonic() - start < 2.0
    servers.run(asyncio.wait_for(upstream.closed.wait(), 1.0))  # the primary's connection was closed
    assert gw.sample("llm_gateway_hedges_total", model="m", winner="hedge") == 1
    assert gw.sample("llm_gateway_upstream_attempts_total", model="m", deployment="a/model-a",
                     outcome="hedge_cancelled") == 1


def test_retry_after_is_honoured(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, only_a=True,
                                      retry={"max_attempts": 3, "per_deployment": 3, "initial_backoff_ms": 1,
                                             "max_backoff_ms": 5000}))
    upstream.enqueue(A, error_script(429, "rate_limit_exceeded", "slow", "requests", headers={"Retry-After": "2"}),
                     text_stream(ANSWER))
    text, _ = stream_all(gw)
    assert text == "".join(ANSWER)
    first, second = [r.at for r in upstream.received]
    assert second - first >= 1.95


def test_quota_moves_on_and_is_never_retried_on_the_same_deployment(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url))
    upstream.defaults[A] = FAILURES["quota"]
    upstream.defaults[B] = text_stream(ANSWER)
    assert stream_all(gw)[0] == "".join(ANSWER)
    assert len(upstream.bodies(A)) == 1
    assert gw.sample("llm_gateway_upstream_attempts_total", model="m", deployment="a/model-a", outcome="quota") == 1


def test_persistent_failure_is_bounded_then_skipped_then_probed_back(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, breaker={"failures": 3, "window_s": 30, "cooldown_s": 0.5}))
    upstream.defaults[A] = FAILURES["http_500"]
    upstream.defaults[B] = text_stream(ANSWER)
    assert stream_all(gw)[0] == "".join(ANSWER)
    assert len(upstream.bodies(A)) == 2, "per_deployment bounds attempts per request"
    for _ in range(3):
        assert stream_all(gw)[0] == "".join(ANSWER)
    down_count = len(upstream.bodies(A))
    assert down_count <= 4, "the breaker opened after 3 failures"
    assert stream_all(gw)[0] == "".join(ANSWER)
    assert len(upstream.bodies(A)) == down_count, "while open, the failing deployment is skipped"
    upstream.defaults[A] = text_stream(["back"])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the cooldown passes; the next request probes and recovers
        if stream_all(gw)[0] == "back":
            break
    assert stream_all(gw)[0] == "back"


def test_stream_options_rejection_is_learned_once(upstream: FakeUpstream,
                                                  make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, only_a=True))
    upstream.enqueue(A, error_script(400, "unknown_parameter", "Unknown parameter: 'stream_options'.",
                                     param="stream_options"), text_stream(ANSWER), text_stream(ANSWER))
    assert stream_all(gw)[0] == "".join(ANSWER)
    assert stream_all(gw)[0] == "".join(ANSWER)
    sent = upstream.bodies(A)
    assert "stream_options" in sent[0] and "stream_options" not in sent[1] and "stream_options" not in sent[2]


def test_plain_json_answer_to_a_stream_is_re_emitted_and_learned(upstream: FakeUpstream,
                                                                 make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, only_a=True))
    body = {"id": "c1", "object": "chat.completion", "created": 1, "model": "model-a",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "buffered answer"},
                         "finish_reason": "stop"}], "usage": {"prompt_tokens": 2, "completion_tokens": 2}}
    upstream.enqueue(A, json_script(body), json_script(body))
    text, chunks = stream_all(gw)
    assert text == "buffered answer" and chunks[-1].choices[0].finish_reason == "stop"
    assert stream_all(gw)[0] == "buffered answer"
    assert upstream.bodies(A)[1].get("stream") is None, "the second request asks for a body directly"
    assert gw.sample("llm_gateway_tokens_total", model="m", provider="a", type="output") == 4


def test_a_json_error_body_to_a_stream_request_is_not_learned_as_no_streaming(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(two_deployments(upstream.base_url, only_a=True))
    upstream.enqueue(A, json_script({"error": {"message": "busy", "type": "server_error", "code": "server_error"}}),
                     text_stream(ANSWER), text_stream(ANSWER))
    assert stream_all(gw)[0] == "".join(ANSWER), "the in-band error in a 200 JSON body was retried"
    assert stream_all(gw)[0] == "".join(ANSWER)
    assert [b.get("stream") for b in upstream.bodies(A)] == [True, True, True], "still streaming"
