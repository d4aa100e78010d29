"""The AWS event-stream decoder and the Bedrock transcoders (CONTRACT §9): every split, corrupt checksums,
oversized and cut frames, exception frames; our frame writer against botocore's own reader; a fuzz test
(any bytes: frames or StreamFailed, never another exception)."""

from __future__ import annotations

import binascii
import struct
import uuid

import orjson
import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.events import FailureKind, StreamFailed
from gateway.core.eventstream import (
    BedrockStreamTranscoder,
    EventMessage,
    EventStreamDecoder,
    error_type,
)
from gateway.core.sse import SSEDecoder
from tests.eventstream_frames import chunk, encode_message, event, exception

ALL_TYPES = {"t": True, "f": False, "long": -(2**40), "str": "héllo", "bin": b"\x00\xff",
             "id": uuid.UUID("12345678-1234-5678-1234-567812345678")}
STREAM = (encode_message(ALL_TYPES, b"payload one")
          + event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hi"}})
          + encode_message({}, b"")
          + exception("throttlingException", "slow down"))


def decode(pieces: list[bytes]) -> list[EventMessage]:
    dec = EventStreamDecoder()
    out: list[EventMessage] = []
    for p in pieces:
        out.extend(dec.feed(p))
    dec.end()
    return out


def test_every_header_value_type_round_trips() -> None:
    (msg, *_) = decode([STREAM])
    assert msg.headers == {**ALL_TYPES, "id": ALL_TYPES["id"].bytes}
    assert msg.payload == b"payload one"


def test_fixed_width_header_types() -> None:
    head = b"".join(bytes([1]) + name + bytes([t]) + struct.pack(fmt, 7)
                    for name, t, fmt in ((b"b", 2, ">b"), (b"s", 3, ">h"), (b"i", 4, ">i"), (b"d", 8, ">q")))
    frame = _frame(head, b"x")
    (msg,) = decode([frame])
    assert msg.headers == {"b": 7, "s": 7, "i": 7, "d": 7}


def _frame(head: bytes, payload: bytes) -> bytes:
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", binascii.crc32(body))


def test_every_split_gives_the_same_frames() -> None:
    whole = decode([STREAM])
    assert len(whole) == 4
    for i in range(len(STREAM) + 1):
        assert decode([STREAM[:i], STREAM[i:]]) == whole, f"split at byte {i}"
    assert decode([STREAM[i:i + 1] for i in range(len(STREAM))]) == whole


def test_matches_botocore_reader() -> None:
    """Our writer and reader against botocore's own event-stream parser (differential)."""
    buf = EventStreamBuffer()
    buf.add_data(STREAM)
    theirs = [(m.headers, m.payload) for m in buf]
    ours = [(m.headers, m.payload) for m in decode([STREAM])]
    assert ours == theirs


@given(st.lists(st.tuples(st.dictionaries(st.text(min_size=1, max_size=20).filter(lambda s: len(s.encode()) < 256),
                                          st.one_of(st.booleans(), st.text(max_size=50), st.binary(max_size=50),
                                                    st.integers(-(2**63), 2**63 - 1), st.uuids()),
                                          max_size=5),
                          st.binary(max_size=200)), max_size=5),
       st.data())
@settings(max_examples=150, deadline=None)
def test_differential_any_frames_any_split(frames: list[tuple[dict[str, object], bytes]], data: st.DataObject) -> None:
    raw = b"".join(encode_message(h, p) for h, p in frames)
    cut = data.draw(st.integers(0, len(raw)))
    ours = [(m.headers, m.payload) for m in decode([raw[:cut], raw[cut:]])]
    buf = EventStreamBuffer()
    buf.add_data(raw)
    assert ours == [(m.headers, m.payload) for m in buf]


def _fails(pieces: list[bytes]) -> str:
    with pytest.raises(StreamFailed) as info:
        decode(pieces)
    assert info.value.failure.kind is FailureKind.MALFORMED
    return info.value.failure.message


