"""Anthropic Messages stream, body and errors -> OpenAI shapes and typed events
(gateway.providers.convert.anthropic_stream, gateway.providers.chat_anthropic)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.config.types import ProviderConfig
from gateway.core.chat.assemble import ChatAssembler
from gateway.core.events import (
    DeltaKind,
    FailureKind,
    Finish,
    InbandError,
    OutputDelta,
    StreamEvent,
    ToolCallDelta,
    Usage,
)
from gateway.core.sse import SSEDecoder, SSEEvent
from gateway.providers.base import ChatChunk
from gateway.providers.chat_anthropic import AnthropicChat
from gateway.providers.convert.anthropic_errors import classify_anthropic_http_error
from gateway.providers.convert.anthropic_stream import AnthropicStreamParser, parse_anthropic_body
from tests import anthropic_scripts as a

FIXTURES = Path(__file__).parent.parent / "fixtures" / "anthropic"
CREATED = 1_750_000_000


def run(events: list[dict[str, Any]], *, named: bool = True, typed: bool = True) -> list[ChatChunk]:
    parser = AnthropicStreamParser(CREATED)
    dec = SSEDecoder()
    out: list[ChatChunk] = []
    for ev in dec.feed(b"".join(a.event(e, named=named, typed=typed) for e in events)):
        out += parser.parse(ev)
    return out


def objs(chunks: list[ChatChunk]) -> list[dict[str, Any]]:
    return [c.obj for c in chunks if c.obj is not None]


def events(chunks: list[ChatChunk]) -> list[StreamEvent]:
    return [e for c in chunks for e in c.events]


def deltas(chunks: list[ChatChunk]) -> list[dict[str, Any]]:
    return [o["choices"][0]["delta"] for o in objs(chunks) if o["choices"]]


def test_text_stream_becomes_openai_chunks() -> None:
    chunks = run([a.message_start(), a.ping(), *a.text_block(0, ["Hel", "lo"]), a.message_delta(), a.message_stop()])
    assert deltas(chunks) == [{"role": "assistant", "content": ""}, {"content": "Hel"}, {"content": "lo"}, {}]
    for o in objs(chunks):
        assert (o["id"], o["object"], o["created"], o["model"]) == ("msg_01", "chat.completion.chunk", CREATED,
                                                                    a.MODEL)
    finish = [o for o in objs(chunks) if o["choices"] and o["choices"][0]["finish_reason"]]
    assert [f["choices"][0]["finish_reason"] for f in finish] == ["stop"]
    assert objs(chunks)[-1]["choices"] == [] and objs(chunks)[-1]["usage"]["prompt_tokens"] == 30
    assert chunks[-1].done and chunks[-1].obj is None
    assert all(c.raw is None for c in chunks)
    assert [e for e in events(chunks) if type(e) is OutputDelta] == [
        OutputDelta(0, DeltaKind.CONTENT, "Hel"), OutputDelta(0, DeltaKind.CONTENT, "lo")]


def test_preamble_carries_no_output_token() -> None:
    chunks = run([a.message_start(), a.ping(), a.text_block(0, [])[0]])
    assert deltas(chunks) == [{"role": "assistant", "content": ""}]
    assert not any(type(e) in (OutputDelta, ToolCallDelta) for e in events(chunks))


def test_thinking_becomes_reasoning_content_and_signatures_are_dropped() -> None:
    chunks = run([a.message_start(), *a.thinking_block(0, ["Let me ", "think."]), *a.text_block(1, ["42"]),
                  a.message_delta(), a.message_stop()])
    assert deltas(chunks)[1:4] == [{"reasoning_content": "Let me "}, {"reasoning_content": "think."},
                                   {"content": "42"}]
    asm = ChatAssembler()
    asm.feed(events(chunks))
    assert asm.text(DeltaKind.REASONING) == "Let me think." and asm.text() == "42"


def test_parallel_tool_calls_are_numbered_in_block_order() -> None:
    chunks = run([a.message_start(), *a.text_block(0, ["Checking."]),
                  *a.tool_block(1, "toolu_A", "weather", ['{"city":', '"Oslo"}']),
                  *a.tool_block(2, "toolu_B", "clock", []),
                  a.message_delta("tool_use"), a.message_stop()])
    calls = [d["tool_calls"][0] for d in deltas(chunks) if "tool_calls" in d]
    assert calls == [
        {"index": 0, "id": "toolu_A", "type": "function", "function": {"name": "weather", "arguments": ""}},
        {"index": 0, "function": {"arguments": '{"city":'}},
        {"index": 0, "function": {"arguments": '"Oslo"}'}},
        {"index": 1, "id": "toolu_B", "type": "function", "function": {"name": "clock", "arguments": ""}},
        {"index": 1, "function": {"arguments": "{}"}}]  # a tool without arguments gets "{}" at its block's end
    asm = ChatAssembler()
    asm.feed(events(chunks))
    msg = asm.completion(id="x", model="m", created=1)["choices"][0]
    assert msg["finish_reason"] == "tool_calls"
    assert [(t["id"], t["function"]["arguments"]) for t in msg["message"]["tool_calls"]] == [
        ("toolu_A", '{"city":"Oslo"}'), ("toolu_B", "{}")]


@pytest.mark.parametrize(("stop", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "tool_calls"),
    ("refusal", "content_filter"), ("pause_turn", "stop"), ("model_context_window_exceeded", "length"),
    ("something_new", "stop"),
])
def test_stop_reasons(stop: str, finish: str) -> None:
    chunks = run([a.message_start(), *a.text_block(0, ["x"]), a.message_delta(stop), a.message_stop()])
    assert [e for e in events(chunks) if type(e) is Finish] == [Finish(0, finish)]


def test_refusal_without_content_blocks_finishes() -> None:
    chunks = run([a.message_start(), a.ping(), a.message_delta("refusal"), a.message_stop()])
    asm = ChatAssembler()
    asm.feed(events(chunks))
    assert asm.finished and not asm.first_token


def test_usage_with_cache_counts_and_cumulative_replacement() -> None:
    start = {"input_tokens": 43, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 2000,
             "output_tokens": 1}
    end = {"input_tokens": 61, "output_tokens": 57, "output_tokens_details": {"thinking_tokens": 20}}
    chunks = run([a.message_start(usage=start), *a.text_block(0, ["x"]), a.message_delta("end_turn", end)])
    usages = [e for e in events(chunks) if type(e) is Usage]
    assert usages[-1] == Usage(input=61 + 100 + 2000, output=57, cached_input=2000, cache_creation_input=100,
                               reasoning=20)
    final = objs(chunks)[-1]
    assert final["choices"] == [] and final["usage"] == {
        "prompt_tokens": 2161, "completion_tokens": 57, "total_tokens": 2218,
        "prompt_tokens_details": {"cached_tokens": 2000, "cache_write_tokens": 100},
        "completion_tokens_details": {"reasoning_tokens": 20}}


def test_input_usage_is_known_from_message_start() -> None:
    chunks = run([a.message_start()])
    assert [e for e in events(chunks) if type(e) is Usage] == [Usage(input=30, output=1, cached_input=10)]


@pytest.mark.parametrize(("named", "typed"), [(True, False), (False, True)])
def test_dispatch_on_event_name_or_json_type(named: bool, typed: bool) -> None:
    chunks = run([a.message_start(), *a.text_block(0, ["ok"]), a.message_delta(), a.message_stop()],
                 named=named, typed=typed)
    assert [d.get("content") for d in deltas(chunks)] == ["", "ok", None]
    assert chunks[-1].done


def test_unknown_events_and_blocks_are_ignored() -> None:
    server_tool = [{"type": "content_block_start", "index": 0,
                    "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                                      "input": {}}},
                   {"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": '{"q":"x"}'}},
                   {"type": "content_block_stop", "index": 0},
                   {"type": "content_block_start", "index": 1,
                    "content_block": {"type": "redacted_thinking", "data": "EmwKAhgB"}},
                   {"type": "content_block_delta", "index": 2,
                    "delta": {"type": "citations_delta", "citation": {"type": "char_location"}}},
                   {"type": "brand_new_event", "payload": [1, 2]}]
    chunks = run([a.message_start(), *server_tool, *a.text_block(2, ["text"]), a.message_delta(), a.message_stop()])
    assert [d.get("content") for d in deltas(chunks)] == ["", "text", None]
    assert not any(type(e) is ToolCallDelta for e in events(chunks))


def test_duplicate_message_start_gives_one_role_chunk() -> None:
    chunks = run([a.message_start(), a.message_start("msg_dup"), *a.text_block(0, ["x"]), a.message_delta()])
    assert sum(1 for d in deltas(chunks) if d.get("role")) == 1
    assert {o["id"] for o in objs(chunks)} == {"msg_01"}


def test_role_chunk_comes_first_even_without_message_start() -> None:
    chunks = run([*a.text_block(0, ["x"]), a.message_delta()])
    assert deltas(chunks)[:2] == [{"role": "assistant", "content": ""}, {"content": "x"}]


@pytest.mark.parametrize(("etype", "kind"), [
    ("overloaded_error", FailureKind.INBAND), ("api_error", FailureKind.INBAND),
    ("rate_limit_error", FailureKind.INBAND), ("timeout_error", FailureKind.INBAND),
    ("something_new_error", FailureKind.INBAND),
    ("invalid_request_error", FailureKind.HTTP_4XX), ("request_too_large", FailureKind.HTTP_4XX),
    ("authentication_error", FailureKind.UPSTREAM_AUTH), ("permission_error", FailureKind.UPSTREAM_AUTH),
    ("billing_error", FailureKind.QUOTA),
])
def test_inband_error_is_classified_by_type(etype: str, kind: FailureKind) -> None:
    chunks = run([a.message_start(), a.error_event(etype, "prompt is too long: context length exceeded")])
    errors = [e for e in events(chunks) if type(e) is InbandError]
    assert len(errors) == 1 and errors[0].failure.kind is kind
    assert errors[0].failure.type == etype and chunks[-1].obj is None


def test_fixture_at_every_split_gives_the_same_chunks() -> None:
    data = (FIXTURES / "thinking_text_tools.sse").read_bytes()
    whole = _feed([data])
    for i in range(1, len(data)):
        assert _feed([data[:i], data[i:]]) == whole, i
    asm = ChatAssembler()
    asm.feed(events(whole))
    done = asm.completion(id="x", model="m", created=1)
    msg = done["choices"][0]["message"]
    assert msg["content"] == "Checking Oslo and Paris — één moment 🙂"
    assert msg["reasoning_content"] == "The user wants the weather in two cities; call the tool twice."
    assert [(t["id"], t["function"]["arguments"]) for t in msg["tool_calls"]] == [
        ("toolu_01A", '{"city": "Oslo"}'), ("toolu_01B", '{"city": "Paris"}')]
    assert done["choices"][0]["finish_reason"] == "tool_calls"
    assert asm.usage == Usage(input=472 + 100 + 2048, output=89, cached_input=2048, cache_creation_input=100)


def test_padded_overloaded_error_fixture() -> None:
    chunks = _feed([(FIXTURES / "overloaded_after_start.sse").read_bytes()])
    errors = [e for e in events(chunks) if type(e) is InbandError]
    assert [e.failure.kind for e in errors] == [FailureKind.INBAND]
    assert errors[0].failure.code == "overloaded_error"


def test_non_json_event_is_malformed_but_done_marker_ends() -> None:
    parser = AnthropicStreamParser(CREATED)
    bad = parser.parse(SSEEvent(b"<html>", "content_block_delta"))
    assert type(bad[0].events[0]) is InbandError and bad[0].events[0].failure.kind is FailureKind.MALFORMED
    assert parser.parse(SSEEvent(b"[DONE]"))[0].done


def _feed(parts: list[bytes]) -> list[ChatChunk]:
    parser = AnthropicStreamParser(CREATED)
    dec = SSEDecoder()
    out: list[ChatChunk] = []
    for p in parts:
        for ev in dec.feed(p):
            out += parser.parse(ev)
    return out


# --- non-stream bodies -----------------------------------------------------------------------------

BODY = {"id": "msg_b", "type": "message", "role": "assistant", "model": a.MODEL, "stop_reason": "tool_use",
        "content": [{"type": "thinking", "thinking": "Plan.", "signature": "sig"},
                    {"type": "text", "text": "Calling "}, {"type": "text", "text": "tools."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "clock", "input": {}}],
        "usage": {"input_tokens": 5, "cache_read_input_tokens": 7, "cache_creation_input_tokens": 3,
                  "output_tokens": 9}}


def test_message_body_becomes_a_chat_completion() -> None:
    parsed = parse_anthropic_body(orjson.dumps(BODY), CREATED)
    assert parsed.obj == {
        "id": "msg_b", "object": "chat.completion", "created": CREATED, "model": a.MODEL,
        "choices": [{"index": 0, "logprobs": None, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Calling tools.", "refusal": None, "reasoning_content": "Plan.",
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}},
                {"id": "toolu_2", "type": "function", "function": {"name": "clock", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 15, "completion_tokens": 9, "total_tokens": 24,
                  "prompt_tokens_details": {"cached_tokens": 7, "cache_write_tokens": 3},
                  "completion_tokens_details": {"reasoning_tokens": 0}}}
    assert Usage(input=15, output=9, cached_input=7, cache_creation_input=3) in parsed.events
    assert Finish(0, "tool_calls") in parsed.events


def test_translated_body_reads_back_to_the_same_events() -> None:
    """The pipeline re-reads the (redacted) OpenAI body with the same translator."""
    first = parse_anthropic_body(orjson.dumps(BODY), CREATED)
    again = parse_anthropic_body(orjson.dumps(first.obj), CREATED)
    assert again.obj == first.obj
    asm1, asm2 = ChatAssembler(), ChatAssembler()
    asm1.feed(first.events)
    asm2.feed(again.events)
    assert asm1.completion(id="i", model="m", created=1) == asm2.completion(id="i", model="m", created=1)
    assert asm2.usage == Usage(input=15, output=9, cached_input=7, cache_creation_input=3)


def test_error_and_garbage_bodies() -> None:
    err = parse_anthropic_body(orjson.dumps({"type": "error", "error": {"type": "overloaded_error",
                                                                        "message": "Overloaded"}}), CREATED)
    assert type(err.events[0]) is InbandError and err.events[0].failure.kind is FailureKind.INBAND
    bad = parse_anthropic_body(b"<html>oops</html>", CREATED)
    assert type(bad.events[0]) is InbandError and bad.events[0].failure.kind is FailureKind.MALFORMED


# --- HTTP errors -----------------------------------------------------------------------------------

def _err(etype: str, message: str = "no") -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": etype, "message": message}, "request_id": "req_1"})


@pytest.mark.parametrize(("status", "body", "kind"), [
    (429, _err("rate_limit_error"), FailureKind.HTTP_429),
    (529, _err("overloaded_error"), FailureKind.HTTP_5XX),
    (500, _err("api_error"), FailureKind.HTTP_5XX),
    (504, _err("timeout_error"), FailureKind.HTTP_5XX),
    (400, _err("invalid_request_error", "messages: roles must alternate"), FailureKind.HTTP_4XX),
    (400, _err("invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"), FailureKind.HTTP_4XX),
    (413, _err("request_too_large"), FailureKind.HTTP_4XX),
    (404, _err("not_found_error"), FailureKind.HTTP_4XX),
    (401, _err("authentication_error"), FailureKind.UPSTREAM_AUTH),
    (403, _err("permission_error"), FailureKind.UPSTREAM_AUTH),
    (400, _err("billing_error"), FailureKind.QUOTA),
    (400, orjson.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": "x",
                                                   "code": "context_length_exceeded"}}), FailureKind.CONTEXT_LENGTH),
    (502, b"<html>Bad gateway</html>", FailureKind.HTTP_5XX),
    (429, b"", FailureKind.HTTP_429),
    (418, b"teapot", FailureKind.HTTP_4XX),
])
def test_http_errors_classified_from_structured_fields(status: int, body: bytes, kind: FailureKind) -> None:
    failure = classify_anthropic_http_error(status, {}, body)
    assert failure.kind is kind and failure.status == status
    if body.startswith(b"<"):
        assert "html" not in failure.message.lower()


def test_pass_through_error_keeps_anthropic_reason_and_retry_after_is_honoured() -> None:
    failure = classify_anthropic_http_error(400, {}, _err("invalid_request_error", "max_tokens: too large"))
    assert (failure.message, failure.type) == ("max_tokens: too large", "invalid_request_error")
    limited = classify_anthropic_http_error(429, {"retry-after": "7"}, _err("rate_limit_error"))
    assert limited.retry_after_s == 7.0
    tr = AnthropicChat(ProviderConfig(name="c", type="anthropic", base_url="http://x"))
    assert tr.classify_http_error(529, {"retry-after": "2"}, _err("overloaded_error")).retry_after_s == 2.0
