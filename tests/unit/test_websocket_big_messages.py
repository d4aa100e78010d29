"""A big text message (`core.websocket.STEPPED_BYTES`, here a few bytes) is given as its bytes, its UTF-8
checked a slice per `feed` call, and what came after it waits for it: the order of the messages, the
close on text that is not UTF-8 (1007) and the messages' bounds are those of a small one."""

from __future__ import annotations

import pytest
from wsproto.connection import Connection, ConnectionType
from wsproto.events import CloseConnection, Ping, TextMessage

from gateway.core.websocket import Fed, ServerSocket

STEPPED, CHECK = 8, 4
MASK = b"\x00\x00\x00\x00"  # a zero mask leaves the payload as written


def frames(*events: object) -> bytes:
    client = Connection(ConnectionType.CLIENT)
    return b"".join(client.send(e) for e in events)  # type: ignore[arg-type]


def raw_text(payload: bytes) -> bytes:
    """A masked text frame of any bytes (wsproto writes only UTF-8 ones)."""
    assert len(payload) < 126
    return bytes((0x81, 0x80 | len(payload))) + MASK + payload


def fed_until_done(sock: ServerSocket, data: bytes) -> tuple[list[str | bytes], list[Fed]]:
    """`data` fed, then `feed(b"")` while it says there is more: the messages, and each call's answer."""
    calls = [sock.feed(data)]
    while calls[-1].more and len(calls) < 1000:
        calls.append(sock.feed(b""))
    return [t for fed in calls for t in fed.texts], calls


def test_a_big_message_is_its_bytes_checked_a_slice_per_call_and_the_next_ones_wait() -> None:
    big = "é中😀 and then some more"
    data = frames(TextMessage("one"), TextMessage(big), Ping(b"p"), TextMessage("two"), TextMessage("x" * 8))
    texts, calls = fed_until_done(ServerSocket(1000, STEPPED, CHECK), data)
    assert texts == ["one", big.encode(), "two", "x" * 8]  # at the size: a str still
    assert calls[0].texts == ["one"] and calls[0].more  # the big one's check begins in the next call
    assert len(calls) >= len(big.encode()) // CHECK  # a slice a call
    assert any(fed.reply.startswith(b"\x8a") for fed in calls)  # the ping is answered


def test_a_big_message_split_at_every_byte_comes_whole_and_in_order() -> None:
    data = frames(TextMessage("héllo wörld, ", message_finished=False), TextMessage("in two frames"),
                  TextMessage("after"))
    for cut in range(1, len(data)):
        sock = ServerSocket(1000, STEPPED, CHECK)
        first, _ = fed_until_done(sock, data[:cut])
        second, calls = fed_until_done(sock, data[cut:])
        assert first + second == ["héllo wörld, in two frames".encode(), "after"], cut
        assert calls[-1].close is None and not calls[-1].more


@pytest.mark.parametrize("at", range(12))
def test_a_big_message_that_is_not_utf8_closes_with_1007_wherever_the_bad_byte_is(at: int) -> None:
    payload = bytearray(b"abcdefghijkl")
    payload[at] = 0xFF
    texts, calls = fed_until_done(ServerSocket(1000, STEPPED, CHECK), raw_text(bytes(payload)) + raw_text(b"next"))
    assert texts == [] and calls[-1].close == 1007 and calls[-1].reply.startswith(b"\x88")
    assert not any(fed.more for fed in calls[-1:])


def test_a_close_after_a_big_message_ends_the_connection_after_its_check() -> None:
    sock = ServerSocket(1000, STEPPED, CHECK)
    _, calls = fed_until_done(sock, frames(TextMessage("a" * 20), CloseConnection(1000)))
    assert calls[-1].close == 1000 and not sock.open
    assert sock.feed(frames(TextMessage("late"))).texts == []


def test_the_bound_and_the_batch_count_a_big_message_as_one() -> None:
    assert ServerSocket(10, STEPPED, CHECK).feed(frames(TextMessage("a" * 11))).close == 1009
    sock = ServerSocket(1000, STEPPED, CHECK)
    first = sock.feed(frames(TextMessage("a" * 9), TextMessage("b"), TextMessage("c")), max_messages=1)
    rest = [sock.feed(b"", max_messages=1) for _ in range(10)]
    assert first.texts == [] and [t for fed in rest for t in fed.texts] == [b"a" * 9, "b", "c"]
    assert [len(fed.texts) <= 1 for fed in rest] == [True] * 10 and not rest[-1].more


def test_a_released_socket_drops_the_message_under_check() -> None:
    sock = ServerSocket(1000, STEPPED, CHECK)
    assert sock.feed(frames(TextMessage("a" * 40))).more
    sock.release()
    assert sock.feed(b"").texts == [] and not sock.feed(b"").more