@pytest.mark.parametrize("at", [0, 5, 8, 9, 12, 20, -5, -1])
def test_a_flipped_byte_is_malformed(at: int) -> None:
    frame = bytearray(event("chunk", {"bytes": "e30="}))
    frame[at] ^= 0x01
    assert "checksum" in _fails([bytes(frame)]) or "inconsistent" in _fails([bytes(frame)])


def test_corrupt_prelude_crc_fails_before_the_frame_arrives() -> None:
    frame = bytearray(event("chunk", {"bytes": "e30="}))
    frame[8] ^= 0xFF
    dec = EventStreamDecoder()
    with pytest.raises(StreamFailed):
        dec.feed(bytes(frame[:12]))  # only the prelude: the length can't be trusted, fail now


def test_corrupt_message_crc() -> None:
    frame = bytearray(event("x", {}))
    frame[-1] ^= 0x80
    assert "message checksum" in _fails([bytes(frame)])


def test_oversized_frame_fails_at_its_prelude() -> None:
    prelude = struct.pack(">II", 16 * 1024 * 1024 + 1, 0)
    prelude += struct.pack(">I", binascii.crc32(prelude))
    dec = EventStreamDecoder()
    with pytest.raises(StreamFailed, match="over the"):
        dec.feed(prelude)
    assert dec.pending == 12  # nothing more was buffered


def test_a_frame_cut_short_fails_at_the_end() -> None:
    frame = event("x", {"a": 1})
    assert "ended inside a frame" in _fails([frame[:-3]])


def test_lengths_that_cannot_hold_a_frame() -> None:
    prelude = struct.pack(">II", 15, 0)
    assert "inconsistent" in _fails([prelude + struct.pack(">I", binascii.crc32(prelude))])
    prelude = struct.pack(">II", 20, 10)
    assert "inconsistent" in _fails([prelude + struct.pack(">I", binascii.crc32(prelude))])


def test_header_running_past_the_headers() -> None:
    head = b"\x01a\x07\x00\x09abc"  # claims 9 bytes of string, has 3
    assert "headers" in _fails([_frame(head, b"")])


def test_unknown_header_type() -> None:
    assert "header value type" in _fails([_frame(b"\x01a\x0c", b"")])


@given(st.binary(max_size=400), st.integers(0, 400))
@settings(max_examples=400, deadline=None)
def test_fuzz_never_crashes(raw: bytes, cut: int) -> None:
    for coder in (BedrockStreamTranscoder(),):
        try:
            coder.feed(raw[:cut])
            coder.feed(raw[cut:])
            coder.end()
        except StreamFailed as exc:
            assert exc.failure.kind is FailureKind.MALFORMED


@given(st.lists(st.binary(max_size=60), max_size=6), st.integers(0, 2000))
@settings(max_examples=200, deadline=None)
def test_fuzz_valid_frames_bad_chunk_payloads(payloads: list[bytes], cut: int) -> None:
    """Well-framed `chunk` events with any payload: only StreamFailed, never another exception."""
    raw = b"".join(encode_message({":message-type": "event", ":event-type": "chunk"}, p) for p in payloads)
    coder = BedrockStreamTranscoder()
    try:
        coder.feed(raw[:cut])
        coder.feed(raw[cut:])
    except StreamFailed as exc:
        assert exc.failure.kind is FailureKind.MALFORMED


# -- transcoders -------------------------------------------------------------------------------------

