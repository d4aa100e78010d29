"""Responses events and response objects -> typed events and an assembled answer, fed values only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.core.events import DeltaKind, FailureKind, Finish, InbandError, OutputDelta, ToolCallDelta, Usage
from gateway.core.responses.assemble import ResponsesAssembler
from gateway.core.responses.wire import ResponsesEvent, ResponsesParser, classify_stream_error, parse_usage
from gateway.core.sse import SSEDecoder
from gateway.providers.convert.responses_pass_through import OpenAIResponsesStreamParser, parse_responses_body

FIXTURES = Path(__file__).parent.parent / "fixtures" / "responses"


def parse_stream(raw: bytes, pieces: list[bytes] | None = None) -> tuple[list[ResponsesEvent], ResponsesAssembler]:
    dec, parser, asm = SSEDecoder(), OpenAIResponsesStreamParser(), ResponsesAssembler()
    out: list[ResponsesEvent] = []
    for piece in pieces or [raw]:
        for sse in dec.feed(piece):
            for ev in parser.parse(sse):
                asm.feed(ev)
                out.append(ev)
    dec.finish()
    return out, asm


def summary(asm: ResponsesAssembler) -> tuple[Any, ...]:
    tools = {i: (t.call_id, t.name, "".join(t.arguments)) for i, t in asm.tools.items()}
    return asm.texts(), tools, asm.usage, asm.status, asm.error


def test_fixture_assembles_the_same_at_every_split() -> None:
    raw = (FIXTURES / "text_reasoning_tool.sse").read_bytes()
    _, whole = parse_stream(raw)
    assert whole.texts() == {(0, "summary", 0): "Weighing the options.",
                             (1, "content", 0): "Hello, wörld — изв\u2028естни 🙂"}
    assert whole.text(DeltaKind.CONTENT) == "Hello, wörld — изв\u2028естни 🙂"
    assert whole.text(DeltaKind.REASONING) == "Weighing the options."
    call = whole.tools[2]
    assert (call.call_id, call.name, "".join(call.arguments)) == ("call_abc", "get_weather", '{"city":"Paris"}')
    assert whole.usage == Usage(input=11, output=7, cached_input=3, reasoning=2)
    assert whole.status == "completed" and whole.finished and whole.first_token and whole.error is None
    for i in range(1, len(raw)):
        _, asm = parse_stream(raw, [raw[:i], raw[i:]])
        assert summary(asm) == summary(whole), i


def test_the_body_and_the_completed_event_are_read_by_the_same_code() -> None:
    _, streamed = parse_stream((FIXTURES / "text_reasoning_tool.sse").read_bytes())
    body = parse_responses_body((FIXTURES / "text_reasoning_tool.body.json").read_bytes())
    from_body = ResponsesAssembler()
    from_body.feed_response(body.obj)
    assert summary(from_body) == summary(streamed)
    kinds = [type(e) for e in body.events]
    assert kinds == [OutputDelta, OutputDelta, ToolCallDelta, Usage, Finish]
    assert body.events[1] == OutputDelta(1, DeltaKind.CONTENT, "Hello, wörld — изв\u2028естни 🙂")


def test_delta_events_are_output_tokens_and_the_preamble_is_not() -> None:
    events, _ = parse_stream((FIXTURES / "text_reasoning_tool.sse").read_bytes())
    first = next(i for i, e in enumerate(events) if e.has_token)
    assert [e.type for e in events[:first + 1]] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta"]
    assert events[first].key == (0, "summary", 0) and events[first].kind is DeltaKind.REASONING
    assert all(e.failure is None for e in events)


def test_usage_is_normalised() -> None:
    u = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 10},
         "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 20}, "total_tokens": 130}
    assert parse_usage(u) == Usage(input=100, output=30, cached_input=40, cache_creation_input=10, reasoning=20)
    assert parse_usage(None) is None
    assert parse_usage({"input_tokens": True, "output_tokens": "3"}) == Usage()


ERRORS: list[tuple[dict[str, Any], FailureKind, str | None]] = [
    ({"type": "error", "error": {"type": "tokens", "code": "rate_limit_exceeded", "message": "slow down"}},
     FailureKind.INBAND, "rate_limit_exceeded"),
    ({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": None},
     FailureKind.INBAND, "rate_limit_exceeded"),
    ({"type": "error", "code": "server_error", "message": "oops"}, FailureKind.INBAND, "server_error"),
    ({"type": "error", "error": {"type": "insufficient_quota", "code": "insufficient_quota", "message": "m"}},
     FailureKind.QUOTA, "insufficient_quota"),
    ({"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error",
                                                                          "message": "m"}}},
     FailureKind.INBAND, "server_error"),
    ({"type": "response.failed", "response": {"status": "failed", "error": {"code": "rate_limit_exceeded",
                                                                          "message": "m"}}},
     FailureKind.INBAND, "rate_limit_exceeded"),
    ({"type": "response.failed", "response": {"status": "failed", "error": {"code": "insufficient_quota",
                                                                          "message": "m"}}},
     FailureKind.QUOTA, "insufficient_quota"),
    ({"type": "response.failed", "response": {"status": "failed", "error": {"code": "invalid_prompt",
                                                                          "message": "m"}}},
     FailureKind.HTTP_4XX, "invalid_prompt"),
    ({"type": "error", "error": {"code": "context_length_exceeded", "type": "invalid_request_error",
                                 "message": "m"}}, FailureKind.CONTEXT_LENGTH, "context_length_exceeded"),
    ({"type": "too_many_requests", "code": "too_many_requests", "message": "Too Many Requests"},
     FailureKind.INBAND, "too_many_requests"),
    ({"type": "error", "error": "something broke"}, FailureKind.INBAND, None),
    ({"type": "response.failed", "response": {"status": "failed"}}, FailureKind.INBAND, None),
]


@pytest.mark.parametrize(("obj", "kind", "code"), ERRORS)
def test_inband_errors_are_classified_from_structured_fields(obj: dict[str, Any], kind: FailureKind,
                                                             code: str | None) -> None:
    ev = ResponsesParser().parse(obj, orjson.dumps(obj))
    failure = ev.failure
    assert failure is not None and failure.kind is kind and failure.code == code
    assert classify_stream_error(obj) == failure or ev.type == "response.failed"
    if kind is FailureKind.HTTP_4XX:
        assert failure.status == 400 and failure.type == "invalid_request_error"


def test_recorded_quota_sequence_fails_at_the_error_event() -> None:
    events, asm = parse_stream((FIXTURES / "error_quota.sse").read_bytes())
    assert [e.type for e in events] == ["response.created", "response.in_progress", "error", "response.failed"]
    assert [e.failure.kind if e.failure else None for e in events] == [None, None, FailureKind.QUOTA,
                                                                       FailureKind.QUOTA]
    assert not asm.first_token and not asm.finished and asm.error is not None


def test_unknown_events_missing_type_and_missing_output_index() -> None:
    p = ResponsesParser()
    unknown = p.parse({"type": "response.web_search_call.searching", "output_index": 0}, b"{}")
    assert unknown.type == "response.web_search_call.searching" and unknown.events == [] and unknown.key is None
    named = p.parse({"delta": "x", "item_id": "msg_9", "content_index": 0}, b"{}", "response.output_text.delta")
    assert named.events == [OutputDelta(0, DeltaKind.CONTENT, "x")]
    p.parse({"type": "response.output_item.added", "output_index": 3, "item": {"id": "msg_9", "type": "message"}},
            b"{}")
    later = p.parse({"type": "response.output_text.delta", "item_id": "msg_9", "content_index": 1, "delta": "y"},
                    b"{}")
    assert later.key == (3, "content", 1) and later.events == [OutputDelta(3, DeltaKind.CONTENT, "y")]
    empty = p.parse({"type": "response.output_text.delta", "output_index": 0, "delta": ""}, b"{}")
    assert not empty.has_token


def test_malformed_events_and_bodies() -> None:
    from gateway.core.sse import SSEEvent

    [bad] = OpenAIResponsesStreamParser().parse(SSEEvent(b"{not json"))
    assert bad.failure is not None and bad.failure.kind is FailureKind.MALFORMED and bad.obj is None
    [done] = OpenAIResponsesStreamParser().parse(SSEEvent(b"[DONE]"))
    assert done.done
    for body in (b"[]", b"{}", b"not json", b'{"object": "response"}'):
        [err] = parse_responses_body(body).events
        assert isinstance(err, InbandError) and err.failure.kind is FailureKind.MALFORMED
    failed = parse_responses_body(orjson.dumps({"status": "failed", "output": [],
                                                "error": {"code": "server_error", "message": "x"}}))
    assert [type(e) for e in failed.events] == [InbandError]
    assert parse_responses_body(b'\n\n{"status": "incomplete", "output": []}').events == [Finish(0, "incomplete")]


def test_a_replayed_body_assembles_like_the_stream_and_ends_with_the_body() -> None:
    from gateway.core.responses.replay import replay_events

    _, streamed = parse_stream((FIXTURES / "text_reasoning_tool.sse").read_bytes())
    body = orjson.loads((FIXTURES / "text_reasoning_tool.body.json").read_bytes())
    events = replay_events(body)
    parser, asm = ResponsesParser(), ResponsesAssembler()
    for e in events:
        asm.feed(parser.parse(e, None))
    assert summary(asm) == summary(streamed)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created" and events[0]["response"]["output"] == []
    assert events[-1] == {"type": "response.completed", "response": body, "sequence_number": len(events) - 1}
    recorded = [orjson.loads(ev.data)["type"] for ev in SSEDecoder().feed(
        (FIXTURES / "text_reasoning_tool.sse").read_bytes())]
    deltas_merged = [t for i, t in enumerate(recorded) if not (t.endswith(".delta") and recorded[i - 1] == t)]
    assert [e["type"] for e in events] == deltas_merged, "the same events, one delta per text"
    assert replay_events({**body, "status": "incomplete"})[-1]["type"] == "response.incomplete"
