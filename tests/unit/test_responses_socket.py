"""The pure parts of WebSocket mode: frames and bounds over websockets' sans-I/O protocol (`core.websocket`,
fed frames written by another library, wsproto's client) and one connection's
Responses state (`core.responses.socket`): messages, previous_response_id from what the connection keeps,
the warm-up, error events, and the HTTP stream's SSE cut into messages."""

from __future__ import annotations

import contextvars
import itertools
import tracemalloc
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.protocol import Protocol, Side
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage

from gateway.core.body_scan import NOTHING, Scan, body_scans, walked
from gateway.core.json_body import MAX_CONTAINERS, MAX_DEPTH, depth_exceeds
from gateway.core.responses.filter import EVENT_ENCODER, ResponsesOutputFilter
from gateway.core.responses.socket import (
    Conversation,
    EventCutter,
    SocketMessageError,
    error_from_body,
    read_message,
    warmup_events,
)
from gateway.core.websocket import SLICE, HandshakeError, ServerSocket, accept_head, text_frame
from gateway.providers.base import MARKER


def frames(*events: object) -> bytes:
    client = Connection(ConnectionType.CLIENT)
    return b"".join(client.send(e) for e in events)  # type: ignore[arg-type]


def test_the_accept_key_is_rfc_6455s_example() -> None:
    head = accept_head({"sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13",
                        "connection": "keep-alive, Upgrade", "sec-websocket-extensions": "permessage-deflate"})
    assert b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in head
    assert b"Sec-WebSocket-Extensions" not in head  # permessage-deflate declined