ANTHROPIC = [
    {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
                                          "model": "claude", "usage": {"input_tokens": 5, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello\u2028there"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
    {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 5, "outputTokenCount": 2}},
]


Coder = BedrockStreamTranscoder


def sse_events(coder: Coder, pieces: list[bytes]) -> list[tuple[str | None, object]]:
    dec = SSEDecoder()
    out = []
    for p in pieces:
        out += dec.feed(coder.feed(p))
    out += dec.feed(coder.end())
    return [(e.event, orjson.loads(e.data)) for e in out]


def test_invoke_stream_to_anthropic_sse_at_every_split() -> None:
    raw = b"".join(chunk(e) for e in ANTHROPIC)
    want = [(e["type"], e) for e in ANTHROPIC]
    assert sse_events(BedrockStreamTranscoder(), [raw]) == want
    for i in range(len(raw) + 1):
        assert sse_events(BedrockStreamTranscoder(), [raw[:i], raw[i:]]) == want


def test_invoke_chunk_with_type_not_first_or_pretty_printed() -> None:
    inner = b'{\n  "index": 0,\n  "type": "content_block_stop"\n}'
    assert sse_events(BedrockStreamTranscoder(), [chunk(inner)]) == [("content_block_stop", orjson.loads(inner))]


@pytest.mark.parametrize("payload", [b"{}", b'{"bytes": "***"}', b'{"bytes": "bm90IGpzb24="}', b"[1]",
                                     b'{"bytes": "WzFd"}'])
def test_invoke_chunk_that_is_not_base64_json_is_malformed(payload: bytes) -> None:
    frame = encode_message({":message-type": "event", ":event-type": "chunk"}, payload)
    with pytest.raises(StreamFailed):
        BedrockStreamTranscoder().feed(frame)


def test_unknown_message_types_are_skipped_unknown_events_named() -> None:
    """A new message type is skipped; a new event passes as a named event (its parser skips what it
    does not know, as for any SSE stream)."""
    raw = (encode_message({":message-type": "event", ":event-type": "newThing"}, b"{}")
           + encode_message({":message-type": "future"}, b"")
           + encode_message({":message-type": "event"}, b"{}")
           + chunk(ANTHROPIC[0]))
    assert [name for name, _ in sse_events(BedrockStreamTranscoder(), [raw])] == ["newThing", "message_start"]


def test_converse_stream_events() -> None:
    evs = [("messageStart", {"role": "assistant"}),
           ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hi"}}),
           ("messageStop", {"stopReason": "end_turn"}),
           ("metadata", {"usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}})]
    raw = b"".join(event(n, p) for n, p in evs)
    for i in range(0, len(raw) + 1, 7):
        assert sse_events(BedrockStreamTranscoder(), [raw[:i], raw[i:]]) == evs


@pytest.mark.parametrize(("name", "etype"), [
    ("throttlingException", "rate_limit_error"),
    ("serviceUnavailableException", "overloaded_error"),
    ("internalServerException", "api_error"),
    ("modelStreamErrorException", "api_error"),
    ("validationException", "invalid_request_error"),
    ("accessDeniedException", "permission_error"),
    ("serviceQuotaExceededException", "billing_error"),
    ("somethingNewException", "api_error"),
])
def test_exception_frames_become_anthropic_error_events(name: str, etype: str) -> None:
    for coder in (BedrockStreamTranscoder(),):
        ((ename, obj),) = sse_events(coder, [exception(name, "details")])
        assert ename == "error"
        assert obj == {"type": "error", "error": {"type": etype, "message": f"{name}: details"}}


def test_error_frame() -> None:
    frame = encode_message({":message-type": "error", ":error-code": "InternalFailure",
                            ":error-message": "oops"}, b"")
    ((name, obj),) = sse_events(BedrockStreamTranscoder(), [frame])
    assert name == "error"
    assert obj == {"type": "error", "error": {"type": "api_error", "message": "InternalFailure: oops"}}


def test_error_type_of_http_spelling() -> None:
    assert error_type("ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/") == "rate_limit_error"
    assert error_type("AccessDeniedException") == "permission_error"


@pytest.mark.parametrize("name", ["IncompleteSignature", "IncompleteSignatureException", "RequestExpired",
                                  "InvalidClientTokenId", "MissingAuthenticationTokenException", "NotAuthorized",
                                  "OptInRequired"])
def test_aws_common_credential_errors_are_ours(name: str) -> None:
    """Every AWS service's errors about the signature, the credentials or the clock, with or without the
    `Exception` suffix: never the client's mistake (AWS answers several with HTTP 400)."""
    assert error_type(name) in ("authentication_error", "permission_error")
