"""`POST /v1/responses` to deployments without a Responses API (CONTRACT §10), driven by the official `openai`
SDK: a scripted Anthropic upstream and a scripted OpenAI-compatible chat-only server (`responses: false`,
no `/responses` route). `responses.stream` and `responses.create` with tools and reasoning, a function-call
round trip, usage, and `previous_response_id` (a 400 that says why, or only the Responses upstream)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.chat_scripts import MODEL as CHAT_MODEL
from tests.chat_scripts import chunk, completion, text_stream, usage_chunk
from tests.fake_upstream import FakeUpstream, Script, sse
from tests.harness import GatewayServer
from tests.responses_scripts import Answer, stream_script

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
RETRY = {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5}
KEY = "sk-proj-Zq8vN3xT5bW1kR7mY2cP9dL4fH6jS0gA1eU3iO5"
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
SHELL = {"type": "function", "name": "shell", "description": "Run a command",
         "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                        "required": ["command"]}}


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {
            "llama": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": "sk-llama-SECRET",
                      "responses": False, "timeouts": TIMEOUTS},
            "claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET",
                       "timeouts": TIMEOUTS},
            "oai": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": "sk-oai-SECRET",
                    "timeouts": TIMEOUTS},
        },
        "models": [
            {"name": "local", "deployments": [{"provider": "llama", "model": "qwen-dep"}], "redaction": "p"},
            {"name": "local-then-claude", "retry": RETRY, "deployments": [
                {"provider": "llama", "model": "qwen-dep"}, {"provider": "claude", "model": "claude-dep"}]},
            {"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep"}]},
            {"name": "claude-or-gpt", "deployments": [{"provider": "claude", "model": "claude-dep"},
                                                      {"provider": "oai", "model": "gpt-dep"}]},
        ],
        "redaction": {"profiles": {"p": {"rules": ["secrets"]}}},
    }, env={}))


def client(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="any", max_retries=0, timeout=20)


def reasoning_text_call() -> Script:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "shell", "arguments": ""}}
    parts = [chunk({"role": "assistant", "content": ""}), chunk({"reasoning_content": "List "}),
             chunk({"reasoning_content": "the files."}), chunk({"content": "Let me "}), chunk({"content": "look."}),
             chunk({"tool_calls": [call]}),
             chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"command": '}}]}),
             chunk({"tool_calls": [{"index": 0, "function": {"arguments": '["ls"]}'}}]}),
             chunk({}, "tool_calls"), usage_chunk()]
    return Script([*(sse(p) for p in parts), b"data: [DONE]\n\n"], split=13)


def test_stream_with_reasoning_and_a_tool_call_from_a_chat_only_server(upstream: FakeUpstream,
                                                                      gw: GatewayServer) -> None:
    upstream.enqueue(CHAT_PATH, reasoning_text_call())
    with client(gw).responses.stream(model="local", input="What is here?", instructions="Be brief.",
                                     tools=[SHELL], reasoning={"effort": "low"},  # type: ignore[list-item]
                                     max_output_tokens=200, store=False) as s:
        types = [e.type for e in s]
        final = s.get_final_response()
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]
    reasoning, _message, call = final.output
    assert reasoning.content[0].text == "List the files."  # type: ignore[union-attr,index]
    assert final.output_text == "Let me look."
    assert (call.call_id, call.name, call.arguments) == ("call_1", "shell", '{"command": ["ls"]}')  # type: ignore[union-attr]
    assert final.id == "resp_chatcmpl-up" and final.model == CHAT_MODEL and final.status == "completed"
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.input_tokens_details.cached_tokens) == (11, 3)
    assert (final.usage.output_tokens, final.usage.output_tokens_details.reasoning_tokens) == (7, 2)
    sent = upstream.bodies(CHAT_PATH)[0]
    assert sent["model"] == "qwen-dep" and sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "What is here?"}]
    assert sent["tools"][0]["function"]["name"] == "shell" and sent["reasoning_effort"] == "low"
    assert sent["max_tokens"] == 200 and "store" not in sent
    assert upstream.bodies(RESPONSES_PATH) == [], "a chat-only server is never asked for /responses"


def test_a_function_call_round_trip_non_stream(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(CHAT_PATH, completion("Two files."))
    history: list[Any] = [
        {"role": "user", "content": "What is here?"},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"command":["ls"]}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt\nb.txt"},
    ]
    resp = client(gw).responses.create(model="local", input=history, tools=[SHELL])  # type: ignore[list-item]
    assert resp.output_text == "Two files." and resp.status == "completed" and resp.object == "response"
    assert resp.usage is not None and resp.usage.total_tokens == 18
    sent = upstream.bodies(CHAT_PATH)[0]
    assert "stream" not in sent
    assert sent["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": '{"command":["ls"]}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"}]


def test_stream_with_thinking_and_a_tool_call_from_anthropic(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.stream([
        a.message_start("msg_7"), a.ping(), *a.thinking_block(0, ["Need ", "ls."]), *a.text_block(1, ["Checking."]),
        *a.tool_block(2, "toolu_1", "shell", ['{"command":', ' ["ls"]}']), a.message_delta("tool_use"),
        a.message_stop()], split=17))
    with client(gw).responses.stream(model="claude", input="What is here?", tools=[SHELL],  # type: ignore[list-item]
                                     reasoning={"effort": "medium"}) as s:
        deltas = [e.delta for e in s if e.type == "response.function_call_arguments.delta"]
        final = s.get_final_response()
    assert "".join(deltas) == '{"command": ["ls"]}'
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[0].content[0].text == "Need ls."  # type: ignore[union-attr,index]
    assert final.output_text == "Checking." and final.output[2].call_id == "toolu_1"  # type: ignore[union-attr]
    # Anthropic's usage: 20 input + 10 cache reads, 12 output
    assert final.usage is not None and (final.usage.input_tokens, final.usage.output_tokens) == (30, 12)
    assert final.usage.input_tokens_details.cached_tokens == 10
    sent = upstream.bodies(a.PATH)[0]
    assert sent["model"] == "claude-dep" and sent["thinking"]["type"] == "enabled"
    assert sent["tools"][0]["name"] == "shell"
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "What is here?"}]}]


def test_a_tool_result_round_trip_to_anthropic(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(a.PATH, a.message_body([{"type": "text", "text": "Two files."}]))
    history: list[Any] = [
        {"role": "user", "content": "What is here?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "x"}]},
        {"type": "function_call", "call_id": "toolu_1", "name": "shell", "arguments": '{"command":["ls"]}'},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "a.txt b.txt"},
    ]
    resp = client(gw).responses.create(model="claude", input=history, tools=[SHELL],  # type: ignore[list-item]
                                       reasoning={"effort": "high"})
    assert resp.output_text == "Two files." and resp.id == "resp_msg_body"
    sent = upstream.bodies(a.PATH)[0]
    assert sent["messages"][1]["content"] == [{"type": "tool_use", "id": "toolu_1", "name": "shell",
                                               "input": {"command": ["ls"]}}]
    assert sent["messages"][2]["content"][0]["type"] == "tool_result"
    assert "thinking" not in sent, "a continued tool loop has no signed thinking to send back"


def test_previous_response_id_to_a_bridge_is_a_400_that_says_so(upstream: FakeUpstream, gw: GatewayServer) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(gw).responses.create(model="claude", input="and then?", previous_response_id="resp_1")
    err = info.value.body
    assert isinstance(err, dict) and err["param"] == "previous_response_id"
    assert "previous_response_id" in err["message"] and err["code"] == "invalid_request"
    assert upstream.bodies(a.PATH) == []


def test_previous_response_id_goes_only_to_the_responses_upstream(upstream: FakeUpstream, gw: GatewayServer) -> None:
    # the id must be one the gateway relayed from the Responses upstream (docs/responses-bridge.md,
    # ownership): Claude is overloaded, so the first answer comes from it
    upstream.enqueue(a.PATH, a.error_body(529, "overloaded_error"))
    upstream.enqueue(RESPONSES_PATH, stream_script(Answer("resp_1").message(["First."]).stream_events()),
                     stream_script(Answer("resp_2").message(["Continued."]).stream_events()))
    with client(gw).responses.stream(model="claude-or-gpt", input="hi") as s:
        assert s.get_final_response().id == "resp_1"
    asked_claude = len(upstream.bodies(a.PATH))
    with client(gw).responses.stream(model="claude-or-gpt", input="and then?", previous_response_id="resp_1") as s:
        final = s.get_final_response()
    assert final.output_text == "Continued."
    assert upstream.bodies(RESPONSES_PATH)[1]["previous_response_id"] == "resp_1"
    assert len(upstream.bodies(a.PATH)) == asked_claude, "only the first request asked Claude"


def test_a_chat_only_server_without_usage_or_done_still_completes(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(CHAT_PATH, text_stream(["no ", "usage"], usage="none", done=False))
    with client(gw).responses.stream(model="local", input="hi") as s:
        final = s.get_final_response()
    assert final.output_text == "no usage" and final.status == "completed"


def test_a_failure_before_the_first_token_falls_back_with_one_lifecycle(upstream: FakeUpstream,
                                                                         gw: GatewayServer) -> None:
    """The chat server's in-band error before any text is retried on the next deployment (Anthropic, also
    bridged); the client sees one `response.created` and the fallback's answer."""
    upstream.enqueue(CHAT_PATH, Script([sse(chunk({"role": "assistant", "content": ""})),
                                        sse({"error": {"message": "overloaded", "type": "server_error",
                                                       "code": "server_error"}})]))
    upstream.enqueue(a.PATH, a.text_stream(["From ", "Claude."]))
    with client(gw).responses.with_streaming_response.create(model="local-then-claude", input="hi",
                                                             stream=True) as raw:
        assert raw.headers["x-gateway-deployment"] == "claude/claude-dep"
        events = list(raw.parse())
    types = [e.type for e in events]
    assert types.count("response.created") == 1 and types[-1] == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "From Claude."
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_secret_split_across_chat_chunks_is_masked_everywhere(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(CHAT_PATH, text_stream(["Your key: ", KEY[:9], KEY[9:30], KEY[30:], " done."]))
    with client(gw).responses.stream(model="local", input="my key?") as s:
        deltas = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    assert KEY not in deltas and "[REDACTED:openai_key]" in deltas
    assert final.output_text == deltas, "the terminal object carries what the deltas said"
