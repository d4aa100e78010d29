"""Each attempt is recorded once, as what it was, when the loop drops one (docs/extensions.md, "Traces" and
"Attempts without an answer"): an empty answer dropped for the next deployment is its own span, ended
`empty_answer`, and one `llm_gateway_upstream_attempts_total` count (`inband_error`), never also `ok`; the
span of the attempt that answers carries that attempt's own usage and deployment, and the GenAI token usage
is the answer's, not the charges of the attempts that did not answer (those are the request's: its log line,
spend row and `llm_gateway_tokens_total` under their own provider). End to end with the official SDK, the
scripted upstream and a real OTLP receiver on loopback."""

from __future__ import annotations

from typing import Any

import openai

from gateway.config import parse_config
from tests.chat_scripts import USAGE, chunk, error_script, text_stream, usage_chunk
from tests.fake_upstream import Close, FakeUpstream, Pause, Script, sse
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

A, B = "/a/v1/chat/completions", "/b/v1/chat/completions"
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 30}
# an empty answer from a reasoning model: nothing to show, and 300 tokens billed
EMPTY_USAGE = {"prompt_tokens": 40, "completion_tokens": 300, "total_tokens": 340}
EMPTY = Script([sse(chunk({"role": "assistant", "content": ""})), sse(chunk({}, "stop")), Pause(0.05),
                sse(usage_chunk(EMPTY_USAGE)), b"data: [DONE]\n\n"])


def config(upstream: str, endpoint: str, hedge_after_ms: float = 0) -> Any:
    provider = {"type": "openai", "api_key": "k", "timeouts": TIMEOUTS}
    return parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"a": {**provider, "base_url": f"{upstream}/a/v1"},
                      "b": {**provider, "base_url": f"{upstream}/b/v1"}},
        "models": [{"name": "m", "hedge_after_ms": hedge_after_ms,
                    "retry": {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1},
                    "deployments": [{"provider": "a", "model": "model-a"}, {"provider": "b", "model": "model-b"}]}],
        "telemetry": {"otlp_endpoint": endpoint, "service_name": "gw-under-test"},
    }, env={})


def _served(servers: LoopThread, upstream: FakeUpstream, receiver: OtlpReceiver, answer_b: Script,
            answer_a: Script = EMPTY, hedge_after_ms: float = 0) -> GatewayServer:
    """One streamed request: `a` answers empty (and bills) unless told otherwise, `b` as scripted; the
    gateway stopped, its spans exported. The returned gateway's metrics stay readable."""
    upstream.enqueue(A, answer_a)
    upstream.enqueue(B, answer_b)
    gw = GatewayServer(config(upstream.base_url, receiver.endpoint, hedge_after_ms))
    servers.run(gw.start())
    try:
        client = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)
        try:
            for _ in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                    stream=True):
                pass
        except openai.APIStatusError:
            pass
        servers.run(wait_until(lambda: gw.sample("llm_gateway_requests_total", model="m") == 1))
        assert gw.app is not None and gw.app.tracing is not None
        assert gw.app.tracing.flush()
    finally:
        servers.run(gw.stop())
    return gw


def _attempts(receiver: OtlpReceiver) -> dict[str, ReceivedSpan]:
    spans = [s for s in receiver.spans if s.kind == "CLIENT"]
    by_deployment = {s.attributes["gateway.deployment"]: s for s in spans}
    assert len(by_deployment) == len(spans) == 2, "one span per attempt"
    return by_deployment


def test_an_empty_answer_dropped_is_its_own_span_and_the_answers_span_its_own_usage(
        servers: LoopThread, upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    gw = _served(servers, upstream, receiver, text_stream(["from ", "b"]))
    spans = _attempts(receiver)
    dropped, answered = spans["a/model-a"], spans["b/model-b"]
    assert dropped.attributes["gateway.attempt.outcome"] == "empty_answer"
    assert "gen_ai.usage.input_tokens" not in dropped.attributes
    assert answered.attributes["gateway.attempt.kind"] == "fallback"
    assert answered.attributes["gateway.attempt.outcome"] == "ok"
    assert answered.attributes["gen_ai.response.model"] == "model-b"
    # its own usage: the empty answer's 40 + 300 tokens are the request's charge, not this answer's
    assert (answered.attributes["gen_ai.usage.input_tokens"], answered.attributes["gen_ai.usage.output_tokens"]) == (
        USAGE["prompt_tokens"], USAGE["completion_tokens"])
    # one count per attempt: the empty answer is an in-band failure, never also `ok`
    attempts = "llm_gateway_upstream_attempts_total"
    assert gw.sample(attempts, deployment="a/model-a", outcome="inband_error") == 1
    assert gw.sample(attempts, deployment="a/model-a", outcome="ok") == 0
    assert gw.sample(attempts, deployment="b/model-b", outcome="ok") == 1
    assert gw.sample(attempts) == 2
    # the GenAI token usage is the answer's, as `llm_gateway_tokens_total` counts it under its provider
    for t, n in (("input", USAGE["prompt_tokens"]), ("output", USAGE["completion_tokens"])):
        assert gw.sample("gen_ai_client_token_usage_sum", gen_ai_token_type=t) == n
        assert gw.sample("gen_ai_client_token_usage_sum", gen_ai_response_model="model-b", gen_ai_token_type=t) == n
        assert gw.sample("llm_gateway_tokens_total", provider="b", type=t) == n


def test_an_empty_answer_then_a_failure_leaves_no_span_that_answered(
        servers: LoopThread, upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    """No attempt answered: the dropped one is not made the request's winner at its end."""
    _served(servers, upstream, receiver, error_script(500, None, etype="server_error"))
    spans = _attempts(receiver)
    assert spans["a/model-a"].attributes["gateway.attempt.outcome"] == "empty_answer"
    assert spans["b/model-b"].attributes["gateway.attempt.outcome"] == "failed"
    assert "gen_ai.response.model" not in spans["a/model-a"].attributes
    (server,) = [s for s in receiver.spans if s.kind == "SERVER"]
    assert server.attributes["http.response.status_code"] == 502
    assert "gen_ai.response.model" not in server.attributes


def test_a_hedge_racer_that_failed_before_the_other_won_is_counted(
        servers: LoopThread, upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    """The primary is slow (the hedge starts after 100 ms), then cut before its first token, while the
    hedge still thinks; the hedge answers. The primary's failure is an attempt like any other: counted by
    its kind, and its span `failed`."""
    role = sse(chunk({"role": "assistant", "content": ""}))
    cut = Script([role, Pause(0.3), Close()])
    slow = Script([role, Pause(1.0), *text_stream(["late"]).parts])
    gw = _served(servers, upstream, receiver, slow, answer_a=cut, hedge_after_ms=100)
    attempts = "llm_gateway_upstream_attempts_total"
    assert gw.sample(attempts, deployment="a/model-a", outcome="inband_error") == 1  # early_eof
    assert gw.sample(attempts, deployment="b/model-b", outcome="ok") == 1
    assert gw.sample(attempts) == 2
    assert gw.sample("llm_gateway_hedges_total", winner="hedge") == 1
    spans = _attempts(receiver)
    assert spans["a/model-a"].attributes["gateway.attempt.outcome"] == "failed"
    assert spans["b/model-b"].attributes["gateway.attempt.kind"] == "hedge"
    assert spans["b/model-b"].attributes["gateway.attempt.outcome"] == "ok"
