"""`POST /v1/messages` to `anthropic` deployments, driven by the official `anthropic` SDK: native, no
translation. The client gets what the scripted Anthropic upstream meant, field by field; the upstream
gets the client's request with the model rewritten, its betas and unknown fields, and never its key."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import anthropic
import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.fake_upstream import Close, FakeUpstream, Pause
from tests.harness import GatewayServer

GW_KEY = "gw-key-messages-0001"
UP_KEY = "sk-ant-upstream-SECRET"
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
FAST_RETRY = {"max_attempts": 4, "per_deployment": 2, "initial_backoff_ms": 1, "max_backoff_ms": 5}
SECRET = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
USER = [{"role": "user", "content": "Say hello"}]


def config(up: FakeUpstream, **extra: Any) -> Any:
    return parse_config({
        "server": {"keepalive_after_s": 30},
        "auth": {"keys": [{"name": "team-a", "key": GW_KEY}]},
        "providers": {
            "claude": {"type": "anthropic", "base_url": up.base_url, "api_key": UP_KEY, "timeouts": TIMEOUTS},
            "claude2": {"type": "anthropic", "base_url": f"{up.base_url}/v1", "api_key": UP_KEY,
                        "timeouts": TIMEOUTS, "headers": {"x-tag": "second"}},
        },
        "models": [
            {"name": "claude", "retry": FAST_RETRY, "deployments": [{"provider": "claude", "model": "claude-dep"}]},
            {"name": "claude-pair", "retry": {**FAST_RETRY, "per_deployment": 1},
             "deployments": [{"provider": "claude", "model": "claude-dep"},
                             {"provider": "claude2", "model": "claude-dep-2"}]},
            {"name": "claude-safe", "retry": FAST_RETRY, "redaction": "r",
             "deployments": [{"provider": "claude", "model": "claude-dep"}]},
        ],
        "redaction": {"profiles": {"r": {"rules": ["secrets"]}}},
        **extra,
    }, env={})


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(config(upstream))


def client(gw: GatewayServer, **kw: Any) -> anthropic.Anthropic:
    args: dict[str, Any] = {"api_key": GW_KEY, **kw}
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", max_retries=0, timeout=20, **args)


def full_answer() -> list[dict[str, Any]]:
    return [a.message_start(), a.ping(), *a.thinking_block(0, ["Let me ", "think."]),
            *a.text_block(1, ["Hel", "lo ", "there"]),
            *a.tool_block(2, "toolu_01", "get_weather", ['{"city":', ' "Paris"}']),
            a.message_delta("tool_use", {"output_tokens": 42}), a.message_stop()]


def test_stream_helper_gets_every_block_and_the_request_goes_native(upstream: FakeUpstream,
                                                                    gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream(full_answer(), split=9))
    tools = [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}}]
    with client(gw).messages.stream(model="claude", max_tokens=2048, messages=USER, tools=tools,
                                    system=[{"type": "text", "text": "Be brief."}],
                                    thinking={"type": "enabled", "budget_tokens": 1024},
                                    extra_body={"context_management": {"edits": []}, "brand_new_field": 7},
                                    extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"}) as s:
        events = [e.type for e in s]
        msg = s.get_final_message()
    assert events.count("message_start") == 1 and events[-1] == "message_stop"
    assert msg.id == "msg_01" and msg.model == a.MODEL and msg.stop_reason == "tool_use"
    thinking, text, tool = msg.content
    assert thinking.type == "thinking" and thinking.thinking == "Let me think."
    assert thinking.signature == "EqQBCgIYAhIM"
    assert text.type == "text" and text.text == "Hello there"
    assert tool.type == "tool_use" and tool.id == "toolu_01" and tool.name == "get_weather"
    assert tool.input == {"city": "Paris"}
    assert (msg.usage.input_tokens, msg.usage.output_tokens, msg.usage.cache_read_input_tokens) == (20, 42, 10)
    got = upstream.received[0]
    assert got.body["model"] == "claude-dep" and got.body["stream"] is True
    assert got.body["context_management"] == {"edits": []} and got.body["brand_new_field"] == 7
    assert got.body["thinking"] == {"type": "enabled", "budget_tokens": 1024} and got.body["tools"] == tools
    assert got.body["system"] == [{"type": "text", "text": "Be brief."}]
    assert got.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert got.headers["anthropic-version"] == client(gw).default_headers["anthropic-version"]  # the client's
    assert got.headers["x-api-key"] == UP_KEY and GW_KEY not in str(got.headers)
    assert gw.sample("llm_gateway_requests_total", api="messages", model="claude", stream="true", outcome="ok") == 1
    assert gw.sample("llm_gateway_time_to_first_token_seconds_count", api="messages", model="claude",
                     provider="claude") == 1
    assert gw.sample("llm_gateway_tokens_total", model="claude", provider="claude", type="input") == 30  # 20 + 10


def test_non_stream_answer_field_by_field(upstream: FakeUpstream, gw: GatewayServer) -> None:
    content = [{"type": "text", "text": "Hi!"},
               {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {"x": 1}}]
    upstream.enqueue(a.PATH, a.message_body(content, stop="tool_use"))
    raw = client(gw).messages.with_raw_response.create(model="claude", max_tokens=64, messages=USER)
    msg = raw.parse()
    assert raw.headers["x-gateway-deployment"] == "claude/claude-dep"
    assert msg.id == "msg_body" and msg.stop_reason == "tool_use" and msg.model == a.MODEL
    assert [b.model_dump(exclude_none=True) for b in msg.content] == content
    assert "stream" not in upstream.received[0].body and upstream.received[0].body["model"] == "claude-dep"


def test_a_tool_result_round_trip_goes_as_the_client_sent_it(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream([a.message_start(), *a.tool_block(0, "toolu_7", "ls", ['{"p": "/"}']),
                                       a.message_delta("tool_use"), a.message_stop()]),
                     a.text_stream(["two files"]))
    c = client(gw)
    with c.messages.stream(model="claude", max_tokens=64, messages=USER) as s:
        first = s.get_final_message()
    assert first.content[0].type == "tool_use" and first.content[0].input == {"p": "/"}
    turn2 = [*USER, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_7", "content": "a b"}]}]
    with c.messages.stream(model="claude", max_tokens=64, messages=turn2) as s:
        assert s.get_final_text() == "two files"
    sent = upstream.received[1].body["messages"]
    assert sent[1]["content"][0] == {"type": "tool_use", "id": "toolu_7", "name": "ls", "input": {"p": "/"}}
    assert sent[2] == turn2[2]


def test_beta_query_and_bearer_key_are_accepted(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.text_stream(["ok"]))
    c = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", auth_token=GW_KEY, max_retries=0, timeout=20)
    with c.beta.messages.stream(model="claude", max_tokens=64, messages=USER,
                                betas=["claude-code-20250219", "context-management-2025-06-27"]) as s:
        assert s.get_final_text() == "ok"
    got = upstream.received[0]
    assert got.headers["anthropic-beta"] == "claude-code-20250219,context-management-2025-06-27"
    assert "authorization" not in {k.lower() for k in got.headers} and got.query == {}


@pytest.mark.parametrize(("kw", "exc", "etype", "status"), [
    ({"api_key": "wrong-key"}, anthropic.AuthenticationError, "authentication_error", 401),
    ({"model": "no-such-model"}, anthropic.NotFoundError, "not_found_error", 404),
    ({"messages": "not an array"}, anthropic.BadRequestError, "invalid_request_error", 400),
])
def test_gateway_errors_are_anthropic_shaped(gw: GatewayServer, kw: dict[str, Any], exc: type[Exception],
                                             etype: str, status: int) -> None:
    c = client(gw, api_key=kw.pop("api_key", GW_KEY))
    args = {"model": "claude", "max_tokens": 64, "messages": USER, **kw}
    with pytest.raises(exc) as info:
        c.messages.create(**args)
    err = info.value
    assert isinstance(err, anthropic.APIStatusError) and err.status_code == status
    assert err.body["type"] == "error" and err.body["error"]["type"] == etype  # type: ignore[index]


def test_missing_key_is_401_in_anthropic_shape(gw: GatewayServer) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{gw.port}/v1/messages?beta=true", method="POST",
                                 data=orjson.dumps({"model": "claude", "max_tokens": 5, "messages": USER}))
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    body = orjson.loads(info.value.read())
    assert info.value.code == 401 and body["type"] == "error"
    assert body["error"]["type"] == "authentication_error"


def test_upstream_client_error_passes_through_with_its_type(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.error_body(400, "invalid_request_error", "max_tokens: 999999 > 64000"))
    with pytest.raises(anthropic.BadRequestError) as info:
        client(gw).messages.create(model="claude", max_tokens=999999, messages=USER, stream=True)
    assert "max_tokens: 999999 > 64000" in info.value.message
    assert info.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert len(upstream.received) == 1


def test_overloaded_in_the_stream_before_any_text_falls_back_invisibly(upstream: FakeUpstream,
                                                                      gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream([a.message_start("msg_failed"), a.ping(), a.text_block(0, [])[0],
                                       a.error_event("overloaded_error")]),
                     a.text_stream(["From ", "the fallback."], mid="msg_second"))
    with client(gw).messages.with_streaming_response.create(model="claude-pair", max_tokens=64, messages=USER,
                                                             stream=True) as raw:
        assert raw.headers["x-gateway-deployment"] == "claude2/claude-dep-2"
        body = b"".join(raw.iter_bytes())
    assert b"msg_failed" not in body and body.count(b"event: message_start") == 1
    assert b"overloaded" not in body
    assert [r.body["model"] for r in upstream.received] == ["claude-dep", "claude-dep-2"]
    assert upstream.received[1].headers["x-tag"] == "second"
    assert gw.sample("llm_gateway_upstream_attempts_total", model="claude-pair", deployment="claude/claude-dep",
                     outcome="inband_error") == 1


def test_529_is_retried_invisibly(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.error_body(529, "overloaded_error", "Overloaded", {"retry-after": "0"}),
                     a.text_stream(["after retry"]))
    with client(gw).messages.stream(model="claude", max_tokens=64, messages=USER) as s:
        assert s.get_final_text() == "after retry"
    assert len(upstream.received) == 2


def test_an_error_after_the_first_token_is_one_error_event_and_nothing_after(upstream: FakeUpstream,
                                                                             gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream([a.message_start(), *a.text_block(0, ["partial ", "text"])[:3],
                                       a.error_event("overloaded_error", f"Overloaded {UP_KEY}"),
                                       a.message_stop()]))
    with client(gw).messages.with_streaming_response.create(model="claude", max_tokens=64, messages=USER,
                                                             stream=True) as raw:
        body = b"".join(raw.iter_bytes())
    frames = [f for f in body.split(b"\n\n") if f]
    assert frames[-1].startswith(b"event: error\ndata: ") and body.count(b"event: error") == 1
    assert b"partial text" not in body and b'"partial "' in body and b'"text"' in body
    assert UP_KEY.encode() not in body and b"message_stop" not in body
    upstream.enqueue(a.PATH, a.stream([a.message_start(), *a.text_block(0, ["x"])[:2], a.error_event("api_error")]))
    with pytest.raises(anthropic.APIStatusError) as info, client(gw).messages.stream(
            model="claude", max_tokens=64, messages=USER) as s:
        s.get_final_text()
    assert info.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert gw.sample("llm_gateway_stream_failures_total", model="claude", deployment="claude/claude-dep",
                     reason="inband_error") >= 1


def test_a_dropped_connection_after_text_ends_with_an_error_event(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream([a.message_start(), *a.text_block(0, ["half"])[:2]], tail=[Close()]))
    with client(gw).messages.with_streaming_response.create(model="claude", max_tokens=64, messages=USER,
                                                             stream=True) as raw:
        body = b"".join(raw.iter_bytes())
    assert body.count(b"event: error") == 1 and body.rstrip().endswith(b"}")
    assert b'"type":"api_error"' in body


def test_a_secret_across_text_deltas_is_masked_whole(upstream: FakeUpstream, gw: GatewayServer) -> None:
    pieces = ["key: ", SECRET[:6], SECRET[6:15], SECRET[15:], " done"]
    upstream.enqueue(a.PATH, a.text_stream(pieces, split=5))
    with client(gw).messages.stream(model="claude-safe", max_tokens=64, messages=USER) as s:
        text = s.get_final_text()
    assert text == "key: [REDACTED:github_token] done"
    assert gw.sample("llm_gateway_redactions_total", rule="github_token") == 1
    upstream.enqueue(a.PATH, a.message_body([{"type": "text", "text": f"body {SECRET}"}]))
    msg = client(gw).messages.create(model="claude-safe", max_tokens=64, messages=USER)
    assert msg.content[0].text == "body [REDACTED:github_token]"  # type: ignore[union-attr]


def test_the_log_line_says_api_messages_and_no_secret(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.text_stream(["reply ", "text"]))
    with capture_logs() as logs:
        with client(gw).messages.stream(model="claude", max_tokens=64, messages=USER) as s:
            s.get_final_text()
        deadline = time.monotonic() + 10  # the line is written just after the response: bounded wait
        while not [e for e in logs if e["event"] == "request"] and time.monotonic() < deadline:
            time.sleep(0.01)
    (line,) = [e for e in logs if e["event"] == "request"]
    assert line["api"] == "messages" and line["outcome"] == "ok" and line["key"] == "team-a"
    assert line["input_tokens"] == 30 and line["output_tokens"] == 12 and line["ttft_ms"] is not None
    assert GW_KEY not in str(logs) and UP_KEY not in str(logs) and "reply" not in str(logs)


def test_a_body_to_a_stream_request_is_served_as_the_stream_it_would_have_been(upstream: FakeUpstream,
                                                                              gw: GatewayServer) -> None:
    content = [{"type": "thinking", "thinking": "hm", "signature": "sig"}, {"type": "text", "text": "Whole."}]
    upstream.enqueue(a.PATH, a.message_body(content), a.message_body(content))
    for _ in range(2):  # the second request is asked for a body: the deployment learned it (§4.6)
        with client(gw).messages.stream(model="claude", max_tokens=64, messages=USER) as s:
            msg = s.get_final_message()
        assert [b.model_dump(exclude_none=True) for b in msg.content] == content
        assert msg.id == "msg_body" and msg.usage.output_tokens == 12
    assert [r.body.get("stream") for r in upstream.received] == [True, None]


def test_keepalive_before_the_first_token_then_an_anthropic_error_event(upstream: FakeUpstream,
                                                                        make_gateway: Callable[..., GatewayServer]
                                                                        ) -> None:
    gw = make_gateway(config(upstream, server={"keepalive_after_s": 0.1}))
    upstream.enqueue(a.PATH, a.stream([a.message_start(), a.ping()], tail=[Pause(0.4), *(
        a.event(e) for e in [*a.text_block(0, ["late"]), a.message_delta(), a.message_stop()])]))
    with client(gw).messages.with_streaming_response.create(model="claude", max_tokens=64, messages=USER,
                                                             stream=True) as raw:
        body = b"".join(raw.iter_bytes())
    assert body.startswith(b": keepalive\n\n") and body.count(b"event: message_start") == 1
    assert b'"late"' in body and body.endswith(b'{"type":"message_stop"}\n\n')
    upstream.defaults[a.PATH] = a.error_body(503, "api_error", "down")
    upstream.enqueue(a.PATH, a.stream([a.message_start()], tail=[Pause(0.3), Close()]))
    with client(gw).messages.with_streaming_response.create(model="claude", max_tokens=64, messages=USER,
                                                             stream=True) as raw:
        body = b"".join(raw.iter_bytes())
    assert b": keepalive" in body and body.count(b"event: error\ndata: ") == 1 and b"message_start" not in body
    assert body.rstrip().endswith(b'}') and b'"type":"error"' in body
