"""The `gemini` and `vertex` providers (issue #30, CONTRACT §9) driven by the official openai and anthropic
SDKs through the real gateway, against scripted Google endpoints (`tests/fake_google.py`) that check the
API key or the bearer token their own token endpoint issued for a service account's signed assertion."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.config import parse_config
from gateway.upstream.google import GoogleSigner
from tests import anthropic_scripts as a
from tests import google_scripts as g
from tests.fake_google import API_KEY, LOCATION, PROJECT, FakeGoogle, gemini_path, sse_script, vertex_path
from tests.fake_upstream import Gate, Script, json_script
from tests.harness import GatewayServer, LoopThread

TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
RETRY = {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5}
CLAUDE, CLAUDE2 = "claude-sonnet-4-5@20250929", "claude-opus-4-1@20250805"
FLASH, PRO = "gemini-2.5-flash", "gemini-2.5-pro"
USER = [{"role": "user", "content": "Say hello"}]
WEATHER = {"type": "function", "function": {"name": "weather", "description": "w", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture
def google(servers: LoopThread) -> Iterator[FakeGoogle]:
    fake = FakeGoogle()
    servers.run(fake.start())
    yield fake
    servers.run(fake.stop())


@pytest.fixture
def gw(google: FakeGoogle, tmp_path: Path, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    sa = google.service_account_file(tmp_path)
    return make_gateway(parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {
            "gem": {"type": "gemini", "base_url": google.base_url, "api_key": API_KEY, "timeouts": TIMEOUTS},
            "vx": {"type": "vertex", "project": PROJECT, "location": LOCATION, "base_url": google.base_url,
                   "credentials_file": str(sa), "timeouts": TIMEOUTS},
        },
        "models": [
            {"name": "gemini", "retry": RETRY, "deployments": [{"provider": "gem", "model": FLASH}]},
            {"name": "gemini-pair", "retry": RETRY, "deployments": [{"provider": "gem", "model": FLASH},
                                                                    {"provider": "gem", "model": PRO}]},
            {"name": "vgemini", "retry": RETRY, "deployments": [{"provider": "vx", "model": PRO}]},
            {"name": "vclaude", "retry": RETRY, "deployments": [{"provider": "vx", "model": CLAUDE}]},
            {"name": "vclaude-pair", "retry": RETRY, "deployments": [{"provider": "vx", "model": CLAUDE},
                                                                     {"provider": "vx", "model": CLAUDE2}]},
        ],
    }, env={}))


def oai(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0, timeout=20)


def claude(gw: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="unused", max_retries=0, timeout=20)


THINKING_TOOL_ANSWER = [
    g.response([g.text("The user wants ", thought=True)], usage=g.usage(candidates=0)),
    g.response([g.text("weather.", thought=True), g.text("Checking.")], usage=g.usage(candidates=2)),
    g.response([g.call("weather", {"city": "Oslo"})], "STOP", g.usage(prompt=40, candidates=9, cached=30, thoughts=4)),
]


# --- the Gemini API ---------------------------------------------------------------------------------

def test_gemini_chat_stream_with_usage(google: FakeGoogle, gw: GatewayServer) -> None:
    google.enqueue(gemini_path(FLASH, True), sse_script(g.text_stream(["Hel", "lo ", "there"],
                                                                     g.usage(12, 3, cached=8)), split=7))
    stream = oai(gw).chat.completions.create(model="gemini", messages=[{"role": "system", "content": "Brief."},
                                                                       *USER],
                                             stream=True, stream_options={"include_usage": True}, max_tokens=99)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello there"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    usage = chunks[-1].usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (12, 3)
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 8
    got = google.received[0]
    assert got.query == {"alt": "sse"} and got.headers["x-goog-api-key"] == API_KEY
    assert got.body == {"contents": [{"role": "user", "parts": [{"text": "Say hello"}]}],
                        "systemInstruction": {"parts": [{"text": "Brief."}]},
                        "generationConfig": {"maxOutputTokens": 99}}
    assert gw.sample("llm_gateway_tokens_total", model="gemini", provider="gem", type="input") == 12


def test_gemini_chat_tools_round_trip(google: FakeGoogle, gw: GatewayServer) -> None:
    google.enqueue(gemini_path(FLASH, False), json_script(g.response([g.call("weather", {"city": "Oslo"})], "STOP",
                                                                     g.usage())))
    c = oai(gw)
    first = c.chat.completions.create(model="gemini", messages=USER, tools=[WEATHER], tool_choice="required")
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, call.function.arguments) == ("weather", '{"city":"Oslo"}')
    assert google.received[0].body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert google.received[0].body["tools"][0]["functionDeclarations"][0]["name"] == "weather"
    google.enqueue(gemini_path(FLASH, True), sse_script(g.text_stream(["3 degrees"])))
    turn2: list[Any] = [*USER, first.choices[0].message.model_dump(exclude_none=True),
                        {"role": "tool", "tool_call_id": call.id, "content": '{"temp": 3}'}]
    answer = c.chat.completions.create(model="gemini", messages=turn2, tools=[WEATHER], stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in answer if ch.choices) == "3 degrees"
    sent = google.received[1].body["contents"]
    assert sent[1]["parts"][0]["functionCall"] == {"name": "weather", "args": {"city": "Oslo"}}
    assert sent[2] == {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"temp": 3}}}]}


def test_gemini_messages_stream_with_thinking_and_tools(google: FakeGoogle, gw: GatewayServer) -> None:
    google.enqueue(gemini_path(FLASH, True), sse_script(THINKING_TOOL_ANSWER, split=11))
    tools = [{"name": "weather", "description": "w", "input_schema": WEATHER["function"]["parameters"]}]
    with claude(gw).messages.stream(model="gemini", max_tokens=4096, messages=USER, tools=tools,
                                    thinking={"type": "enabled", "budget_tokens": 2048}) as s:
        msg = s.get_final_message()
    thinking, text, tool = msg.content
    assert thinking.type == "thinking" and thinking.thinking == "The user wants weather."
    assert text.type == "text" and text.text == "Checking."
    assert tool.type == "tool_use" and tool.name == "weather" and tool.input == {"city": "Oslo"}
    assert msg.stop_reason == "tool_use"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (10, 13)  # Anthropic counts input uncached
    # the thoughts are the output's reasoning part, on this API as on chat (Anthropic's usage has no field)
    assert gw.sample("llm_gateway_tokens_total", model="gemini", provider="gem", type="reasoning") == 4
    body = google.received[0].body
    assert body["generationConfig"]["thinkingConfig"] == {"includeThoughts": True, "thinkingBudget": 2048}


def test_resource_exhausted_in_stream_before_any_text_falls_back_invisibly(google: FakeGoogle,
                                                                          gw: GatewayServer) -> None:
    exhausted = [g.response([], usage=g.usage(candidates=0)), g.error("RESOURCE_EXHAUSTED", 429, retry_s="0s")]
    google.enqueue(gemini_path(FLASH, True), sse_script(exhausted))
    google.enqueue(gemini_path(PRO, True), sse_script(g.text_stream(["from ", "pro"])))
    stream = oai(gw).chat.completions.create(model="gemini-pair", messages=USER, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "from pro"
    assert [r.path for r in google.received] == [gemini_path(FLASH, True), gemini_path(PRO, True)]


def test_a_bad_key_is_our_credentials_not_the_clients_mistake(google: FakeGoogle, gw: GatewayServer,
                                                              make_gateway: Callable[..., GatewayServer]) -> None:
    bad = make_gateway(parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"gem": {"type": "gemini", "base_url": google.base_url, "api_key": "AIza-wrong"}},
        "models": [{"name": "gemini", "deployments": [{"provider": "gem", "model": FLASH}]}]}, env={}))
    with pytest.raises(openai.APIStatusError) as err:
        oai(bad).chat.completions.create(model="gemini", messages=USER)
    assert err.value.status_code in (502, 503) and "AIza" not in str(err.value.body)


def test_failed_precondition_is_our_project_not_the_clients_mistake(google: FakeGoogle, gw: GatewayServer) -> None:
    """FAILED_PRECONDITION is the project's state (the Gemini API: no billing where the free tier is not
    offered): the next deployment answers; with none left the client gets a provider quota error (429),
    never a 400 blaming its request."""
    unbilled = g.error("FAILED_PRECONDITION", 400, "User location is not supported for the API use.")
    google.enqueue(gemini_path(FLASH, True), json_script(unbilled, status=400))
    google.enqueue(gemini_path(PRO, True), sse_script(g.text_stream(["from ", "pro"])))
    stream = oai(gw).chat.completions.create(model="gemini-pair", messages=USER, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "from pro"
    google.enqueue(gemini_path(FLASH, False), json_script(unbilled, status=400))
    with pytest.raises(anthropic.APIStatusError) as err:
        claude(gw).messages.create(model="gemini", max_tokens=99, messages=USER)
    assert err.value.status_code == 429 and "User location is not supported" in str(err.value.body)
    assert len(google.received) == 3  # once each: never retried where it failed


# --- Vertex AI --------------------------------------------------------------------------------------

def test_vertex_gemini_with_a_service_account_token(google: FakeGoogle, gw: GatewayServer) -> None:
    google.enqueue(vertex_path(PRO, True), sse_script(THINKING_TOOL_ANSWER))
    stream = oai(gw).chat.completions.create(model="vgemini", messages=USER, stream=True, reasoning_effort="low",
                                             stream_options={"include_usage": True}, tools=[WEATHER])
    chunks = list(stream)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert [(tc.function.name, tc.function.arguments) for tc in calls] == [("weather", '{"city":"Oslo"}')]
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                        for c in chunks if c.choices)
    assert reasoning == "The user wants weather."
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert (usage.completion_tokens, usage.completion_tokens_details.reasoning_tokens) == (13, 4)
    got = google.received[0]
    assert got.headers["Authorization"] == f"Bearer {google.issued[0]}" and google.token_requests == 1
    assert got.body["generationConfig"]["thinkingConfig"] == {"includeThoughts": True, "thinkingBudget": 1024}


def test_vertex_claude_messages_native(google: FakeGoogle, gw: GatewayServer) -> None:
    answer = [a.message_start(), a.ping(), *a.thinking_block(0, ["Let me ", "think."]),
              *a.text_block(1, ["Hel", "lo"]), *a.tool_block(2, "toolu_01", "weather", ['{"city":', ' "Oslo"}']),
              a.message_delta("tool_use", {"output_tokens": 42}), a.message_stop()]
    google.enqueue(vertex_path(CLAUDE, True), a.stream(answer, split=9))
    tools = [{"name": "weather", "description": "w", "input_schema": {"type": "object"}}]
    with claude(gw).messages.stream(model="vclaude", max_tokens=2048, messages=USER, tools=tools,
                                    thinking={"type": "enabled", "budget_tokens": 1024},
                                    extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"}) as s:
        msg = s.get_final_message()
    thinking, text, tool = msg.content
    assert thinking.type == "thinking" and thinking.thinking == "Let me think." and thinking.signature
    assert text.type == "text" and text.text == "Hello"
    assert tool.type == "tool_use" and tool.input == {"city": "Oslo"} and msg.stop_reason == "tool_use"
    got = google.received[0]
    assert "model" not in got.body and got.body["anthropic_version"] == "vertex-2023-10-16"
    assert got.body["stream"] is True and got.body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert got.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert got.headers["Authorization"] == f"Bearer {google.issued[0]}"


def test_vertex_claude_chat_and_non_stream(google: FakeGoogle, gw: GatewayServer) -> None:
    google.enqueue(vertex_path(CLAUDE, True), a.text_stream(["Hi ", "there"]))
    google.enqueue(vertex_path(CLAUDE, False), a.message_body([{"type": "text", "text": "Whole."}]),
                   a.message_body([{"type": "text", "text": "Native."}]))
    c = oai(gw)
    stream = c.chat.completions.create(model="vclaude", messages=USER, stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == "Hi there"
    assert c.chat.completions.create(model="vclaude", messages=USER).choices[0].message.content == "Whole."
    msg = claude(gw).messages.create(model="vclaude", max_tokens=64, messages=USER)
    assert msg.content[0].type == "text" and msg.content[0].text == "Native."
    assert [r.body.get("anthropic_version") for r in google.received] == ["vertex-2023-10-16"] * 3
    assert "stream" not in google.received[1].body


def test_vertex_claude_overloaded_before_any_text_falls_back_invisibly(google: FakeGoogle,
                                                                       gw: GatewayServer) -> None:
    google.enqueue(vertex_path(CLAUDE, True), a.stream([a.message_start(), a.ping(), a.error_event()]))
    google.enqueue(vertex_path(CLAUDE2, True), a.text_stream(["second ", "model"]))
    with claude(gw).messages.stream(model="vclaude-pair", max_tokens=64, messages=USER) as s:
        assert s.get_final_text() == "second model"
    assert [r.path for r in google.received] == [vertex_path(CLAUDE, True), vertex_path(CLAUDE2, True)]


def test_vertex_gemini_through_messages_and_a_google_error(google: FakeGoogle, gw: GatewayServer) -> None:
    google.enqueue(vertex_path(PRO, False), json_script(g.error("INVALID_ARGUMENT", 400, "bad schema"), 400))
    with pytest.raises(anthropic.BadRequestError) as err:
        claude(gw).messages.create(model="vgemini", max_tokens=64, messages=USER)
    assert "bad schema" in str(err.value)


def test_a_token_refresh_during_a_stream(google: FakeGoogle, gw: GatewayServer, servers: LoopThread) -> None:
    """A new token while a stream is open: the stream finishes, the next request carries the new token
    (the old one revoked: the fake would refuse it)."""
    gate = Gate()
    head = [a.event(e) for e in [a.message_start(), *a.text_block(0, ["one "])]]
    google.enqueue(vertex_path(CLAUDE, True), Script([*head, gate, a.event(a.message_delta()),
                                                      a.event(a.message_stop())]))
    google.enqueue(vertex_path(CLAUDE, True), a.text_stream(["two"]))
    assert gw.app is not None
    signer = gw.app.upstream.signers["vx"]
    assert isinstance(signer, GoogleSigner)
    stream = oai(gw).chat.completions.create(model="vclaude", messages=USER, stream=True)
    first = next(c for c in stream if c.choices and c.choices[0].delta.content)
    assert first.choices[0].delta.content == "one "
    servers.run(signer.refresh())
    google.revoked.add(google.issued[0])
    gate.opened.set()
    assert [c.choices[0].finish_reason for c in stream if c.choices and c.choices[0].finish_reason] == ["stop"]
    again = oai(gw).chat.completions.create(model="vclaude", messages=USER, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in again if c.choices) == "two"
    assert len(google.issued) == 2 and google.received[-1].headers["Authorization"] == f"Bearer {google.issued[1]}"


def test_the_responses_api_reaches_vertex_claude_and_gemini_through_the_bridge(google: FakeGoogle,
                                                                               gw: GatewayServer) -> None:
    """`/v1/responses` (Codex) to Vertex, which has no Responses API: the bridge over the chat cell, the
    bearer token checked, Claude's and Gemini's streams read into Responses events (CONTRACT §9, §10)."""
    google.enqueue(vertex_path(CLAUDE, True), a.text_stream(["Hi ", "there"]))
    google.enqueue(vertex_path(PRO, True), sse_script(THINKING_TOOL_ANSWER))
    c = oai(gw)
    with c.responses.stream(model="vclaude", input="hi") as s:
        assert s.get_final_response().output_text == "Hi there"
    assert google.received[0].body["anthropic_version"] == "vertex-2023-10-16"
    tool: Any = {"type": "function", "name": "weather", "parameters": {"type": "object"}}
    with c.responses.stream(model="vgemini", input="Weather in Oslo?", tools=[tool]) as s:
        final = s.get_final_response()
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]
    assert final.output_text == "Checking."
    assert final.usage is not None and final.usage.input_tokens_details.cached_tokens == 30
