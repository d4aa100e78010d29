"""OpenTelemetry traces end to end (CONTRACT §8): the official openai SDK sends a W3C `traceparent`, the
gateway exports over OTLP/HTTP to a real receiver on loopback (decoded with opentelemetry-proto), and the
scripted upstream records the `traceparent` each attempt carried."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import openai
import pytest

from gateway.config import parse_config
from gateway.config.types import TelemetryConfig
from tests.chat_scripts import USAGE, error_script, text_stream
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.ports import free_port

A, B = "/a/v1/chat/completions", "/b/v1/chat/completions"
TRACE_ID, CLIENT_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
GATEWAY_KEY, PROVIDER_KEY, PROMPT = "sk-gw-team-SECRET-7f3a", "sk-upstream-SECRET-91b2", "the confidential prompt text"


def config(upstream: str, endpoint: str, **telemetry: Any) -> Any:
    provider = {"type": "openai", "api_key": PROVIDER_KEY,
                "timeouts": {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 30}}
    return parse_config({
        "auth": {"keys": [{"name": "team-a", "key": GATEWAY_KEY}]},
        "providers": {"a": {**provider, "base_url": f"{upstream}/a/v1"},
                      "b": {**provider, "base_url": f"{upstream}/b/v1"}},
        "models": [{"name": "m", "retry": {"per_deployment": 1, "initial_backoff_ms": 1},
                    "deployments": [{"provider": "a", "model": "model-a"},
                                    {"provider": "b", "model": "model-b", "price": {"input": 1, "output": 2}}]}],
        "telemetry": {"otlp_endpoint": endpoint, "service_name": "gw-under-test", **telemetry},
    }, env={})


def _stream(gw: GatewayServer, headers: dict[str, str] | None = None) -> str:
    client = openai.OpenAI(base_url=gw.base_url, api_key=GATEWAY_KEY, max_retries=0, timeout=20)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}],
                                            stream=True, extra_headers=headers or {})
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def _finished(servers: LoopThread, gw: GatewayServer, n: int) -> None:
    """The request's spans end with its metrics, in one step after the last byte: wait for the count."""
    servers.run(wait_until(lambda: gw.sample("llm_gateway_requests_total", model="m") == n))


