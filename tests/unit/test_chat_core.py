"""Chat chunk parsing, error classification, assembly and re-emission, fed values only."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gateway.core.chat.assemble import ChatAssembler, completion_to_chunks
from gateway.core.chat.wire import UNNUMBERED, chunk_events, has_output_token, parse_usage
from gateway.core.error_object import classify_error_object
from gateway.core.events import (
    DeltaKind,
    FailureKind,
    Finish,
    InbandError,
    OutputDelta,
    ToolCallDelta,
    Usage,
)
from gateway.core.sse import SSEDecoder

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sse"


def assemble_fixture(name: str, split: int | None = None) -> ChatAssembler:
    raw = (FIXTURES / name).read_bytes()
    pieces = [raw] if split is None else [raw[i:i + split] for i in range(0, len(raw), split)]
    dec, asm = SSEDecoder(), ChatAssembler()
    for p in pieces:
        for ev in dec.feed(p):
            if ev.data != b"[DONE]":
                asm.feed(chunk_events(orjson.loads(ev.data)))
    return asm


@pytest.mark.parametrize("split", [None, 1, 2, 3, 7])
def test_text_fixture_assembles_the_same_at_any_split(split: int | None) -> None:
    asm = assemble_fixture("chat_text.sse", split)
    assert asm.text() == "Hello, wörld — изв\u2028естни 🙂"
    assert asm.finished and asm.first_token
    assert asm.usage == Usage(input=5, output=3, cached_input=2)


def test_parallel_tool_calls_with_interleaved_fragments() -> None:
    asm = assemble_fixture("chat_tools.sse", 5)
    body = asm.completion(id="x", model="m", created=1)
    calls = body["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("call_a", "get_weather", '{"city":"Paris"}'), ("call_b", "get_time", '{"tz":"UTC"}')]
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_reasoning_and_usage_on_the_finish_chunk() -> None:
    asm = assemble_fixture("chat_reasoning_usage_on_finish.sse")
    assert asm.text(DeltaKind.REASONING) == "Let me think hard."
    assert asm.text() == "42"
    assert asm.usage == Usage(input=10, output=12, reasoning=9)


def test_multiline_data_event_is_one_chunk() -> None:
    assert assemble_fixture("chat_multiline_data.sse").text() == "two lines"


def test_role_only_and_empty_content_are_not_output_tokens() -> None:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    assert not has_output_token(chunk_events(role))
    assert has_output_token(chunk_events({"choices": [{"index": 0, "delta": {"refusal": "no"}}]}))
    assert has_output_token(chunk_events({"choices": [{"delta": {"reasoning": "hm"}}]}))
    tool = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}}]}
    assert has_output_token(chunk_events(tool))


def test_choices_keep_their_index_for_n_greater_than_one() -> None:
    events = chunk_events({"choices": [{"index": 1, "delta": {"content": "b"}},
                                       {"index": 0, "delta": {"content": "a"}, "finish_reason": "stop"}]})
    assert events == [OutputDelta(1, DeltaKind.CONTENT, "b"), OutputDelta(0, DeltaKind.CONTENT, "a"),
                      Finish(0, "stop")]


def test_tool_calls_without_index_are_unnumbered_in_a_chunk_and_placed_in_a_body() -> None:
    calls = [{"id": "a", "function": {"name": "f", "arguments": "{}"}},
             {"id": "b", "function": {"name": "g", "arguments": "{}"}, "index": True}]
    events = chunk_events({"choices": [{"delta": {"tool_calls": calls}}]})
    assert [e.index for e in events if isinstance(e, ToolCallDelta)] == [UNNUMBERED, UNNUMBERED]
    events = chunk_events({"choices": [{"message": {"tool_calls": calls}}]}, message_key="message")
    assert [e.index for e in events if isinstance(e, ToolCallDelta)] == [0, 1]


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": 3, "completion_tokens": 4}, Usage(3, 4)),
    ({"prompt_tokens": 3, "completion_tokens": 4, "prompt_cache_hit_tokens": 2}, Usage(3, 4, 2)),
    # cache writes (the newer CompletionUsage field; this gateway's own chat answers carry it too)
    ({"prompt_tokens": 900, "completion_tokens": 4,
      "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 700}}, Usage(900, 4, 100, 700)),
    # xAI: completion excludes reasoning, total includes it
    ({"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 354,
      "completion_tokens_details": {"reasoning_tokens": 340}}, Usage(12, 342, reasoning=340)),
])
def test_usage_normalisation(usage: dict[str, object], expected: Usage) -> None:
    assert parse_usage({"usage": usage}) == expected


def test_groq_usage_under_x_groq_and_null_usage_ignored() -> None:
    assert parse_usage({"x_groq": {"usage": {"prompt_tokens": 1, "completion_tokens": 2}}}) == Usage(1, 2)
    assert parse_usage({"usage": None}) is None


@pytest.mark.parametrize(("err", "status", "kind"), [
    ({"code": "rate_limit_exceeded", "type": "requests"}, None, FailureKind.INBAND),
    ({"code": "server_error"}, None, FailureKind.INBAND),
    ({"code": 500, "type": "InternalServerError"}, None, FailureKind.INBAND),  # vLLM: numeric code
    ({"code": "insufficient_quota", "type": "insufficient_quota"}, 429, FailureKind.QUOTA),
    ({"code": "context_length_exceeded"}, 400, FailureKind.CONTEXT_LENGTH),
    ({"code": "content_policy_violation", "type": "invalid_request_error"}, 400, FailureKind.HTTP_4XX),
    ({"code": "tool_use_failed", "type": "invalid_request_error"}, None, FailureKind.HTTP_4XX),
    ({"param": "stream_options", "code": "unknown_parameter"}, 400, FailureKind.STREAM_OPTIONS_REJECTED),
    ({"param": "stream"}, 400, FailureKind.STREAM_REJECTED),
    ({"code": None}, 503, FailureKind.HTTP_5XX),
    ({}, 408, FailureKind.HTTP_5XX),
    ({}, 429, FailureKind.HTTP_429),
    ({}, 401, FailureKind.UPSTREAM_AUTH),
    ({"code": 402, "message": "Insufficient credits"}, 402, FailureKind.QUOTA),
])
def test_error_classification_uses_structured_fields(err: dict[str, object], status: int | None,
                                                     kind: FailureKind) -> None:
    assert classify_error_object(err, status).kind is kind


def test_inband_errors_in_chunks() -> None:
    (e,) = chunk_events({"error": {"message": "overloaded", "code": "server_error"}})
    assert isinstance(e, InbandError) and e.failure.kind is FailureKind.INBAND
    (e,) = chunk_events({"error": "Input validation error"})  # TGI: error is a string
    assert isinstance(e, InbandError)
    openrouter = {"error": {"code": "server_error", "message": "x"},
                  "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]}
    assert isinstance(chunk_events(openrouter)[0], InbandError)
    assert isinstance(chunk_events([1, 2])[0], InbandError)  # not an object: malformed


def test_completion_round_trips_through_chunks() -> None:
    asm = assemble_fixture("chat_tools.sse")
    body = asm.completion(id="c", model="m", created=1)
    again = ChatAssembler()
    for chunk in completion_to_chunks(body):
        again.feed(chunk_events(chunk))
    assert again.completion(id="c", model="m", created=1) == body


def test_completion_to_chunks_puts_usage_last_in_its_own_chunk() -> None:
    body = {"id": "c", "created": 1, "model": "m", "usage": {"prompt_tokens": 1, "completion_tokens": 1},
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    chunks = completion_to_chunks(body)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 1
    assert [c["choices"][0]["delta"] for c in chunks[:-1]] == [
        {"role": "assistant", "content": ""}, {"content": "hi"}, {}]


def test_content_added_from_bytes_one_by_one_or_a_read_at_a_time_assembles_alike() -> None:
    one, read = ChatAssembler(), ChatAssembler()
    for t in ["Hel", "lo", " there"]:
        one.add_content(0, t)
    read.add_contents(0, ["Hel", "lo"])
    read.add_contents(0, [])
    read.add_contents(0, [" there"])
    assert one.text() == read.text() == "Hello there" and one.first_token and read.first_token
    empty = ChatAssembler()
    empty.add_contents(0, [])
    assert not empty.first_token


def test_the_reasoning_under_both_names_is_read_once() -> None:
    """A server that writes the reasoning under both names (`reasoning_content` and `reasoning`, the same
    text) gives one answer with it once: as a stream, and as a body re-emitted as chunks (both names in
    one delta, as a stream has them), whatever reads it (assembler, translators, the cache)."""
    chunk = {"choices": [{"index": 0, "delta": {"reasoning_content": "Hmm.", "reasoning": "Hmm."}}]}
    assert [(e.kind, e.text) for e in chunk_events(chunk) if isinstance(e, OutputDelta)] == [
        (DeltaKind.REASONING, "Hmm.")]
    body = {"id": "c", "created": 1, "model": "m", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": "42", "reasoning_content": "Hmm.", "reasoning": "Hmm."},
        "finish_reason": "stop"}]}
    chunks = completion_to_chunks(body)
    assert {"reasoning_content": "Hmm.", "reasoning": "Hmm."} in [c["choices"][0]["delta"] for c in chunks]
    asm = ChatAssembler()
    for c in chunks:
        asm.feed(chunk_events(c))
    assert asm.text(DeltaKind.REASONING) == "Hmm." and asm.text() == "42"
