"""`ResponsesStream` with no socket: recorded Responses bodies fed in every two-read split and in random
reads, with redaction and a stream guardrail on, give the client what one read of the whole body gives;
failures before the first token fail the attempt, after it they end the stream with the text standing."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.core.events import FailureKind, StreamFailed
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.providers.convert.responses_pass_through import OpenAIResponsesStreamParser
from tests.unit.model_safety import safety
from tests.unit.reads import pump_reads, random_reads, splits, the_end

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "responses"
SECRET = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
MASKED = "token [REDACTED:github_token] then more text."


def sse(objs: list[dict[str, Any]]) -> bytes:
    return b"".join(b"event: " + o["type"].encode() + b"\ndata: " + orjson.dumps(o) + b"\n\n" for o in objs)


def message_events(parts: list[str], end: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A one-message answer as OpenAI streams it: lifecycle, item and part, one delta per part, the
    text's `done` copies, and `end` (by default `response.completed` carrying the whole text)."""
    text = "".join(parts)
    resp = {"id": "r", "object": "response", "status": "in_progress", "output": [], "usage": None}
    ids = {"item_id": "m0", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"id": "m0", "type": "message", "role": "assistant", "status": "completed", "content": [part]}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": resp},
        {"type": "response.in_progress", "response": resp},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**item, "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", **ids, "part": {**part, "text": ""}},
        *({"type": "response.output_text.delta", **ids, "delta": p, "logprobs": []} for p in parts),
        {"type": "response.output_text.done", **ids, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **ids, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
    ]
    events += end if end is not None else [{"type": "response.completed", "response": {
        **resp, "status": "completed", "output": [item], "usage": {"input_tokens": 3, "output_tokens": 9}}}]
    for n, ev in enumerate(events):
        ev["sequence_number"] = n + 7  # an upstream numbering the client never sees
    return events


SECRET_BODY = sse(message_events(["token ", SECRET[:7], SECRET[7:20], SECRET[20:], " then ", "more ", "text."]))
GUARDED_BODY = sse(message_events(["all ", "fine, ", "then Project ", "Nightin", "gale ", "ends ", "here."]))
FAILED_LATE = {"type": "error", "error": {"type": "server_error", "code": "server_error", "message": "boom"}}
FAILS_AFTER_TOKEN = sse([*message_events(["partial ", "answer"])[:6], FAILED_LATE])
BODIES = {
    "text_reasoning_tool": (FIXTURES / "text_reasoning_tool.sse").read_bytes(),
    "secret_across_deltas": SECRET_BODY,
    "guardrail_term_across_deltas": GUARDED_BODY,
    "failure_after_the_first_token": FAILS_AFTER_TOKEN,
}


def relay(reads: list[bytes], guard: bool) -> tuple[bytes, ResponsesStream]:
    """What the pipeline does with a ResponsesStream, minus the sockets: hold until committable, commit,
    feed each read, stop at the core's end or a refusal; then the windows' tail and the kept terminal
    event (or the failure, forwarded as it came)."""
    run = safety(guard).start()
    assert run is not None
    stream = ResponsesStream(OpenAIResponsesStreamParser(), "p/x")
    filt = ResponsesOutputFilter(run.factory)
    out = pump_reads(stream, filt, reads, must_commit=True)
    out.append(the_end(stream, filt))
    return b"".join(out), stream


def events_of(client: bytes) -> list[dict[str, Any]]:
    """The client's events, checked for their framing and for one numbering 0, 1, 2, ..."""
    assert client.endswith(b"\n\n") or not client
    events = []
    for n, frame in enumerate(f for f in client.split(b"\n\n") if f):
        name, data = frame.split(b"\n")
        obj = orjson.loads(data.removeprefix(b"data: "))
        assert name == b"event: " + obj["type"].encode() and obj["sequence_number"] == n
        events.append(obj)
    return events


def reading(client: bytes) -> tuple[dict[tuple[int, str], str], list[dict[str, Any]]]:
    """The streamed text per output item and delta type, and every other event as it came."""
    texts: dict[tuple[int, str], str] = {}
    others = []
    for obj in events_of(client):
        if obj["type"].endswith(".delta"):
            slot = (obj["output_index"], obj["type"])
            texts[slot] = texts.get(slot, "") + obj["delta"]
        else:
            others.append(obj)
    return texts, others


@pytest.mark.parametrize("name", BODIES)
@pytest.mark.parametrize("guard", [False, True], ids=["redaction", "redaction+guardrail"])
def test_every_split_gives_the_one_read_bytes(name: str, guard: bool) -> None:
    """Byte for byte: the Responses filter releases text per delta, whatever reads brought it, and
    numbers what it sends itself, so the split of the upstream's bytes cannot show."""
    body = BODIES[name]
    whole, _ = relay([body], guard)
    assert reading(whole)[0]  # every body answers some text
    for reads in splits(body):
        assert relay(reads, guard)[0] == whole, f"split at {len(reads[0])}"


