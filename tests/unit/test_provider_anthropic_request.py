"""OpenAI Chat Completions request -> Anthropic Messages request (gateway.providers.convert.anthropic_request)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import orjson
import pytest

from gateway.config.types import ProviderConfig
from gateway.providers.chat_anthropic import AnthropicChat
from gateway.providers.convert.anthropic_request import DEFAULT_MAX_TOKENS, THINKING_BUDGETS, anthropic_body

ANTHROPIC_FIELDS = {"model", "messages", "system", "max_tokens", "stop_sequences", "temperature", "top_p", "top_k",
                    "tools", "tool_choice", "thinking", "metadata", "stream"}


def body(**kw: Any) -> dict[str, Any]:
    return {"model": "client-model", "messages": [{"role": "user", "content": "Hi"}], **kw}


def translate(b: dict[str, Any], stream: bool = False) -> dict[str, Any]:
    return anthropic_body(b, "claude-x", stream=stream)


def test_system_and_developer_messages_become_system_blocks_in_order() -> None:
    out = translate(body(messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
        {"role": "user", "content": "Weather?"},
        {"role": "system", "content": "Late rule."},
    ]))
    assert out["system"] == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use metric units."},
                             {"type": "text", "text": "Late rule."}]
    assert out["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Weather?"}]}]
    assert out["model"] == "claude-x"


def test_tool_round_trip_merges_results_into_one_user_turn() -> None:
    out = translate(body(messages=[
        {"role": "user", "content": "Weather in Oslo and Paris?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "15C"}]},
        {"role": "user", "content": "And tomorrow?"},
    ]))
    assert [t["role"] for t in out["messages"]] == ["user", "assistant", "user"]
    assert out["messages"][1]["content"] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "call_2", "name": "weather", "input": {}}]
    assert out["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "12C"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "15C"}]},
        {"type": "text", "text": "And tomorrow?"}]


def test_consecutive_same_role_turns_merge_and_empty_text_is_dropped() -> None:
    out = translate(body(messages=[
        {"role": "user", "content": "one"}, {"role": "user", "content": ""}, {"role": "user", "content": "two"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "not json"}}]},
        {"role": "assistant", "content": "more"},
    ]))
    assert out["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "f", "input": {}},
                                          {"type": "text", "text": "more"}]}]


def test_final_assistant_prefill_loses_trailing_whitespace() -> None:
    out = translate(body(messages=[{"role": "user", "content": "Q"},
                                   {"role": "assistant", "content": "The answer is "}]))
    assert out["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "The answer is"}]}


def test_images_as_urls_and_base64_data_urls_and_pdf_files() -> None:
    out = translate(body(messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "data:image/svg+xml;utf8,<svg/>"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}},
        {"type": "file", "file": {"file_id": "file-abc"}},
        {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}},
    ]}]))
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]


def test_cache_control_on_parts_and_messages_is_carried() -> None:
    cc = {"type": "ephemeral"}
    out = translate(body(messages=[
        {"role": "system", "content": [{"type": "text", "text": "Long policy", "cache_control": cc}]},
        {"role": "user", "content": "Doc", "cache_control": cc}]))
    assert out["system"] == [{"type": "text", "text": "Long policy", "cache_control": cc}]
    assert out["messages"][0]["content"] == [{"type": "text", "text": "Doc", "cache_control": cc}]


CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Weather for a city", "parameters": CITY}},
         {"type": "function", "function": {"name": "clock"}}]


@pytest.mark.parametrize(("choice", "parallel", "expected"), [
    (None, None, None),
    ("auto", None, {"type": "auto"}),
    ("none", None, {"type": "none"}),
    ("required", None, {"type": "any"}),
    ({"type": "function", "function": {"name": "clock"}}, None, {"type": "tool", "name": "clock"}),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
    ("none", False, {"type": "none"}),
])
def test_tools_and_tool_choice(choice: Any, parallel: Any, expected: Any) -> None:
    extra: dict[str, Any] = {"tools": TOOLS}
    if choice is not None:
        extra["tool_choice"] = choice
    if parallel is not None:
        extra["parallel_tool_calls"] = parallel
    out = translate(body(**extra))
    assert out["tools"] == [
        {"name": "weather", "description": "Weather for a city",
         "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"name": "clock", "input_schema": {"type": "object", "properties": {}}}]
    assert out.get("tool_choice") == expected


def test_tool_choice_without_tools_is_dropped() -> None:
    out = translate(body(tool_choice="required"))
    assert "tool_choice" not in out and "tools" not in out


@pytest.mark.parametrize(("extra", "expected"), [
    ({}, DEFAULT_MAX_TOKENS),
    ({"max_tokens": 300}, 300),
    ({"max_completion_tokens": 500, "max_tokens": 300}, 500),
    ({"max_tokens": 0}, DEFAULT_MAX_TOKENS),
    ({"max_tokens": "many"}, DEFAULT_MAX_TOKENS),
])
def test_max_tokens_always_set(extra: dict[str, Any], expected: int) -> None:
    assert translate(body(**extra))["max_tokens"] == expected


def test_sampling_and_stop() -> None:
    out = translate(body(temperature=1.7, top_p=0.9, stop="END", user="user-42"))
    assert out["temperature"] == 1.0 and out["top_p"] == 0.9
    assert out["stop_sequences"] == ["END"]
    assert out["metadata"] == {"user_id": "user-42"}
    out = translate(body(stop=["a", " ", "b"], temperature=0))
    assert out["stop_sequences"] == ["a", "b"] and out["temperature"] == 0.0


@pytest.mark.parametrize("effort", sorted(THINKING_BUDGETS))
def test_reasoning_effort_becomes_a_thinking_budget_below_max_tokens(effort: str) -> None:
    out = translate(body(reasoning_effort=effort, max_completion_tokens=800, temperature=0.2, top_p=0.5))
    budget = THINKING_BUDGETS[effort]
    assert out["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert out["max_tokens"] > budget
    assert out["max_tokens"] == budget + 800  # the client's limit stays room for the answer
    assert "temperature" not in out and out["top_p"] == 0.95


def test_reasoning_effort_with_room_keeps_max_tokens_and_none_means_no_thinking() -> None:
    out = translate(body(reasoning_effort="low", max_tokens=30000))
    assert out["max_tokens"] == 30000 and out["thinking"]["budget_tokens"] == THINKING_BUDGETS["low"]
    assert "thinking" not in translate(body(reasoning_effort="none"))


def test_no_thinking_with_a_forced_tool_or_inside_a_tool_loop() -> None:
    forced = translate(body(reasoning_effort="high", tools=TOOLS, tool_choice="required"))
    assert "thinking" not in forced
    loop = translate(body(reasoning_effort="high", tools=TOOLS, messages=[
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                              "function": {"name": "weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "12C"}]))
    assert "thinking" not in loop
    fresh = translate(body(reasoning_effort="high", tools=TOOLS, tool_choice="auto"))
    assert fresh["thinking"]["budget_tokens"] == THINKING_BUDGETS["high"]


def test_native_thinking_object_wins() -> None:
    out = translate(body(reasoning_effort="low", thinking={"type": "enabled", "budget_tokens": 5000}, max_tokens=100))
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 5000} and out["max_tokens"] == 5100


def test_unknown_and_unsupported_openai_fields_are_dropped() -> None:
    out = translate(body(n=2, logprobs=True, top_logprobs=3, seed=7, presence_penalty=0.5, frequency_penalty=0.1,
                         logit_bias={"1": 2}, response_format={"type": "json_object"}, store=True,
                         metadata={"team": "a"}, service_tier="flex", stream_options={"include_usage": True},
                         modalities=["text"], prediction={"type": "content", "content": "x"}, custom_field=1,
                         functions=[{"name": "f"}], function_call="auto", top_k=5), stream=True)
    assert set(out) <= ANTHROPIC_FIELDS
    assert out["stream"] is True and out["top_k"] == 5


def test_request_url_headers_and_no_client_credentials() -> None:
    provider = ProviderConfig(name="claude", type="anthropic", base_url="https://api.anthropic.test",
                              api_key="sk-ant-SECRET", anthropic_version="2023-06-01",
                              headers=MappingProxyType({"anthropic-beta": "prompt-caching-2024-07-31"}))
    tr = AnthropicChat(provider)
    req = tr.request(body(stream=True), "claude-x", stream=True, send_stream_options=True, client_headers={})
    assert req.url == "https://api.anthropic.test/v1/messages" and req.method == "POST" and req.stream
    assert req.headers["x-api-key"] == "sk-ant-SECRET"
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert req.headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    assert req.headers["accept"] == "text/event-stream"
    assert "authorization" not in {k.lower() for k in req.headers}
    sent = orjson.loads(req.body)
    assert sent["model"] == "claude-x" and sent["stream"] is True and "stream_options" not in sent
    plain = tr.request(body(stream=True), "claude-x", stream=False, send_stream_options=False, client_headers={})
    assert "stream" not in orjson.loads(plain.body) and plain.headers["accept"] == "application/json"
    with_v1 = AnthropicChat(ProviderConfig(name="c", type="anthropic", base_url="https://proxy.test/anthropic/v1"))
    assert with_v1.request(body(), "m", stream=False, send_stream_options=False, client_headers={}).url == \
        "https://proxy.test/anthropic/v1/messages"
