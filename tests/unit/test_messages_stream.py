"""`MessagesStream` with no socket: Anthropic Messages bodies fed at every two-read split and in random
reads, with redaction and a stream guardrail on, give the client what one read of the whole body gives;
a failure before the first token fails the attempt, after it the stream ends with the text standing."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.core.events import FailureKind, StreamFailed
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.stream import MessagesStream
from gateway.core.sse import SSEDecoder
from gateway.providers.convert.anthropic_messages import AnthropicMessagesStreamParser
from tests import anthropic_scripts as a
from tests.unit.model_safety import safety
from tests.unit.reads import pump_reads, random_reads, splits, the_end

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic"
SECRET = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
MASKED = "token [REDACTED:github_token] then more text."
SIGNATURE = "sig-ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # looks like a secret; is never touched


def sse(objs: list[dict[str, Any]]) -> bytes:
    return b"".join(a.event(o) for o in objs)


def answer(pieces: list[str], *, thinking: list[str] | None = None, tool_json: list[str] | None = None,
           end: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [a.message_start(), a.ping()]
    index = 0
    if thinking is not None:
        block = a.thinking_block(0, thinking)
        block[-2]["delta"]["signature"] = SIGNATURE
        events += block
        index = 1
    events += a.text_block(index, pieces)
    if tool_json is not None:
        events += a.tool_block(index + 1, "toolu_01", "get_weather", tool_json)
    return events + (end if end is not None else [a.message_delta("end_turn"), a.message_stop()])


SECRET_PIECES = ["token ", SECRET[:7], SECRET[7:20], SECRET[20:], " then ", "more ", "text."]
SECRET_BODY = sse(answer(SECRET_PIECES))
THINKING_BODY = sse(answer(["the ", "answer ", SECRET[:9], SECRET[9:]], thinking=["let me ", SECRET[:5], SECRET[5:]],
                           tool_json=['{"city": "', SECRET[:10], SECRET[10:] + '"}']))
GUARDED_BODY = sse(answer(["all ", "fine, ", "then Project ", "Nightin", "gale ", "ends ", "here."]))
LATE_ERROR = a.error_event("overloaded_error", "Overloaded")
FAILS_AFTER_TOKEN = sse([*answer(["partial ", "answer"], end=[])[:-1], LATE_ERROR])  # no block stop
BODIES = {
    "recorded_thinking_text_tools": (FIXTURES / "thinking_text_tools.sse").read_bytes(),
    "secret_across_text_deltas": SECRET_BODY,
    "thinking_text_and_tool": THINKING_BODY,
    "guardrail_term_across_deltas": GUARDED_BODY,
    "failure_after_the_first_token": FAILS_AFTER_TOKEN,
}


def relay(reads: list[bytes], guard: bool, redaction: bool = True) -> tuple[bytes, MessagesStream]:
    """What the pipeline does with a MessagesStream, minus the sockets: hold until committable, commit,
    feed each read, stop at the core's end or a refusal; then the windows' tail and the kept end (or
    the failure, forwarded as it came)."""
    run = safety(guard).start() if redaction else None
    stream = MessagesStream(AnthropicMessagesStreamParser(), "p/x")
    filt = MessagesOutputFilter(run.factory if run is not None else None)
    out = pump_reads(stream, filt, reads, must_commit=True)
    out.append(the_end(stream, filt))
    return b"".join(out), stream


def events_of(client: bytes) -> list[dict[str, Any]]:
    """The client's events, each with its name equal to its JSON type, as the SDK decoder reads them."""
    decoder = SSEDecoder()
    events = decoder.feed(client)
    assert not decoder.finish()
    out = []
    for ev in events:
        obj = orjson.loads(ev.data)
        assert ev.event == obj["type"]
        out.append(obj)
    return out


def texts(client: bytes) -> dict[tuple[int, str], str]:
    """The streamed text per content block and delta type."""
    got: dict[tuple[int, str], str] = {}
    for obj in events_of(client):
        if obj["type"] == "content_block_delta":
            d = obj["delta"]
            field = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature",
                     "input_json_delta": "partial_json"}[d["type"]]
            key = (obj["index"], d["type"])
            got[key] = got.get(key, "") + d[field]
    return got


