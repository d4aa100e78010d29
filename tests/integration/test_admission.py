"""Admission and the final answer, with the official SDKs over loopback sockets (issues #27 and #28).

- a model outside the key's list answers exactly as an unknown one, on every API, and the log line says
  which: test_a_model_outside_the_key_list_answers_exactly_as_an_unknown_one,
  test_the_sdks_see_one_not_found_for_both
- the log line of a 404 (not allowed, unknown) and of a 502 names who asked what, where it failed and
  why: test_the_log_line_names_the_key_the_requested_model_the_deployment_and_the_reason
- every attempt rate-limited in-band is a 429 with the upstream's Retry-After, at the SDKs' default
  retries: test_an_in_band_rate_limit_on_every_attempt_is_a_429_with_the_upstreams_retry_after,
  test_a_messages_in_band_rate_limit_is_anthropics_rate_limit_error
- every attempt timed out is a 504: test_every_attempt_timed_out_is_a_504_not_multiplied_by_the_sdk
- after keep-alive headers, the same class as one error event: test_after_keepalive_the_class_is_one_error_event
- count_tokens is limited, logged and counted: test_count_tokens_counts_against_rpm_and_is_logged_and_counted
- forward_headers governs anthropic-version and anthropic-beta: test_forward_headers_governs_the_anthropic_headers
"""

from __future__ import annotations

import http.client
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.chat_scripts import error_script
from tests.fake_upstream import FakeUpstream, Gate, Script, json_script, sse
from tests.harness import GatewayServer

KEY, LIMITED = "gw-key-team-0001", "gw-key-limited-0001"
CHAT, SLOW, OAI2 = "/oai/v1/chat/completions", "/slow/v1/chat/completions", "/oai2/v1/chat/completions"
ANT = "/ant/v1/messages"
HI = [{"role": "user", "content": "hi"}]
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 30}
FAST = {"max_attempts": 4, "per_deployment": 2, "initial_backoff_ms": 1, "max_backoff_ms": 5}
PATIENT = {"max_attempts": 3, "per_deployment": 3, "initial_backoff_ms": 1, "max_backoff_ms": 1000}
RATE_LIMITED = {"error": {"message": "Rate limit reached for requests", "type": "requests",
                          "code": "rate_limit_exceeded"}}


def config(url: str, *, keepalive_s: float = 30, claude: dict[str, Any] | None = None) -> Any:
    def provider(path: str, **kw: Any) -> dict[str, Any]:
        return {"type": "openai", "base_url": f"{url}{path}", "api_key": "sk-oai-SECRET", "timeouts": TIMEOUTS, **kw}
    return parse_config({
        "server": {"keepalive_after_s": keepalive_s},
        "auth": {"keys": [{"name": "team", "key": KEY, "models": ["m", "rl", "pair", "slow", "claude"]},
                          {"name": "limited", "key": LIMITED, "rpm": 1}]},
        "providers": {
            "oai": provider("/oai/v1"), "oai2": provider("/oai2/v1"),
            "slow": provider("/slow/v1", timeouts={**TIMEOUTS, "first_token_s": 0.3}),
            "claude": {"type": "anthropic", "base_url": f"{url}/ant", "api_key": "sk-ant-SECRET",
                       "timeouts": TIMEOUTS, **(claude or {})},
        },
        "models": [
            {"name": "m", "retry": FAST, "deployments": [{"provider": "oai", "model": "x"}]},
            {"name": "hidden", "deployments": [{"provider": "oai", "model": "y"}]},
            {"name": "rl", "retry": PATIENT, "deployments": [{"provider": "oai", "model": "x"}]},
            {"name": "pair", "retry": FAST, "deployments": [{"provider": "oai", "model": "x"},
                                                            {"provider": "oai2", "model": "x2"}]},
            {"name": "slow", "retry": FAST, "deployments": [{"provider": "slow", "model": "s1"},
                                                            {"provider": "slow", "model": "s2"}]},
            {"name": "claude", "retry": PATIENT, "deployments": [{"provider": "claude", "model": "claude-dep"}]},
        ],
    }, env={})


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(config(upstream.base_url))


def oai(gw: GatewayServer, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, timeout=20)  # the SDK's default retries


def claude(gw: GatewayServer, key: str = KEY, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key=key, timeout=20, **kw)


def request_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "request"]


