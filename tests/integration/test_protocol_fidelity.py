"""Two answers real upstreams send, through the real gateway on 127.0.0.1 to the official SDKs:

- an event whose JSON spans several `data:` lines (legal event-stream framing: the lines join with LF),
  an empty `data` line first, CRLF line ends, `id:`/`retry:`/unknown fields and comments: it must reach
  openai-python (chat, Responses), the openai Node SDK (chat) and anthropic-sdk-python (Messages) as the
  same JSON, not as a broken event the SDK's parser raises on;
- parallel tool calls whose argument fragments an OpenAI-compatible server interleaves (index 0, 1, 0, 1)
  served to the anthropic SDK on `/v1/messages`: every tool_use block must carry its whole input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import orjson
import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.chat_scripts import chunk, usage_chunk
from tests.e2e.clients import node_stream
from tests.fake_upstream import FakeUpstream, Script, sse
from tests.harness import GatewayServer
from tests.responses_scripts import Answer

CHAT = "/v1/chat/completions"
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
USER = [{"role": "user", "content": "Weather and time in Paris?"}]


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {
            "oai": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": "sk-oai-SECRET",
                    "timeouts": TIMEOUTS},
            "claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET",
                       "timeouts": TIMEOUTS},
        },
        "models": [{"name": "gpt", "deployments": [{"provider": "oai", "model": "gpt-dep"}]},
                   {"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep"}]}],
    }, env={}))


def multi_line(obj: dict[str, Any], name: str | None = None, crlf: bool = True) -> bytes:
    """One event whose JSON is spread over `data:` lines (an empty one first), with an `id:`, a `retry:`,
    an unknown field and a comment, lines ended by CRLF."""
    lines = [b": spread over lines", b"id: 42", b"retry: 3000", b"x-vendor: 1"]
    if name is not None:
        lines.append(b"event: " + name.encode())
    lines.append(b"data:")
    lines += [b"data: " + line for line in orjson.dumps(obj, option=orjson.OPT_INDENT_2).split(b"\n")]
    end = b"\r\n" if crlf else b"\n"
    return end.join(lines) + end + end


def multi_line_chat() -> Script:
    parts = [sse(chunk({"role": "assistant", "content": ""})), sse(chunk({"content": "Hello"})),
             multi_line(chunk({"content": ", wor"})), sse(chunk({"content": "ld"})),
             multi_line(chunk({"content": "!\n\u2028"}), crlf=False), multi_line(chunk({}, "stop")),
             multi_line(usage_chunk()), b"data: [DONE]\r\n\r\n"]
    return Script(parts, split=5)


def test_multi_line_data_reaches_the_openai_sdk_as_the_same_chunks(upstream: FakeUpstream,
                                                                   gw: GatewayServer) -> None:
    upstream.enqueue(CHAT, multi_line_chat())
    oai = openai.OpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="k", max_retries=0, timeout=20)
    with oai.chat.completions.stream(model="gpt", messages=USER,  # type: ignore[arg-type]
                                     stream_options={"include_usage": True}) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "Hello, world!\n\u2028"
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is not None and final.usage.total_tokens == 18


def test_multi_line_data_reaches_the_openai_node_sdk_as_the_same_chunks(upstream: FakeUpstream,
                                                                        gw: GatewayServer) -> None:
    """The Node SDK's own event-stream parser (the one `make test` installs for tests/e2e)."""
    upstream.enqueue(CHAT, multi_line_chat())
    got = node_stream(f"http://127.0.0.1:{gw.port}/v1", "k", "gpt",
                      {"messages": USER, "stream_options": {"include_usage": True}})
    assert (got.text, got.finish_reason) == ("Hello, world!\n\u2028", "stop")
    assert got.usage["total_tokens"] == 18


def test_multi_line_data_reaches_the_openai_sdk_on_the_responses_api(upstream: FakeUpstream,
                                                                     gw: GatewayServer) -> None:
    answer = Answer().message(["Bon", "jour", " !"])
    events = answer.stream_events()
    parts = [multi_line(e, e["type"]) if n % 2 else sse(e).replace(b"data:", b"event: " + e["type"].encode()
                                                                    + b"\ndata:", 1)
             for n, e in enumerate(events)]
    upstream.enqueue("/v1/responses", Script(parts, split=7))
    oai = openai.OpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="k", max_retries=0, timeout=20)
    with oai.responses.stream(model="gpt", input="Say hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Bonjour !" == final.output_text
    assert final.usage is not None and final.usage.total_tokens == 18


def test_multi_line_data_reaches_the_anthropic_sdk_on_the_messages_api(upstream: FakeUpstream,
                                                                       gw: GatewayServer) -> None:
    objs = [a.message_start(), a.ping(), *a.text_block(0, ["Bon", "jour"]),
            a.message_delta("end_turn"), a.message_stop()]
    parts = [multi_line(o, o["type"]) if n % 2 else a.event(o) for n, o in enumerate(objs)]
    upstream.enqueue(a.PATH, Script(parts, split=6))
    with _anthropic(gw).messages.stream(model="claude", max_tokens=100, messages=USER) as stream:  # type: ignore[arg-type]
        text = "".join(stream.text_stream)
        msg = stream.get_final_message()
    assert text == "Bonjour" and [b.type for b in msg.content] == ["text"]
    assert msg.stop_reason == "end_turn"


def _anthropic(gw: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="any", max_retries=0, timeout=20)


def interleaved_tool_calls() -> Script:
    """Text, then two calls begun one after the other whose argument fragments alternate, then text that
    comes while the calls are open, the finish and usage apart."""
    def args(index: int, text: str) -> dict[str, Any]:
        return chunk({"tool_calls": [{"index": index, "function": {"arguments": text}}]})

    def call(index: int, cid: str, name: str) -> dict[str, Any]:
        return chunk({"tool_calls": [{"index": index, "id": cid, "type": "function",
                                      "function": {"name": name, "arguments": ""}}]})

    parts = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Checking "}),
             call(0, "call_w", "get_weather"), call(1, "call_t", "get_time"),
             args(0, '{"city": '), args(1, '{"tz": '), args(0, '"Paris"}'), args(1, '"CET"}'),
             chunk({"content": "both."}), chunk({}, "tool_calls"), usage_chunk()]
    return Script([*(sse(p) for p in parts), b"data: [DONE]\n\n"], split=9)


def test_interleaved_parallel_tool_calls_reach_the_anthropic_sdk_whole(upstream: FakeUpstream,
                                                                       gw: GatewayServer) -> None:
    upstream.enqueue(CHAT, interleaved_tool_calls())
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}},
             {"name": "get_time", "input_schema": {"type": "object"}}]
    with _anthropic(gw).messages.stream(model="gpt", max_tokens=300, messages=USER,  # type: ignore[arg-type]
                                        tools=tools) as stream:  # type: ignore[arg-type]
        events = list(stream)
        msg = stream.get_final_message()
    calls = [(b.id, b.name, b.input) for b in msg.content if b.type == "tool_use"]
    assert calls == [("call_w", "get_weather", {"city": "Paris"}), ("call_t", "get_time", {"tz": "CET"})]
    assert "".join(b.text for b in msg.content if b.type == "text") == "Checking both."
    assert msg.stop_reason == "tool_use"
    starts = [e.index for e in events if e.type == "content_block_start"]
    stops = [e.index for e in events if e.type == "content_block_stop"]
    assert starts == stops == sorted(starts), "one block open at a time, each closed before the next"
