"""`POST /v1/messages` to OpenAI-compatible deployments, driven by the official `anthropic` SDK: the request
translated to Chat Completions, the chat stream and body back to Anthropic's events and Message, and a
fallback between an Anthropic and an OpenAI deployment (either way) that leaves one clean lifecycle."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.chat_scripts import MODEL as CHAT_MODEL
from tests.chat_scripts import chunk, completion, error_script, text_stream, usage_chunk
from tests.fake_upstream import FakeUpstream, Script, sse
from tests.harness import GatewayServer

OPENAI_PATH = "/v1/chat/completions"
AZURE_PATH = "/openai/deployments/gpt4o-eu/chat/completions"
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
RETRY = {"max_attempts": 4, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5}
USER = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {
            "oai": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": "sk-oai-SECRET",
                    "timeouts": TIMEOUTS},
            "az": {"type": "azure", "base_url": upstream.base_url, "api_key": "az-SECRET",
                   "api_version": "2024-10-21", "timeouts": TIMEOUTS},
            "claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET",
                       "timeouts": TIMEOUTS},
        },
        "models": [
            {"name": "gpt", "retry": RETRY, "deployments": [{"provider": "oai", "model": "gpt-dep"}]},
            {"name": "azure", "retry": RETRY, "deployments": [{"provider": "az", "model": "gpt4o-eu"}]},
            {"name": "claude-then-gpt", "retry": RETRY, "deployments": [
                {"provider": "claude", "model": "claude-dep"}, {"provider": "oai", "model": "gpt-dep"}]},
            {"name": "gpt-then-claude", "retry": RETRY, "deployments": [
                {"provider": "oai", "model": "gpt-dep"}, {"provider": "claude", "model": "claude-dep"}]},
        ],
    }, env={}))


def client(gw: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="any", max_retries=0, timeout=20)


def thinking_text_tools() -> Script:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    parts = [chunk({"role": "assistant", "content": ""}), chunk({"reasoning_content": "Need "}),
             chunk({"reasoning_content": "the tool."}), chunk({"content": "Let me "}), chunk({"content": "check."}),
             chunk({"tool_calls": [call]}),
             chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
             chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
             chunk({"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
                                    "function": {"name": "get_time", "arguments": "{}"}}]}),
             chunk({}, "tool_calls"), usage_chunk()]
    return Script([*(sse(p) for p in parts), b"data: [DONE]\n\n"], split=11)


def test_stream_of_thinking_text_and_tools_field_by_field(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(OPENAI_PATH, thinking_text_tools())
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}},
             {"name": "get_time", "input_schema": {"type": "object"}},
             {"type": "web_search_20250305", "name": "web_search"}]
    with client(gw).messages.stream(model="gpt", max_tokens=300, messages=USER, tools=tools,  # type: ignore[arg-type]
                                    system="Be brief.", stop_sequences=["END"], extra_body={"temperature": 0.5},
                                    thinking={"type": "enabled", "budget_tokens": 1024},
                                    tool_choice={"type": "auto", "disable_parallel_tool_use": True}) as s:
        kinds = [e.type for e in s]
        msg = s.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and kinds.count("message_start") == 1
    assert msg.id == "msg_chatcmpl-up" and msg.model == CHAT_MODEL and msg.stop_reason == "tool_use"
    assert [b.type for b in msg.content] == ["thinking", "text", "tool_use", "tool_use"]
    thinking, text, weather, clock = msg.content
    assert thinking.thinking == "Need the tool." and text.text == "Let me check."  # type: ignore[union-attr]
    assert (weather.id, weather.name, weather.input) == ("call_1", "get_weather", {"city": "Paris"})  # type: ignore[union-attr]
    assert (clock.id, clock.name, clock.input) == ("call_2", "get_time", {})  # type: ignore[union-attr]
    # usage: 11 prompt tokens of which 3 were cached, 7 completion tokens
    assert (msg.usage.input_tokens, msg.usage.cache_read_input_tokens, msg.usage.output_tokens) == (8, 3, 7)
    sent = upstream.bodies(OPENAI_PATH)[0]
    assert sent["model"] == "gpt-dep" and sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": USER[0]["content"]}]
    assert sent["max_tokens"] == 300 and sent["stop"] == ["END"] and sent["temperature"] == 0.5
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather", "get_time"]
    assert sent["tools"][0]["function"]["parameters"] == {"type": "object"}
    assert sent["tool_choice"] == "auto" and sent["parallel_tool_calls"] is False
    assert "thinking" not in sent and "reasoning_effort" not in sent


def test_a_tool_result_round_trip_is_translated(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(OPENAI_PATH, text_stream(["Sunny."]))
    turn = [*USER,
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "22C"},
                                         {"type": "text", "text": "Thanks"}]}]
    with client(gw).messages.stream(model="gpt", max_tokens=50, messages=turn) as s:  # type: ignore[arg-type]
        assert s.get_final_text() == "Sunny."
    sent = upstream.bodies(OPENAI_PATH)[0]["messages"]
    assert sent[1] == {"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]}
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "22C"}
    assert sent[3] == {"role": "user", "content": "Thanks"}


@pytest.mark.parametrize(("finish", "stop"), [("stop", "end_turn"), ("length", "max_tokens"),
                                              ("content_filter", "refusal")])
def test_stop_reasons(upstream: FakeUpstream, gw: GatewayServer, finish: str, stop: str) -> None:
    upstream.enqueue(AZURE_PATH, text_stream(["x"], finish=finish))
    with client(gw).messages.stream(model="azure", max_tokens=50, messages=USER) as s:
        assert s.get_final_message().stop_reason == stop


def test_without_a_usage_chunk_or_done_the_message_still_ends(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(OPENAI_PATH, text_stream(["no ", "usage"], usage="none", done=False))
    with client(gw).messages.with_streaming_response.create(model="gpt", max_tokens=50, messages=USER,
                                                             stream=True) as raw:
        body = b"".join(raw.iter_bytes())
    assert body.count(b"event: message_delta") == 1 and body.endswith(b"event: message_stop\ndata: "
                                                                       b'{"type":"message_stop"}\n\n')


def test_non_stream_body_field_by_field(upstream: FakeUpstream, gw: GatewayServer) -> None:
    calls = [{"id": "call_9", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]
    upstream.enqueue(OPENAI_PATH, completion("Done.", tool_calls=calls))
    msg = client(gw).messages.create(model="gpt", max_tokens=50, messages=USER)
    assert [b.model_dump(exclude_none=True) for b in msg.content] == [
        {"type": "text", "text": "Done."}, {"type": "tool_use", "id": "call_9", "name": "f", "input": {"x": 1}}]
    assert msg.stop_reason == "tool_use" and msg.usage.output_tokens == 7 and msg.usage.input_tokens == 8
    assert "stream" not in upstream.bodies(OPENAI_PATH)[0]


def test_an_openai_client_error_is_anthropic_shaped(upstream: FakeUpstream, gw: GatewayServer) -> None:
    # a 400 naming no parameter may be of the stream_options the gateway added: retried once without (§4.6)
    upstream.enqueue(OPENAI_PATH, error_script(400, "invalid_value", "bad tool schema"),
                     error_script(400, "invalid_value", "bad tool schema"))
    with pytest.raises(anthropic.BadRequestError) as info:
        client(gw).messages.create(model="gpt", max_tokens=50, messages=USER, stream=True)
    assert info.value.body["type"] == "error" and "bad tool schema" in info.value.message  # type: ignore[index]
    assert [("stream_options" in b) for b in upstream.bodies(OPENAI_PATH)] == [True, False]


def test_fallback_from_anthropic_to_openai_keeps_one_lifecycle(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream([a.message_start("msg_failed"), a.ping(), a.text_block(0, [])[0],
                                       a.error_event("overloaded_error")]))
    upstream.enqueue(OPENAI_PATH, text_stream(["From ", "OpenAI."]))
    with client(gw).messages.with_streaming_response.create(model="claude-then-gpt", max_tokens=50,
                                                             messages=USER, stream=True) as raw:
        assert raw.headers["x-gateway-deployment"] == "oai/gpt-dep"
        body = b"".join(raw.iter_bytes())
    assert b"msg_failed" not in body and body.count(b"event: message_start") == 1
    assert body.count(b"event: content_block_start") == 1 and body.count(b"event: message_stop") == 1


def test_fallback_from_openai_to_anthropic_keeps_one_lifecycle(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(OPENAI_PATH, Script([sse(chunk({"role": "assistant", "content": ""})),
                                          sse({"error": {"message": "overloaded", "type": "server_error",
                                                         "code": "server_error"}})]))
    upstream.enqueue(a.PATH, a.text_stream(["From ", "Claude."]))
    with client(gw).messages.stream(model="gpt-then-claude", max_tokens=50, messages=USER) as s:
        events = [e.type for e in s]
        assert s.get_final_text() == "From Claude."
    assert events.count("message_start") == 1 and events[-1] == "message_stop"
    assert upstream.bodies(a.PATH)[0]["messages"] == USER and upstream.bodies(a.PATH)[0]["model"] == "claude-dep"


def test_the_mock_provider_answers_the_messages_api(make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(parse_config({"auth": {"allow_unauthenticated": True},
                                    "providers": {"demo": {"type": "mock", "ttft_ms": 1, "token_delay_ms": 0}},
                                    "models": [{"name": "demo", "deployments": [{"provider": "demo",
                                                                                 "model": "m"}]}]}, env={}))
    with client(gw).messages.stream(model="demo", max_tokens=50, messages=USER) as s:
        msg: Any = s.get_final_message()
    assert msg.content[0].text and msg.stop_reason == "end_turn" and msg.usage.output_tokens > 0
