"""What the gateway mends in an upstream's stream, seen through the official `openai` SDK against a
scripted upstream: tool-call deltas without `index` (Gemini's OpenAI endpoint) get one, and an
unreadable event after the first token is skipped and counted instead of ending the answer."""

from __future__ import annotations

from typing import Any

import openai
from structlog.testing import capture_logs

from tests.chat_scripts import chunk, text_stream, usage_chunk
from tests.fake_upstream import FakeUpstream, Script, sse
from tests.harness import GatewayServer
from tests.responses_scripts import Answer, frame

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = [{"role": "user", "content": "Weather in Paris, and the time?"}]
BROKEN = b"data: {not json at all\n\n"


def client(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="client-key-123", max_retries=0, timeout=20)


def gemini_tool_calls() -> Script:
    """Gemini's OpenAI endpoint: each call whole in its own chunk, with an id and no index."""
    def call(cid: str, name: str, args: str) -> dict[str, Any]:
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}

    chunks = [chunk({"role": "assistant"}),
              chunk({"tool_calls": [call("call_a", "weather", '{"city":"Paris"}')]}),
              chunk({"tool_calls": [call("call_b", "clock", '{"tz":"UTC"}')]}),
              chunk({}, "tool_calls"), usage_chunk()]
    return Script([sse(c) for c in chunks] + [b"data: [DONE]\n\n"])


def test_gemini_tool_calls_without_index_through_the_sdk_stream_helper(upstream: FakeUpstream,
                                                                       gateway: GatewayServer) -> None:
    upstream.enqueue(CHAT, gemini_tool_calls())
    with client(gateway).chat.completions.stream(model="m", messages=MESSAGES) as stream:
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    assert [(t.id, t.function.name, t.function.arguments) for t in calls] == [
        ("call_a", "weather", '{"city":"Paris"}'), ("call_b", "clock", '{"tz":"UTC"}')]
    assert final.choices[0].finish_reason == "tool_calls"


def test_gemini_tool_calls_are_cached_as_two_calls(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.enqueue(CHAT, gemini_tool_calls())
    got = []
    for _ in range(2):
        with client(gateway).chat.completions.with_streaming_response.create(
                model="m", messages=MESSAGES, stream=True, extra_headers={"x-gateway-cache": "on"}) as raw:
            deltas = [tc for c in raw.parse() for ch in c.choices for tc in ch.delta.tool_calls or ()]
            got.append((raw.headers.get("x-gateway-cache"), [(tc.index, tc.id, tc.function.arguments)
                                                               for tc in deltas if tc.function]))
    calls = [(0, "call_a", '{"city":"Paris"}'), (1, "call_b", '{"tz":"UTC"}')]
    assert got == [(None, calls), ("hit", calls)]
    assert len(upstream.bodies(CHAT)) == 1


def test_every_forwarded_tool_call_delta_has_an_int_index(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.enqueue(CHAT, gemini_tool_calls())
    chunks = list(client(gateway).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    deltas = [tc for c in chunks for ch in c.choices for tc in ch.delta.tool_calls or ()]
    assert [(type(tc.index), tc.index, tc.id) for tc in deltas] == [(int, 0, "call_a"), (int, 1, "call_b")]


def test_a_malformed_chat_event_after_the_first_token_is_skipped_and_counted(upstream: FakeUpstream,
                                                                              gateway: GatewayServer) -> None:
    script = text_stream(["Hel", "lo, ", "world", "!"])
    script.parts.insert(3, BROKEN)  # role, "Hel", "lo, ", then the broken event, then the rest
    upstream.enqueue(CHAT, script)
    with capture_logs() as logs:
        chunks = list(client(gateway).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello, world!"
    assert chunks[-1].choices[0].finish_reason == "stop"  # a normal end: the SDK saw no error event
    assert gateway.sample("llm_gateway_malformed_events_total", model="m", deployment="up/up-model") == 1
    assert gateway.sample("llm_gateway_stream_failures_total", model="m", deployment="up/up-model",
                          reason="malformed") == 0
    [line] = [e for e in logs if e["event"] == "malformed_events_skipped"]
    assert line["count"] == 1 and line["log_level"] == "warning"
    assert "not json" not in str(line)  # the count, never the event
    assert len(upstream.bodies(CHAT)) == 1, "nothing retried"


def test_a_malformed_responses_event_after_the_first_token_is_skipped_and_counted(upstream: FakeUpstream,
                                                                                   gateway: GatewayServer) -> None:
    events = Answer().message(["Hel", "lo, ", "world", "!"]).stream_events()
    first = next(i for i, e in enumerate(events) if e["type"] == "response.output_text.delta")
    parts: list[Any] = [frame(e) for e in events]
    parts.insert(first + 2, b"event: response.output_text.delta\n" + BROKEN)
    upstream.enqueue(RESPONSES, Script(parts))
    with client(gateway).responses.stream(model="m", input="Say hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Hello, world!" and final.output_text == "Hello, world!"
    assert final.status == "completed"
    assert gateway.sample("llm_gateway_malformed_events_total", model="m", deployment="up/up-model") == 1