def reading(client: bytes) -> tuple[dict[tuple[int, str], str], list[dict[str, Any]]]:
    """What the client reads: the text of each block and delta type, and every other event as it came.
    Which delta carries a piece of text may change with the split (the window releases a read's deltas
    together, and holds a word cut at the end of a read until the next); the text and the events may not."""
    others = [o for o in events_of(client) if not (o["type"] == "content_block_delta"
                                                   and o["delta"]["type"] in ("text_delta", "thinking_delta"))]
    return texts(client), others


@pytest.mark.parametrize("name", BODIES)
@pytest.mark.parametrize("guard", [False, True], ids=["redaction", "redaction+guardrail"])
def test_every_split_gives_the_same_client_events(name: str, guard: bool) -> None:
    body = BODIES[name]
    whole = reading(relay([body], guard)[0])
    assert whole[0]
    for reads in splits(body):
        assert reading(relay(reads, guard)[0]) == whole, f"split at {len(reads[0])}"


@pytest.mark.parametrize("name", BODIES)
def test_random_reads_give_the_same_client_events(name: str) -> None:
    body = BODIES[name]
    rng = random.Random(name)
    whole = reading(relay([body], True)[0])
    for _ in range(50):
        assert reading(relay(random_reads(body, rng), True)[0]) == whole


def test_without_a_filter_every_event_leaves_as_the_upstreams_bytes() -> None:
    body = (FIXTURES / "thinking_text_tools.sse").read_bytes()
    for reads in [[body], *splits(body)]:
        out, stream = relay(reads, guard=False, redaction=False)
        assert out == body
        assert stream.done and stream.assembler.finished


def test_a_secret_split_across_text_deltas_is_masked_whole() -> None:
    for reads in splits(SECRET_BODY):
        out, _ = relay(reads, guard=False)
        assert SECRET[:4].encode() not in out
        assert texts(out) == {(0, "text_delta"): MASKED}
        names = [o["type"] for o in events_of(out)]
        assert names[:3] == ["message_start", "ping", "content_block_start"]
        assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
        assert names.count("message_start") == 1


def test_thinking_is_masked_the_signature_and_tool_input_never_are() -> None:
    for reads in [[THINKING_BODY], *splits(THINKING_BODY)]:
        out, _ = relay(reads, guard=False)
        got = texts(out)
        assert got[(0, "thinking_delta")] == "let me [REDACTED:github_token]"
        assert got[(0, "signature_delta")] == SIGNATURE
        assert got[(1, "text_delta")] == "the answer [REDACTED:github_token]"
        assert orjson.loads(got[(2, "input_json_delta")]) == {"city": SECRET}  # parseable, untouched


def test_usage_comes_from_message_start_and_message_delta() -> None:
    body = sse(answer(["hi"], end=[a.message_delta("end_turn", {"input_tokens": 30, "output_tokens": 7,
                                                                 "output_tokens_details": {"thinking_tokens": 2}}),
                                   a.message_stop()]))
    _, stream = relay([body], guard=False)
    u = stream.assembler.usage
    assert u is not None
    # message_delta's input replaces message_start's 20; the cache read (10) counts as input too
    assert (u.input, u.output, u.cached_input, u.reasoning) == (40, 7, 10, 2)


def test_the_guardrail_stops_the_text_at_the_term() -> None:
    out, stream = relay([GUARDED_BODY], guard=True)
    assert stream.filt is not None and stream.filt.refusal is not None
    assert texts(out) == {(0, "text_delta"): "all fine, then "}
    assert "message_delta" not in [o["type"] for o in events_of(out)]


def test_the_preamble_is_held_until_the_first_delta() -> None:
    stream = MessagesStream(AnthropicMessagesStreamParser(), "p/x")
    first = SECRET_BODY.index(b"event: content_block_delta")
    assert stream.feed(SECRET_BODY[:first]) == b"" and not stream.committable
    assert [ev.type for ev in stream.preamble] == ["message_start", "ping", "content_block_start"]
    stream.feed(SECRET_BODY[first:])
    assert stream.committable and stream.preamble[-1].events and (stream.unread or stream.unread_frames)
    assert stream.commit(MessagesOutputFilter(None)) and stream.terminal