ROUTES = [("/v1/chat/completions", {"messages": HI}), ("/v1/responses", {"input": "hi"}),
          ("/v1/embeddings", {"input": "hi"}), ("/v1/messages", {"max_tokens": 5, "messages": HI}),
          ("/v1/messages/count_tokens", {"messages": HI})]


@pytest.mark.parametrize(("path", "body"), ROUTES)
def test_a_model_outside_the_key_list_answers_exactly_as_an_unknown_one(
        upstream: FakeUpstream, gw: GatewayServer, path: str, body: dict[str, Any]) -> None:
    def ask(name: str) -> tuple[int, bytes, list[str]]:
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=20)
        conn.request("POST", path, orjson.dumps({"model": name, **body}),
                     {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        r = conn.getresponse()
        content = r.read()
        conn.close()
        names = sorted({h.lower() for h in r.headers} - {"x-request-id", "date"})
        return r.status, content.replace(name.encode(), b"NAME"), names

    with capture_logs() as logs:
        hidden, unknown = ask("hidden"), ask("absent")
    assert hidden == unknown, "a name the key may not use is told apart from one that does not exist"
    status, content, _ = hidden
    expected = (b'{"type":"error","error":{"type":"not_found_error"' if "messages" in path
                else b'{"error":{"message":"the model \'NAME\' does not exist","type":"invalid_request_error"')
    assert status == 404 and content.startswith(expected)
    got = [(e["status"], e["reason"], e["requested_model"], e["key"]) for e in request_lines(logs)]
    assert got == [(404, "model_not_allowed", "hidden", "team"), (404, "model_not_found", "absent", "team")]
    assert upstream.received == []


def test_the_sdks_see_one_not_found_for_both(gw: GatewayServer) -> None:
    for name in ("hidden", "absent"):
        with pytest.raises(openai.NotFoundError) as chat:
            oai(gw).chat.completions.create(model=name, messages=HI)  # type: ignore[arg-type]
        assert chat.value.code == "model_not_found"
        with pytest.raises(openai.NotFoundError):
            oai(gw).models.retrieve(name)
        with pytest.raises(anthropic.NotFoundError) as msg:
            claude(gw).messages.create(model=name, max_tokens=5, messages=HI)  # type: ignore[arg-type]
        assert msg.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
        with pytest.raises(anthropic.NotFoundError):
            claude(gw).messages.count_tokens(model=name, messages=HI)  # type: ignore[arg-type]
    assert [m.id for m in oai(gw).models.list()] == ["m", "rl", "pair", "slow", "claude"]


def test_the_log_line_names_the_key_the_requested_model_the_deployment_and_the_reason(
        upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.defaults[CHAT] = error_script(503, None, "busy", "server_error")
    long_name = "n" * 300
    with capture_logs() as logs:
        for name in ("hidden", long_name):
            with pytest.raises(openai.NotFoundError):
                oai(gw).chat.completions.create(model=name, messages=HI)  # type: ignore[arg-type]
        with pytest.raises(openai.InternalServerError) as failed:
            oai(gw).chat.completions.create(model="m", messages=HI)  # type: ignore[arg-type]
    assert failed.value.status_code == 502 and len(upstream.bodies(CHAT)) == 2, "our 2 attempts, no SDK retry"
    fields = ("status", "key", "requested_model", "model", "deployment", "reason", "outcome")
    assert [tuple(e[f] for f in fields) for e in request_lines(logs)] == [
        (404, "team", "hidden", "(unresolved)", None, "model_not_allowed", "auth_error"),
        (404, "team", "n" * 128, "(unresolved)", None, "model_not_found", "client_error"),
        (502, "team", "m", "m", "oai/x", "http_5xx", "upstream_error"),
    ]
    # the valid key is the metric label on every answer, a 4xx included
    for outcome in ("auth_error", "client_error"):
        assert gw.sample("llm_gateway_requests_total", api="chat", model="unknown", outcome=outcome, key="team") == 1
    assert gw.sample("llm_gateway_requests_total", api="chat", model="m", outcome="upstream_error", key="team") == 1


def test_a_refused_requests_log_line_carries_its_session_as_a_served_one_does(
        upstream: FakeUpstream, gw: GatewayServer) -> None:
    """A session's 404 (a misnamed model) is tied to its other requests in the logs: `session_hash` is set
    once the body is read, before the model is resolved."""
    upstream.defaults[CHAT] = json_script({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
                                           "choices": [{"index": 0, "finish_reason": "stop",
                                                        "message": {"role": "assistant", "content": "ok"}}]})
    session = {"X-Claude-Code-Session-Id": "session-404"}
    with capture_logs() as logs:
        with pytest.raises(openai.NotFoundError):
            oai(gw).chat.completions.create(model="absent", messages=HI, extra_headers=session)  # type: ignore[arg-type]
        oai(gw).chat.completions.create(model="m", messages=HI, extra_headers=session)  # type: ignore[arg-type]
    hashes = [e["session_hash"] for e in request_lines(logs)]
    assert len(hashes) == 2 and hashes[0] is not None and hashes[0] == hashes[1], hashes
    assert "session-404" not in str(logs)


def _inband_rate_limit(headers: dict[str, str]) -> Script:
    return Script([sse({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "x",
                        "choices": [{"index": 0, "delta": {"role": "assistant"}}]}), sse(RATE_LIMITED)],
                  headers={"Content-Type": "text/event-stream", **headers})


@pytest.mark.parametrize(("model", "wait", "calls", "retry_after"), [
    ("rl", {"retry-after-ms": "30"}, {CHAT: 3}, "1"),  # retried on the one deployment, honouring the wait
    ("pair", {"Retry-After": "7"}, {CHAT: 1, OAI2: 1}, "7"),  # longer than max_backoff: next deployment at once
])
def test_an_in_band_rate_limit_on_every_attempt_is_a_429_with_the_upstreams_retry_after(
        upstream: FakeUpstream, gw: GatewayServer, model: str, wait: dict[str, str], calls: dict[str, int],
        retry_after: str) -> None:
    upstream.defaults[CHAT] = upstream.defaults[OAI2] = _inband_rate_limit(wait)
    with pytest.raises(openai.RateLimitError) as info:
        list(oai(gw).chat.completions.create(model=model, messages=HI, stream=True))  # type: ignore[arg-type]
    err = info.value
    assert (err.status_code, err.code, err.type) == (429, "rate_limit_exceeded", "rate_limit_error")
    assert err.response.headers["retry-after"] == retry_after
    assert err.response.headers["x-should-retry"] == "false", "the SDK's own retries stay off"
    assert {path: len(upstream.bodies(path)) for path in calls} == calls, "the gateway's retries, no more"
    assert gw.sample("llm_gateway_upstream_attempts_total", model=model, outcome="inband_error") == sum(calls.values())


def test_a_messages_in_band_rate_limit_is_anthropics_rate_limit_error(upstream: FakeUpstream,
                                                                       gw: GatewayServer) -> None:
    script = a.stream([a.message_start(), a.error_event("rate_limit_error", "Number of requests too high")])
    script.headers = {**script.headers, "retry-after-ms": "30"}
    upstream.defaults[ANT] = script
    stream = claude(gw).messages.stream(model="claude", max_tokens=5, messages=HI)  # type: ignore[arg-type]
    with pytest.raises(anthropic.RateLimitError) as info, stream as s:
        s.get_final_text()
    assert info.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert info.value.response.headers["retry-after"] == "1"  # whole seconds, rounded up
    assert len([r for r in upstream.received if r.path == ANT]) == 3, "the model's 3 attempts, no SDK retry"


def test_every_attempt_timed_out_is_a_504_not_multiplied_by_the_sdk(upstream: FakeUpstream,
                                                                    gw: GatewayServer) -> None:
    upstream.defaults[SLOW] = Script(silent=True)
    with capture_logs() as logs, pytest.raises(openai.InternalServerError) as info:
        list(oai(gw).chat.completions.create(model="slow", messages=HI, stream=True))  # type: ignore[arg-type]
    err = info.value
    assert (err.status_code, err.code) == (504, "upstream_timeout")
    assert err.response.headers["x-should-retry"] == "false"
    assert [b["model"] for b in upstream.bodies(SLOW)] == ["s1", "s2"], "one attempt per deployment, no SDK retry"
    (line,) = request_lines(logs)
    assert (line["deployment"], line["reason"], line["outcome"]) == ("slow/s2", "first_token_timeout", "timeout")


def test_after_keepalive_the_class_is_one_error_event(upstream: FakeUpstream,
                                                      make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, keepalive_s=0.05))
    gate = Gate()
    script = _inband_rate_limit({"retry-after-ms": "1"})
    script.parts.insert(0, gate)
    upstream.defaults[CHAT] = script
    stream = oai(gw).chat.completions.create(model="m", messages=HI, stream=True)  # type: ignore[arg-type]
    # the SDK returned: the gateway committed to a 200 while the upstream was still held at the gate
    assert stream.response.status_code == 200 and not gate.opened.is_set()
    gate.opened.set()
    with pytest.raises(openai.APIError) as info:
        list(stream)
    assert info.value.code == "rate_limit_exceeded" and info.value.type == "rate_limit_error"
    assert len(upstream.bodies(CHAT)) == 2


def _series(gw: GatewayServer, name: str, **labels: str) -> list[float]:
    assert gw.metrics.registry is not None
    return [s.value for fam in gw.metrics.registry.collect() for s in fam.samples
            if s.name == name and labels.items() <= s.labels.items()]


def test_count_tokens_counts_against_rpm_and_is_logged_and_counted(upstream: FakeUpstream,
                                                                   gw: GatewayServer) -> None:
    labels = {"api": "count_tokens", "model": "claude", "stream": "false", "key": "limited"}
    assert _series(gw, "llm_gateway_requests_total", **labels, outcome="ok") == [0.0], "pre-initialised at 0"
    upstream.enqueue("/ant/v1/messages/count_tokens", json_script({"input_tokens": 12}))
    c = claude(gw, LIMITED, max_retries=0)  # the SDK would wait out our Retry-After (the rest of the minute)
    with capture_logs() as logs:
        assert c.messages.count_tokens(model="claude", messages=HI).input_tokens == 12
        with pytest.raises(anthropic.RateLimitError) as info:
            c.messages.count_tokens(model="claude", messages=HI)
    assert info.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert info.value.response.headers["retry-after"]
    assert len(upstream.received) == 1, "the refused count never reached the provider"
    assert gw.sample("llm_gateway_requests_total", **labels, outcome="ok") == 1
    assert gw.sample("llm_gateway_requests_total", **labels, outcome="rate_limited") == 1
    assert gw.sample("llm_gateway_rate_limited_total", key="limited", limit="rpm") == 1
    got = [(e["api"], e["key"], e["status"], e["deployment"]) for e in request_lines(logs)]
    assert got == [("count_tokens", "limited", 200, "claude/claude-dep"), ("count_tokens", "limited", 429, None)]


@pytest.mark.parametrize(("forward", "version", "beta"), [
    (None, "2099-01-01", "context-1m-2025-08-07"),  # the default: the client's own, as SDKs and Claude Code need
    (["x-request-id"], "2023-06-01", None),  # left out: the configured version, no client betas
    (["anthropic-beta"], "2023-06-01", "context-1m-2025-08-07"),
])
def test_forward_headers_governs_the_anthropic_headers(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], forward: list[str] | None,
        version: str, beta: str | None) -> None:
    gw = make_gateway(config(upstream.base_url, claude={"forward_headers": forward} if forward else {}))
    upstream.enqueue(ANT, a.message_body([{"type": "text", "text": "ok"}]))
    upstream.enqueue(ANT, a.text_stream(["ok"]))
    upstream.enqueue("/ant/v1/messages/count_tokens", json_script({"input_tokens": 3}))
    sent = {"anthropic-version": "2099-01-01", "anthropic-beta": "context-1m-2025-08-07"}
    c = claude(gw)
    c.messages.create(model="claude", max_tokens=5, messages=HI, extra_headers=sent)
    with c.messages.stream(model="claude", max_tokens=5, messages=HI, extra_headers=sent) as s:
        assert s.get_final_text() == "ok"
    c.messages.count_tokens(model="claude", messages=HI, extra_headers=sent)
    assert len(upstream.received) == 3
    for got in upstream.received:
        assert (got.headers.get("anthropic-version"), got.headers.get("anthropic-beta")) == (version, beta), got.path


def test_an_anthropic_client_lists_and_retrieves_models_in_anthropics_shape(gw: GatewayServer) -> None:
    c = claude(gw)  # the key in x-api-key, anthropic-version set: as the Anthropic SDKs send it
    page = c.models.list()
    assert [m.id for m in page.data] == ["m", "rl", "pair", "slow", "claude"]
    assert {m.type for m in page.data} == {"model"} and page.has_more is False
    assert (page.first_id, page.last_id) == ("m", "claude")
    got = c.models.retrieve("claude")
    assert (got.type, got.id, got.display_name) == ("model", "claude", "claude")
    for name in ("hidden", "absent"):
        with pytest.raises(anthropic.NotFoundError) as info:
            c.models.retrieve(name)
        assert info.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.AuthenticationError):
        claude(gw, "wrong-key").models.list()
