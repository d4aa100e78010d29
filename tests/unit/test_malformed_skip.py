"""An event the provider's parser cannot read (unparseable JSON, not an object) after the first token is
skipped and counted by the chat and Responses stream cores, and the stream goes on to its normal end, at
every split of the upstream's bytes. Before the first token it fails the attempt (MALFORMED, retried);
an over-size event and an in-band error object stay failures after it too."""

from __future__ import annotations

import random
from collections.abc import Callable

import orjson
import pytest

from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.stream import ChatStream, StreamParser
from gateway.core.events import FailureKind, StreamFailed
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.core.sse import SSEDecoder
from gateway.providers.convert.anthropic_stream import AnthropicStreamParser
from gateway.providers.convert.openai_chat import OpenAIStreamParser
from gateway.providers.convert.responses_pass_through import OpenAIResponsesStreamParser
from tests.unit.model_safety import safety
from tests.unit.reads import pump_reads, random_reads, splits, the_end
from tests.unit.test_chat_stream import chat_body, reading
from tests.unit.test_responses_stream import message_events, sse
from tests.unit.test_responses_stream import reading as responses_reading

BROKEN = (b"data: {broken\n\n", b"data: [1, 2]\n\n", b'data: "text"\n\n')
CHAT = chat_body(["Hel", "lo, ", "world", "!"])
TEXT = "Hello, world!"


def after_first_token(body: bytes, marker: bytes, bad: bytes) -> bytes:
    """`body` with `bad` inserted before the event that holds `marker` (an event after the first token)."""
    at = body.index(marker)
    at = body.rindex(b"\n\n", 0, at) + 2
    return body[:at] + bad + body[at:]


def chat_relay(reads: list[bytes], parser: Callable[[], StreamParser] = OpenAIStreamParser) -> tuple[bytes, ChatStream]:
    run = safety(True).start()
    assert run is not None
    stream = ChatStream(parser(), "p/x")
    filt = ChatOutputFilter(run.factory, forward_usage=True)
    out = pump_reads(stream, filt, reads)
    out.append(the_end(stream, filt))
    return b"".join(out), stream


@pytest.mark.parametrize("bad", BROKEN, ids=["not_json", "array", "string"])
def test_chat_skips_a_malformed_event_after_the_first_token_at_every_split(bad: bytes) -> None:
    data = after_first_token(CHAT, b'"world"', bad)
    for reads in [[data], *splits(data)]:
        out, stream = chat_relay(reads)
        assert reading(out)[0] == {(0, "content"): TEXT}, f"split at {len(reads[0])}"
        assert stream.skipped_malformed == 1 and stream.error is None
        assert stream.done and not stream.ended_early  # the finish and [DONE] after it were read
        assert b"broken" not in out


def test_chat_random_reads_and_several_malformed_events() -> None:
    data = after_first_token(after_first_token(CHAT, b'"world"', BROKEN[0]), b'"!"', BROKEN[1])
    rng = random.Random(19)
    for _ in range(50):
        out, stream = chat_relay(random_reads(data, rng))
        assert reading(out)[0] == {(0, "content"): TEXT} and stream.skipped_malformed == 2