@pytest.mark.parametrize("body", [(FIXTURES / "overloaded_after_start.sse").read_bytes(),
                                  sse([a.message_start(), a.ping(), a.text_block(0, [])[0],
                                       a.error_event("overloaded_error")])],
                         ids=["recorded", "after_a_block_start"])
def test_an_error_before_the_first_token_fails_the_attempt_at_every_split(body: bytes) -> None:
    for reads in [[body], *splits(body)]:
        stream = MessagesStream(AnthropicMessagesStreamParser(), "p/x")
        with pytest.raises(StreamFailed) as failed:
            for data in reads:
                stream.feed(data)
        assert failed.value.failure.kind is FailureKind.INBAND
        assert failed.value.failure.code == "overloaded_error"
        assert not stream.committable and stream.filt is None


def test_an_error_after_the_first_token_ends_the_stream_and_the_text_stands() -> None:
    for reads in [[FAILS_AFTER_TOKEN], *splits(FAILS_AFTER_TOKEN)]:
        out, stream = relay(reads, guard=False)
        assert stream.failed is not None and stream.failed.failure is not None and stream.done
        assert not stream.terminal
        assert texts(out) == {(0, "text_delta"): "partial answer"}
        names = [o["type"] for o in events_of(out)]
        assert names[-1] == "error" and names.count("error") == 1


def test_a_refusal_without_blocks_is_an_answer() -> None:
    body = sse([a.message_start(), a.ping(), a.message_delta("refusal"), a.message_stop()])
    for reads in [[body], *splits(body)]:
        out, stream = relay(reads, guard=False)
        assert [o["type"] for o in events_of(out)] == ["message_start", "ping", "message_delta", "message_stop"]
        assert stream.assembler.stop_reason == "refusal"


def test_a_duplicate_message_start_is_dropped() -> None:
    events = answer(["a", "b"])
    body = sse([*events[:4], a.message_start("msg_dup"), *events[4:]])
    out, _ = relay([body], guard=False)
    assert [o["type"] for o in events_of(out)].count("message_start") == 1


def test_a_whole_message_is_replayed_as_the_stream_it_would_have_been() -> None:
    _, streamed = relay([THINKING_BODY], guard=False, redaction=False)
    msg = streamed.assembler.message()
    assert [b["type"] for b in msg["content"]] == ["thinking", "text", "tool_use"]
    assert msg["content"][0]["signature"] == SIGNATURE and msg["content"][2]["input"] == {"city": SECRET}
    stream = MessagesStream(AnthropicMessagesStreamParser(), "p/x")
    stream.hold_message(msg)
    out = stream.commit(MessagesOutputFilter(None)) + b"".join(
        MessagesOutputFilter(None).apply(ev) for ev in stream.terminal)
    assert stream.assembler.message() == msg
    assert texts(out)[(1, "text_delta")] == "the answer " + SECRET


def test_an_unreadable_event_after_the_first_token_is_skipped_and_counted() -> None:
    events = answer(["still ", "here"])
    broken = b"event: content_block_delta\ndata: {not json\n\n"
    body = sse(events[:4]) + broken + sse(events[4:])
    for reads in [[body], *splits(body)]:
        out, stream = relay(reads, guard=False)
        assert texts(out) == {(0, "text_delta"): "still here"} and stream.skipped_malformed == 1
        assert stream.terminal and stream.failed is None


def test_a_block_whose_type_is_no_string_is_an_unknown_block() -> None:
    """An upstream's `"type": []` (unhashable) on a block, at its start or in a whole message: a block the
    core knows nothing of, passed on, never a crash of the stream or of the Message it assembles."""
    odd = {"type": "content_block_start", "index": 0, "content_block": {"type": []}}
    events = answer(["after ", "it"])
    for e in events:  # the text block moves to index 1
        if "index" in e:
            e["index"] = 1
    body = sse([*events[:2], odd, {"type": "content_block_stop", "index": 0}, *events[2:]])
    for reads in [[body], *splits(body)]:
        out, stream = relay(reads, guard=True)
        assert texts(out) == {(1, "text_delta"): "after it"}
        assert [b["type"] for b in stream.assembler.message()["content"]] == [[], "text"]