@pytest.mark.parametrize("headers", [
    {"sec-websocket-version": "13", "connection": "Upgrade"},
    {"sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "8", "connection": "Upgrade"},
    {"sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13"},
])
def test_an_incomplete_handshake_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(HandshakeError):
        accept_head(headers)


def test_fragments_are_one_message_and_pings_are_answered() -> None:
    sock = ServerSocket(100)
    data = frames(TextMessage("hel", message_finished=False), Ping(b"p"), TextMessage("lo"))
    fed = sock.feed(data[:3])
    assert fed.texts == [] and fed.close is None
    fed = sock.feed(data[3:])
    assert fed.texts == ["hello"] and fed.reply.startswith(b"\x8a")  # a pong


def test_a_message_over_the_limit_counts_bytes_not_characters() -> None:
    assert ServerSocket(8).feed(frames(TextMessage("ééé"))).texts == ["ééé"]  # 6 bytes
    fed = ServerSocket(8).feed(frames(TextMessage("éééé£")))  # 10 bytes
    assert fed.close == 1009 and fed.texts == []


def test_binary_and_client_close() -> None:
    assert ServerSocket(100).feed(frames(BytesMessage(b"x"))).close == 1003
    fed = ServerSocket(100).feed(frames(CloseConnection(1000)))
    assert fed.close == 1000 and fed.reply.startswith(b"\x88")


def test_a_flood_is_taken_a_batch_at_a_time() -> None:
    sock = ServerSocket(100)
    fed = sock.feed(frames(*(TextMessage(str(i)) for i in range(5))), max_messages=2)
    assert fed.texts == ["0", "1"] and fed.more
    assert sock.feed(b"", max_messages=2).texts == ["2", "3"]
    last = sock.feed(b"", max_messages=2)
    assert last.texts == ["4"] and not last.more


def test_a_flood_in_one_read_is_parsed_a_slice_at_a_time() -> None:
    """Thousands of tiny messages in one read: one call parses a slice of the bytes, not all of them."""
    sock = ServerSocket(100)
    data = frames(*(TextMessage("x") for i in range(3000)))  # 7 bytes each, 21,000 bytes
    fed = sock.feed(data, max_messages=10)
    assert fed.texts == ["x"] * 10 and fed.more
    assert len(sock._ready) < SLICE // 6  # at most one slice's frames were parsed
    taken = 10
    while fed.more:
        fed = sock.feed(b"", max_messages=10)
        taken += len(fed.texts)
    assert taken == 3000 and fed.close is None


@pytest.mark.parametrize("opcode", [0x9, 0xA])  # pings (each answered) and pongs (answered by nothing)
def test_a_flood_of_control_frames_in_one_read_is_parsed_a_slice_at_a_time(opcode: int) -> None:
    """A read full of frames that are no message (6 bytes each) stops after a slice's worth of frames, as a
    read of tiny messages does: parsed whole, a 256 KiB read held the loop for 160-300 ms."""
    count = 256 * 1024 // 6
    sock = ServerSocket(100)
    fed = sock.feed(_masked(opcode, b"", True) * count)
    calls, pongs = 1, len(fed.reply) // 2
    while fed.more:
        assert fed.texts == [] and fed.close is None
        fed = sock.feed(b"")
        calls, pongs = calls + 1, pongs + len(fed.reply) // 2
    assert calls >= count // (SLICE // 6 + 1)
    assert pongs == (count if opcode == 0x9 else 0)


def test_a_message_split_at_every_byte_is_whole() -> None:
    data = frames(TextMessage("héllo", message_finished=False), Ping(b"p"), TextMessage(" wörld"),
                  TextMessage("x" * 300))
    for cut in range(1, len(data)):
        sock = ServerSocket(1000)
        first, second = sock.feed(data[:cut]), sock.feed(data[cut:])
        assert first.texts + second.texts == ["héllo wörld", "x" * 300] and second.close is None


def test_a_fragmented_message_is_bounded_as_a_whole() -> None:
    data = frames(TextMessage("x" * 6, message_finished=False), TextMessage("y" * 6))
    fed = ServerSocket(10).feed(data)
    assert fed.close == 1009 and fed.texts == [] and fed.reply.startswith(b"\x88")


def _masked(opcode: int, payload: bytes, fin: bool) -> bytes:
    """A client's frame, masked with zeros (the payload stays as written); payloads under 126 bytes."""
    return bytes(((0x80 if fin else 0) | opcode, 0x80 | len(payload))) + b"\x00\x00\x00\x00" + payload


def test_a_message_in_tiny_fragments_holds_its_bytes_not_an_object_a_fragment() -> None:
    """The message bound is its bytes (`max_message`): a message sent a byte a fragment is held as those
    bytes while it comes, not as a bytes object and a list slot per fragment (~42 bytes each, 40 times
    the bound), and a flood of empty fragments holds nothing."""
    count = 20_000
    sock = ServerSocket(1 << 20)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sock.feed(_masked(0x1, b"x", False))
        for frame in (_masked(0x0, b"x", False), _masked(0x0, b"", False)):
            fed = sock.feed(frame * count)
            while fed.more:
                fed = sock.feed(b"")
            assert fed.texts == [] and fed.close is None
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 4 * count, held  # the bytes (and a growing buffer's slack), not ~42 bytes a fragment
    assert sock.feed(_masked(0x0, b"y", True)).texts == ["x" * (count + 1) + "y"]


def test_text_that_is_not_utf8_closes_with_1007() -> None:
    mask = b"\x00\x00\x00\x00"  # a zero mask leaves the payload as written
    fed = ServerSocket(100).feed(b"\x81\x82" + mask + b"\xc3\x28")
    assert fed.close == 1007 and fed.texts == []


@pytest.mark.parametrize("frame", [
    b"\x81\x02hi",  # a client's frame unmasked
    b"\xc1\x82\x00\x00\x00\x00hi",  # a reserved bit set, no extension agreed
    b"\x83\x80\x00\x00\x00\x00",  # a reserved opcode
    b"\x80\x82\x00\x00\x00\x00hi",  # a continuation with no message begun
    b"\x09\x80\x00\x00\x00\x00",  # a fragmented ping
])
def test_a_malformed_frame_closes_with_1002(frame: bytes) -> None:
    sock = ServerSocket(100)
    fed = sock.feed(frame)
    assert fed.close == 1002 and fed.reply[0] == 0x88 and fed.reply[2:4] == b"\x03\xea" and not sock.open
    assert sock.feed(b"\x81\x80\x00\x00\x00\x00").texts == []  # nothing is read after it


def test_the_close_frame_is_written_once() -> None:
    sock = ServerSocket(100)
    assert sock.close(1001, "bye").startswith(b"\x88") and sock.close(1001) == b"" and sock.text("x") == b""
    frame = ServerSocket(100).close(1011, "é" * 100)  # 200 bytes of reason: cut to fit a control frame
    assert frame[0] == 0x88 and frame[1] <= 125 and frame[4:].decode() == "é" * 60


def test_read_message() -> None:
    create = read_message('{"type": "response.create", "model": "m", "input": "hi", "generate": false}')
    assert not create.generate and create.body == {"model": "m", "input": "hi", "stream": True}
    for bad in ("nope", "[]", '{"type": "session.update"}', '{"type": "response.create", "generate": 1}'):
        with pytest.raises(SocketMessageError):
            read_message(bad)
    flood = '{"type": "response.create", "input": [' + "[]," * MAX_CONTAINERS + "[]]}"
    with pytest.raises(SocketMessageError, match="JSON arrays and objects"):  # refused before it is parsed
        read_message(flood)
    assert read_message(flood.replace("[]", "1", 1).replace("[],", "1,", MAX_CONTAINERS // 2)).generate


def test_previous_response_id_of_the_connection_is_expanded_and_others_pass() -> None:
    conv = Conversation()
    body: dict[str, Any] = {"input": "one", "previous_response_id": "resp_elsewhere"}
    own = Scan(1, 1, False)
    assert conv.expand(body, own, NOTHING) == ([{"type": "message", "role": "user", "content": "one"}], own)
    assert body["previous_response_id"] == "resp_elsewhere"  # not the connection's: as over HTTP
    conv.keep("resp_1", [{"role": "user", "content": "one"}], [{"type": "message", "role": "assistant"}],
              Scan(2, 3, True))
    body = {"input": [{"role": "user", "content": "two"}], "previous_response_id": "resp_1"}
    whole, scan = conv.expand(body, own, Scan(2, 3, False))
    assert "previous_response_id" not in body and body["input"] == whole and len(whole) == 3
    assert conv.continued == 1
    # the message's own, the string input kept as a message, the output, the new input: a marker kept stays known
    assert scan == Scan(1 + 2 + 2 + 2, 3, True)
    conv.forget()
    assert conv.expand({"input": "x", "previous_response_id": "resp_1"}, own, NOTHING)[1] == own


_PART = st.recursive(st.none() | st.integers(-9, 9) | st.text(alphabet="ab{[\\u\"", max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.sampled_from(["a", MARKER, "cache\\u005fcontrol"]), inner, max_size=3),
                     max_leaves=12)


def _children(value: Any) -> Any:
    return value.values() if isinstance(value, dict) else value if isinstance(value, list) else None


def _depth(value: Any) -> int:
    """Levels of containers, the outermost one counted."""
    children = _children(value)
    return 0 if children is None else 1 + max(map(_depth, children), default=0)


def _containers(value: Any) -> int:
    children = _children(value)
    return 0 if children is None else 1 + sum(map(_containers, children))


def _marked(value: Any) -> bool:
    children = _children(value)
    return children is not None and ((isinstance(value, dict) and MARKER in value) or any(map(_marked, children)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(_PART, max_size=3) | st.text(max_size=3), _PART, st.booleans()), min_size=1,
                max_size=4))
def test_a_conversation_walked_a_part_at_a_time_is_the_whole_walked(turns: list[tuple[Any, Any, bool]]) -> None:
    """A conversation assembled turn by turn, each message's fields and input and each response's output
    walked as they came, holds what a walk of the whole body finds: its depth and its markers exactly, its
    containers, counting each turn's `input` list once more than the whole has (a bound)."""
    conv, body, scan = Conversation(), dict[str, Any](), NOTHING
    for i, (given_input, metadata, continued) in enumerate(turns):
        body = {"model": "m", "input": given_input, "metadata": metadata,
                **({"previous_response_id": f"r{i - 1}"} if continued else {})}
        own, given = body_scans(body, MARKER)
        whole, scan = conv.expand(body, own, given)
        output = [metadata]
        conv.keep(f"r{i}", whole, output, walked(output, 1, MARKER))
    assert scan.depth == _depth(body) and scan.marked == _marked(body)
    assert _containers(body) <= scan.containers <= _containers(body) + 2 * len(turns)


def _nest(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_the_depth_bound_is_the_bodys_and_a_walk_goes_no_deeper_than_one_past_it() -> None:
    """The body's own level counted: `metadata` may nest MAX_DEPTH - 1 levels, not one more; a body far
    deeper is measured as just past the bound (the walk stops there)."""
    for levels in (MAX_DEPTH - 1, MAX_DEPTH):  # the bound an HTTP body is held to, `depth_exceeds`
        body = {"metadata": _nest(levels)}
        assert body_scans(body, MARKER)[0].too_deep == depth_exceeds(body, MAX_DEPTH) == (levels == MAX_DEPTH)
    own, given = body_scans({"input": [], "metadata": _nest(MAX_DEPTH + 50)}, MARKER)
    assert own.depth == MAX_DEPTH + 1 and not given.too_deep
    assert walked([_nest(MAX_DEPTH - 2)], 1, MARKER).depth == MAX_DEPTH  # an input item, as deep as it may be


def test_the_warmup_is_a_completed_response_with_no_output() -> None:
    rid, events = warmup_events({"model": "m"})
    created, done = (orjson.loads(e) for e in events)
    assert created["type"] == "response.created" and done["type"] == "response.completed"
    assert done["response"]["id"] == rid and done["response"]["output"] == []


def test_the_cutter_sends_each_event_whole_and_keeps_the_completed_response() -> None:
    cutter = EventCutter()
    completed = orjson.dumps({"type": "response.completed", "response": {"id": "resp_9", "output": [{"x": 1}]}})
    stream = (b"event: response.created\ndata: {\"a\":1}\n\n: keep-alive\n\n"
              b"event: response.completed\ndata: " + completed + b"\n\n")
    out = [t for i in range(0, len(stream), 7) for t in cutter.feed(stream[i:i + 7])]
    assert out == [b'{"a":1}', completed]
    assert cutter.feed(b'data: {"b":\ndata: 2}\n\n') == [b'{"b":\n2}']  # several data lines: one payload
    assert cutter.ended is not None and cutter.ended.response_id == "resp_9" and not cutter.failed
    cutter.feed(b'event: error\ndata: {"type":"error"}\n\n')
    assert cutter.failed


def test_events_handed_over_whole_are_framed_and_watched_as_cut_ones() -> None:
    cutter = EventCutter()
    payload = b'{"type":"response.output_text.delta","delta":"hi"}'
    assert cutter.frame("response.output_text.delta", payload, orjson.loads(payload)) == text_frame(payload)
    assert cutter.ended is None and not cutter.failed
    event = {"type": "response.completed", "response": {"id": "resp_7", "output": [{"y": 2}]}}
    completed = orjson.dumps(event)
    assert cutter.frame("response.completed", completed, event) == text_frame(completed)
    assert cutter.ended is not None and cutter.ended.response_id == "resp_7" and cutter.ended.output == [{"y": 2}]
    cutter.frame("error", b'{"type":"error"}', {"type": "error"})
    assert cutter.failed


def test_the_output_filter_encodes_with_the_encoder_of_its_context() -> None:
    """SSE by default; in a context where WebSocket mode set its framer, the same event as a text frame."""
    error = {"message": "m", "type": "api_error", "param": None, "code": "c"}
    sse = ResponsesOutputFilter(None).error_event(error)
    assert sse.startswith(b"event: error\ndata: {")
    cutter = EventCutter()

    def framed() -> bytes:
        EVENT_ENCODER.set(cutter.frame)
        return ResponsesOutputFilter(None).error_event(error)

    frame = contextvars.copy_context().run(framed)
    assert frame == text_frame(sse[len(b"event: error\ndata: "):-2]) and cutter.failed
    assert ResponsesOutputFilter(None).error_event(error) == sse  # the setting stayed in that context


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
def test_a_text_frame_is_the_frame_wsproto_writes(size: int) -> None:
    server = Connection(ConnectionType.SERVER)
    text = "x" * size
    assert text_frame(text.encode()) == server.send(TextMessage(text))
    other = Protocol(Side.SERVER)
    other.send_text(text.encode())
    assert text_frame(text.encode()) == b"".join(other.data_to_send())
    client = Connection(ConnectionType.CLIENT)
    client.receive_data(text_frame(text.encode()))
    (event,) = client.events()
    assert isinstance(event, TextMessage) and event.data == text and event.message_finished


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(min_value=0, max_value=300), max_size=4))
def test_any_bytes_give_messages_or_a_close_never_an_exception(data: bytes, cuts: list[int]) -> None:
    if len(data) > 1:  # a client's frame is masked: past the first check more often
        data = data[:1] + bytes((data[1] | 0x80,)) + data[2:]
    sock = ServerSocket(64)
    edges = [0, *sorted(c for c in cuts if c <= len(data)), len(data)]
    for start, end in itertools.pairwise(edges):
        fed = sock.feed(data[start:end])
        assert fed.close is None or 1000 <= fed.close <= 1014 or 3000 <= fed.close < 5000
        assert all(len(t.encode()) <= 64 for t in fed.texts)
        if fed.close is not None:
            assert not sock.open and sock.feed(b"\x81\x80\x00\x00\x00\x00").texts == []
            return


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=40), st.integers(min_value=1, max_value=3), st.booleans()),
                min_size=1, max_size=6), st.integers(min_value=1, max_value=50))
