"""What the gateway mends in an upstream's stream, seen through the official `openai` SDK against a
scripted upstream: tool-call deltas without `index` (Gemini's OpenAI endpoint) get one, and an
unreadable event after the first token is skipped and counted instead of ending the answer."""

from __future__ import annotations

from typing import Any

import openai

from tests.chat_scripts import chunk, usage_chunk
from tests.fake_upstream import FakeUpstream, Script, sse
from tests.harness import GatewayServer

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Weather in Paris, and the time?"}]


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
