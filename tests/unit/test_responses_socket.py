"""The pure parts of WebSocket mode: frames and bounds over wsproto (`core.websocket`) and one connection's
Responses state (`core.responses.socket`): messages, previous_response_id from what the connection keeps,
the warm-up, error events, and the HTTP stream's SSE cut into messages."""

from __future__ import annotations

import contextvars

import orjson
import pytest
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage

from gateway.core.responses.filter import EVENT_ENCODER, ResponsesOutputFilter
from gateway.core.responses.socket import Conversation, EventCutter, SocketMessageError, read_message, warmup_events
from gateway.core.websocket import HandshakeError, ServerSocket, accept_head, text_frame


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


def test_read_message() -> None:
    create = read_message('{"type": "response.create", "model": "m", "input": "hi", "generate": false}')
    assert not create.generate and create.body == {"model": "m", "input": "hi", "stream": True}
    for bad in ("nope", "[]", '{"type": "session.update"}', '{"type": "response.create", "generate": 1}'):
        with pytest.raises(SocketMessageError):
            read_message(bad)


def test_previous_response_id_of_the_connection_is_expanded_and_others_pass() -> None:
    conv = Conversation()
    body = {"input": "one", "previous_response_id": "resp_elsewhere"}
    assert conv.expand(body) == [{"type": "message", "role": "user", "content": "one"}]
    assert body["previous_response_id"] == "resp_elsewhere"  # not the connection's: as over HTTP
    conv.keep("resp_1", [{"role": "user", "content": "one"}], [{"type": "message", "role": "assistant"}])
    body = {"input": [{"role": "user", "content": "two"}], "previous_response_id": "resp_1"}
    whole = conv.expand(body)
    assert "previous_response_id" not in body and body["input"] == whole and len(whole) == 3
    assert conv.continued == 1


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
    assert cutter.frame("response.output_text.delta", payload) == text_frame(payload)
    assert cutter.ended is None and not cutter.failed
    completed = orjson.dumps({"type": "response.completed", "response": {"id": "resp_7", "output": [{"y": 2}]}})
    assert cutter.frame("response.completed", completed) == text_frame(completed)
    assert cutter.ended is not None and cutter.ended.response_id == "resp_7" and cutter.ended.output == [{"y": 2}]
    cutter.frame("error", b'{"type":"error"}')
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
    client = Connection(ConnectionType.CLIENT)
    client.receive_data(text_frame(text.encode()))
    (event,) = client.events()
    assert isinstance(event, TextMessage) and event.data == text and event.message_finished