def test_a_streamed_request_is_one_trace_from_the_client_through_every_attempt_to_the_upstream(
        servers: LoopThread, upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    upstream.enqueue(A, error_script(500, None, etype="server_error"))
    upstream.enqueue(B, text_stream(["Hello ", "world"]))
    gw = GatewayServer(config(upstream.base_url, receiver.endpoint))
    servers.run(gw.start())
    try:
        assert _stream(gw, {"traceparent": TRACEPARENT, "tracestate": "vendor=abc"}) == "Hello world"
        _finished(servers, gw, 1)
        assert gw.app is not None and gw.app.tracing is not None
        assert gw.app.tracing.flush()
    finally:
        servers.run(gw.stop())

    spans = receiver.of_trace(TRACE_ID)
    assert len(spans) == len(receiver.spans) == 3  # one trace id end to end: nothing else was exported
    (server,) = [s for s in spans if s.kind == "SERVER"]
    attempts = sorted((s for s in spans if s.kind == "CLIENT"), key=lambda s: s.attributes["gateway.deployment"])
    assert server.parent_span_id == CLIENT_SPAN and server.service_name == "gw-under-test"
    assert server.name == "chat m"
    assert server.attributes | {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.response.model": "model-b",
        "gen_ai.provider.name": "openai", "gen_ai.usage.input_tokens": USAGE["prompt_tokens"],
        "gen_ai.usage.output_tokens": USAGE["completion_tokens"], "gateway.model": "m", "gateway.key": "team-a",
        "gateway.deployment": "b/model-b", "gateway.attempts": 2, "gateway.outcome": "ok",
        "http.response.status_code": 200, "gateway.stream": True} == server.attributes
    assert server.events == ["first_token", "commit", "stream_end"]
    # the gateway's own share of the first token (docs/overhead.md), as its histogram has it
    overhead_s = gw.sample("llm_gateway_overhead_seconds_sum", api="chat", model="m")
    assert overhead_s > 0 and server.attributes["gateway.overhead_ms"] == round(overhead_s * 1000, 3)
    assert [s.parent_span_id for s in attempts] == [server.span_id] * 2  # one span per attempt
    first, second = attempts
    assert first.name == "chat model-a" and second.name == "chat model-b"
    assert first.attributes["gateway.attempt.kind"] == "first"
    assert first.attributes["gateway.attempt.outcome"] == "failed"
    assert first.attributes["error.type"] == "http_5xx" and first.attributes["http.response.status_code"] == 500
    assert second.attributes | {"gateway.attempt.kind": "fallback", "gateway.attempt.outcome": "ok",
                                "gen_ai.request.model": "model-b", "gen_ai.response.model": "model-b",
                                "gen_ai.usage.output_tokens": 7} == second.attributes
    assert second.events == ["first_token"]
    # each upstream request names its own attempt's span as its parent; the client's tracestate goes along
    sent = {r.path: r.headers for r in upstream.received}
    assert sent[A]["traceparent"] == f"00-{TRACE_ID}-{first.span_id}-01"
    assert sent[B]["traceparent"] == f"00-{TRACE_ID}-{second.span_id}-01"
    assert sent[B]["tracestate"] == "vendor=abc"
    exported = b"".join(receiver.raw)
    for secret in (GATEWAY_KEY, PROVIDER_KEY, PROMPT, "Hello world"):
        assert secret.encode() not in exported, secret


def test_without_a_client_traceparent_the_gateway_starts_the_trace(
        servers: LoopThread, upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    upstream.enqueue(A, text_stream(["ok"]))
    gw = GatewayServer(config(upstream.base_url, receiver.endpoint))
    servers.run(gw.start())
    try:
        assert _stream(gw) == "ok"
        _finished(servers, gw, 1)
        assert gw.app is not None and gw.app.tracing is not None and gw.app.tracing.flush()
    finally:
        servers.run(gw.stop())
    by_kind: dict[str, ReceivedSpan] = {s.kind: s for s in receiver.spans}
    assert set(by_kind) == {"SERVER", "CLIENT"} and by_kind["SERVER"].parent_span_id == ""
    assert by_kind["CLIENT"].trace_id == by_kind["SERVER"].trace_id
    (sent,) = upstream.received
    version, trace_id, parent, flags = sent.headers["traceparent"].split("-")
    assert (version, trace_id, parent) == ("00", by_kind["SERVER"].trace_id, by_kind["CLIENT"].span_id)
    assert int(flags, 16) & 1  # sampled (the SDK may also set W3C level 2's random-trace-id bit)


def test_a_collector_that_is_down_fails_no_request_and_the_dropped_spans_are_counted(
        servers: LoopThread, upstream: FakeUpstream) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    gw = GatewayServer(config(upstream.base_url, dead, export_timeout_s=0.2))
    servers.run(gw.start())
    try:
        for n in range(1, 4):
            upstream.enqueue(A, text_stream(["still ", "served"]))
            assert _stream(gw, {"traceparent": TRACEPARENT}) == "still served"
            _finished(servers, gw, n)
        assert gw.app is not None and gw.app.tracing is not None
        assert gw.app.tracing.flush() is False
        assert gw.sample("llm_gateway_trace_spans_dropped_total") == 6  # a server and an attempt span each
        assert "llm_gateway_trace_spans_dropped_total 6.0" in gw.scrape()
    finally:
        servers.run(gw.stop())


def test_a_full_export_queue_drops_and_counts_instead_of_waiting(
        servers: LoopThread, upstream: FakeUpstream) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    gw = GatewayServer(config(upstream.base_url, dead, export_timeout_s=0.2, max_queue_size=1))
    servers.run(gw.start())
    try:
        upstream.enqueue(A, text_stream(["served"]))
        assert _stream(gw) == "served"
        _finished(servers, gw, 1)
        # two spans finished into a queue of one: one was dropped at once, without an export
        assert gw.sample("llm_gateway_trace_spans_dropped_total") >= 1
    finally:
        servers.run(gw.stop())


def test_tracing_is_off_unless_configured(servers: LoopThread, upstream: FakeUpstream) -> None:
    cfg = config(upstream.base_url, "http://127.0.0.1:1")
    off = GatewayServer(replace(cfg, telemetry=TelemetryConfig()))
    assert not off.config.telemetry.enabled
    servers.run(off.start())
    try:
        assert off.app is not None and off.app.tracing is None
        upstream.enqueue(A, text_stream(["untraced"]))
        assert _stream(off, {"traceparent": TRACEPARENT}) == "untraced"
        (sent,) = upstream.received
        assert "traceparent" not in sent.headers  # nothing is continued or invented when off
        assert off.sample("llm_gateway_trace_spans_dropped_total") == 0
    finally:
        servers.run(off.stop())


@pytest.mark.parametrize("respect", [True, False])
def test_whether_a_client_unsampled_traceparent_decides_is_a_setting(
        servers: LoopThread, upstream: FakeUpstream, receiver: OtlpReceiver, respect: bool) -> None:
    upstream.enqueue(A, text_stream(["ok"]))
    gw = GatewayServer(config(upstream.base_url, receiver.endpoint, respect_parent_sampling=respect))
    servers.run(gw.start())
    try:
        assert _stream(gw, {"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-00"}) == "ok"  # the client: not sampled
        _finished(servers, gw, 1)
        assert gw.app is not None and gw.app.tracing is not None and gw.app.tracing.flush()
    finally:
        servers.run(gw.stop())
    if respect:  # OTel's parent-based default: the client's flag decides, nothing is recorded or announced
        assert receiver.spans == [] and "traceparent" not in upstream.received[0].headers
        return
    server = next(s for s in receiver.spans if s.kind == "SERVER")  # the gateway's own sampler decided
    assert (server.trace_id, server.parent_span_id) == (TRACE_ID, CLIENT_SPAN), "the client's trace, continued"


def test_the_server_span_carries_the_session_hashed_and_how_affinity_served_it(
        servers: LoopThread, upstream: FakeUpstream, receiver: OtlpReceiver) -> None:
    session = "0f3c2a5e-claude-code-session-SECRET"
    upstream.defaults[A] = upstream.defaults[B] = text_stream(["ok"])
    base = config(upstream.base_url, receiver.endpoint)
    model = replace(base.models["m"], affinity="session")
    gw = GatewayServer(replace(base, models=MappingProxyType({"m": model})))
    servers.run(gw.start())
    try:
        assert _stream(gw, {"X-Claude-Code-Session-Id": session}) == "ok"
        assert _stream(gw, {"X-Claude-Code-Session-Id": session}) == "ok"
        _finished(servers, gw, 2)
        assert gw.app is not None and gw.app.tracing is not None and gw.app.tracing.flush()
    finally:
        servers.run(gw.stop())
    servers_ = [s for s in receiver.spans if s.kind == "SERVER"]
    assert [s.attributes["gateway.affinity"] for s in servers_] == ["new", "kept"]
    hashes = {s.attributes["gateway.session_hash"] for s in servers_}
    assert len(hashes) == 1 and len(next(iter(hashes))) == 32
    assert session.encode() not in b"".join(receiver.raw) and b"SECRET" not in b"".join(receiver.raw)