def test_an_anthropic_stream_skips_an_unreadable_event_after_the_first_token() -> None:
    def ev(obj: dict[str, object]) -> bytes:
        return b"event: " + str(obj["type"]).encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"

    def text(t: str) -> bytes:
        return ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}})

    data = b"".join([
        ev({"type": "message_start", "message": {"id": "msg", "model": "claude", "usage": {"input_tokens": 3}}}),
        ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        text("Hel"), b"event: content_block_delta\ndata: {broken\n\n", text("lo"),
        ev({"type": "content_block_stop", "index": 0}),
        ev({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        ev({"type": "message_stop"}),
    ])
    for reads in [[data], *splits(data)]:
        out, stream = chat_relay(reads, lambda: AnthropicStreamParser(created=1))
        assert reading(out)[0] == {(0, "content"): "Hello"} and stream.skipped_malformed == 1
        assert not stream.ended_early


@pytest.mark.parametrize("bad", BROKEN, ids=["not_json", "array", "string"])
def test_chat_malformed_before_the_first_token_fails_the_attempt_at_every_split(bad: bytes) -> None:
    role_end = CHAT.index(b"\n\n") + 2
    data = CHAT[:role_end] + bad + CHAT[role_end:]
    for reads in [[data], *splits(data)]:
        stream = ChatStream(OpenAIStreamParser(), "p/x")
        with pytest.raises(StreamFailed) as failed:
            for r in reads:
                stream.feed(r)
        assert failed.value.failure.kind is FailureKind.MALFORMED and not stream.committable


def test_chat_an_error_object_or_an_oversize_event_after_the_first_token_still_ends_the_stream() -> None:
    error = b'data: {"error": {"message": "boom", "type": "server_error", "code": "server_error"}}\n\n'
    out, stream = chat_relay([after_first_token(CHAT, b'"world"', error)])
    assert stream.error is not None and stream.error.kind is FailureKind.INBAND and stream.skipped_malformed == 0
    assert reading(out)[0] == {(0, "content"): "Hello, "}
    stream = ChatStream(OpenAIStreamParser(), "p/x")
    stream.decoder = SSEDecoder(max_event_bytes=256)  # the limit, scaled down (8 MiB in service)
    filt = ChatOutputFilter(None, forward_usage=True)
    pump_reads(stream, filt, [CHAT[:CHAT.index(b'"world"')]])
    with pytest.raises(StreamFailed) as failed:
        stream.feed(b"data: {" + b"x" * 300 + b"\n\n")
    assert failed.value.failure.kind is FailureKind.MALFORMED and stream.skipped_malformed == 0


RESPONSES = sse(message_events(["Hel", "lo, ", "world", "!"]))
RESPONSES_BROKEN = (b"event: response.output_text.delta\ndata: {broken\n\n", b"data: [1, 2]\n\n")


def responses_relay(reads: list[bytes]) -> tuple[bytes, ResponsesStream]:
    run = safety(True).start()
    assert run is not None
    stream = ResponsesStream(OpenAIResponsesStreamParser(), "p/x")
    filt = ResponsesOutputFilter(run.factory)
    out = pump_reads(stream, filt, reads, must_commit=True)
    out.append(the_end(stream, filt))
    return b"".join(out), stream


@pytest.mark.parametrize("bad", RESPONSES_BROKEN, ids=["not_json", "array"])
def test_responses_skips_a_malformed_event_after_the_first_token_at_every_split(bad: bytes) -> None:
    data = after_first_token(RESPONSES, b'"delta":"world"', bad)
    for reads in [[data], *splits(data)]:
        out, stream = responses_relay(reads)
        texts, others = responses_reading(out)  # also checks the client's numbering has no gap
        assert texts == {(0, "response.output_text.delta"): TEXT}, f"split at {len(reads[0])}"
        assert stream.skipped_malformed == 1 and stream.failed is None and stream.terminal is not None
        assert others[-1]["type"] == "response.completed"


def test_responses_random_reads() -> None:
    data = after_first_token(RESPONSES, b'"delta":"world"', RESPONSES_BROKEN[0])
    rng = random.Random(19)
    for _ in range(50):
        out, stream = responses_relay(random_reads(data, rng))
        assert responses_reading(out)[0] == {(0, "response.output_text.delta"): TEXT}
        assert stream.skipped_malformed == 1


@pytest.mark.parametrize("bad", RESPONSES_BROKEN, ids=["not_json", "array"])
def test_responses_malformed_before_the_first_token_fails_the_attempt_at_every_split(bad: bytes) -> None:
    data = after_first_token(RESPONSES, b"response.output_text.delta", bad)
    for reads in [[data], *splits(data)]:
        stream = ResponsesStream(OpenAIResponsesStreamParser(), "p/x")
        with pytest.raises(StreamFailed) as failed:
            for r in reads:
                stream.feed(r)
        assert failed.value.failure.kind is FailureKind.MALFORMED and not stream.committable


def test_responses_an_oversize_event_after_the_first_token_still_fails() -> None:
    stream = ResponsesStream(OpenAIResponsesStreamParser(), "p/x")
    stream.decoder = SSEDecoder(max_event_bytes=1024)
    head = RESPONSES[:RESPONSES.index(b'"delta":"world"')]
    pump_reads(stream, ResponsesOutputFilter(None), [head[:head.rindex(b"\n\n") + 2]], must_commit=True)
    with pytest.raises(StreamFailed) as failed:
        stream.feed(b"data: {" + b"x" * 2000 + b"\n\n")
    assert failed.value.failure.kind is FailureKind.MALFORMED and stream.skipped_malformed == 0