@pytest.mark.parametrize("name", BODIES)
def test_random_reads_give_the_one_read_bytes(name: str) -> None:
    body = BODIES[name]
    rng = random.Random(name)
    whole, _ = relay([body], True)
    for _ in range(50):
        assert relay(random_reads(body, rng), True)[0] == whole


def test_the_secret_is_masked_whole_in_every_copy_and_never_leaves_in_part() -> None:
    for reads in splits(SECRET_BODY):
        out, stream = relay(reads, guard=False)
        assert SECRET[:4].encode() not in out
        texts, others = reading(out)
        assert texts == {(0, "response.output_text.delta"): MASKED}
        done = {o["type"]: o for o in others}
        assert done["response.output_text.done"]["text"] == MASKED
        assert done["response.content_part.done"]["part"]["text"] == MASKED
        assert done["response.output_item.done"]["item"]["content"][0]["text"] == MASKED
        completed = done["response.completed"]["response"]
        assert completed["output"][0]["content"][0]["text"] == MASKED
        assert stream.terminal is not None and not stream.ended_early


def test_the_guardrail_stops_the_text_at_the_term() -> None:
    out, stream = relay([GUARDED_BODY], guard=True)
    assert stream.filt is not None and stream.filt.refusal is not None
    texts, others = reading(out)
    assert texts == {(0, "response.output_text.delta"): "all fine, then "}
    assert "response.completed" not in [o["type"] for o in others]  # the refusal holds the end back


def test_the_preamble_is_held_until_the_first_token() -> None:
    stream = ResponsesStream(OpenAIResponsesStreamParser(), "p/x")
    first_delta = SECRET_BODY.index(b"event: response.output_text.delta")
    assert stream.feed(SECRET_BODY[:first_delta]) == b"" and not stream.committable
    assert [ev.type for ev in stream.preamble] == ["response.created", "response.in_progress",
                                                   "response.output_item.added", "response.content_part.added"]
    stream.feed(SECRET_BODY[first_delta:])
    assert stream.committable and stream.preamble[-1].has_token and stream.unread  # the rest waits
    assert stream.commit(ResponsesOutputFilter(None)) and stream.terminal is not None


@pytest.mark.parametrize("body", [(FIXTURES / "error_quota.sse").read_bytes(),
                                  sse(message_events([], end=[{**FAILED_LATE, "error": {
                                      "type": "insufficient_quota", "code": "insufficient_quota",
                                      "message": "quota"}}]))], ids=["recorded", "after_the_preamble"])
def test_a_failure_before_the_first_token_fails_the_attempt_at_every_split(body: bytes) -> None:
    for reads in [[body], *splits(body)]:
        stream = ResponsesStream(OpenAIResponsesStreamParser(), "p/x")
        with pytest.raises(StreamFailed) as failed:
            for data in reads:
                stream.feed(data)
        assert failed.value.failure.code == "insufficient_quota"
        assert not stream.committable and stream.filt is None


def test_a_failure_after_the_first_token_ends_the_stream_and_the_text_stands() -> None:
    for reads in [[FAILS_AFTER_TOKEN], *splits(FAILS_AFTER_TOKEN)]:
        out, stream = relay(reads, guard=False)
        assert stream.failed is not None and stream.failed.failure is not None
        assert stream.failed.failure.kind is FailureKind.INBAND and stream.done
        assert stream.terminal is None and not stream.ended_early
        texts, others = reading(out)
        assert texts == {(0, "response.output_text.delta"): "partial answer"}
        assert others[-1]["type"] == "error" and others[-1]["error"]["message"] == "boom"


def test_an_upstream_that_stops_without_its_end_ended_early() -> None:
    body = SECRET_BODY[:SECRET_BODY.index(b"event: response.completed")]
    _, stream = relay([body], guard=False)
    assert stream.ended_early and stream.terminal is None


def test_a_whole_body_is_replayed_as_the_stream_it_would_have_been() -> None:
    _, streamed = relay([SECRET_BODY], guard=False)
    assert streamed.terminal is not None and streamed.terminal.obj is not None
    stream = ResponsesStream(OpenAIResponsesStreamParser(), "p/x")
    stream.hold_response(orjson.loads(orjson.dumps(streamed.terminal.obj["response"])))
    run = safety(False).start()
    assert run is not None and stream.committable and stream.done
    filt = ResponsesOutputFilter(run.factory)
    out = stream.commit(filt) + stream.tail() + stream.finish()
    texts, _ = reading(out)
    assert texts == {(0, "response.output_text.delta"): MASKED}


def test_a_part_whose_type_is_no_string_is_an_unknown_part() -> None:
    """An upstream's `"type": []` (unhashable) on a content part, as it is added and in the terminal
    response's output: a part the core knows nothing of, passed on, never a crash."""
    events = message_events(["still ", "here"])
    odd = {"type": []}
    events[3]["part"] = odd
    events[-1]["response"]["output"][0]["content"].append(odd)
    body = sse(events)
    for reads in [[body], *splits(body)]:
        _, stream = relay(reads, guard=True)
        assert stream.assembler.text() == "still here" and stream.assembler.finished