def test_what_another_library_writes_is_read_whole_at_every_split(messages: list[tuple[str, int, bool]],
                                                                  step: int) -> None:
    """wsproto's client frames (fragmented, pings between fragments) read by ours, fed `step` bytes at a
    time: the same texts in the same order."""
    events: list[object] = []
    for text, parts, ping in messages:
        size = max(1, len(text) // parts)
        pieces = [text[i:i + size] for i in range(0, len(text), size)] or [""]
        for i, piece in enumerate(pieces):
            events.append(TextMessage(piece, message_finished=i == len(pieces) - 1))
            if ping and i < len(pieces) - 1:
                events.append(Ping(b"p"))
    data = frames(*events)
    sock, got = ServerSocket(1 << 16), []
    for i in range(0, len(data), step):
        fed = sock.feed(data[i:i + step])
        assert fed.close is None
        got += fed.texts
    assert got == [text for text, _, _ in messages]


def test_a_refusals_error_event_carries_its_retry_fields_and_no_other() -> None:
    """HTTP's 429 tells when to retry in `Retry-After`; the socket's event carries it in `headers` (lower
    case, as OpenAI's WebSocket errors do), with `x-should-retry`, and none of the answer's other fields."""
    body = orjson.dumps({"error": {"message": "key k is over its rpm limit", "type": "rate_limit_error",
                                   "param": None, "code": "rate_limit_exceeded"}})
    event = orjson.loads(error_from_body(429, body, {"x-request-id": "r1", "Retry-After": "7",
                                                     "x-should-retry": "false", "Content-Type": "application/json"}))
    assert event["headers"] == {"retry-after": "7", "x-should-retry": "false"}
    assert (event["status"], event["code"], event["error"]["type"]) == (429, "rate_limit_exceeded", "rate_limit_error")
    assert "headers" not in orjson.loads(error_from_body(404, body, {"x-request-id": "r2"}))
