"""WebSocket mode against hostile and unlucky clients (docs/reference.md, WebSocket mode): the close codes
(1009 oversized, 1003 binary, 1002 malformed frame, 1000 idle, 1001 drain, 1008 key revoked), one response
at a time (`response_in_progress`), pings, a client that never reads (bounded, then cut), the gauge and the
log line's `transport`."""

from __future__ import annotations

import base64
import os
import socket
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs
from websockets.exceptions import ConnectionClosed

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.fake_upstream import FakeUpstream, Gate, Hang, Script
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.integration.test_responses_websocket import KEY, MESSAGES_PATH, raw_socket, recv_json, turn, ws_config

# bounds the event loop's steps under hostile sockets: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

GAUGE = "llm_gateway_websocket_connections"


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(ws_config(upstream))


def closed_code(ws: Any) -> int:
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None, "the gateway sent a close frame"
    return int(closed.value.rcvd.code)


def test_an_oversized_message_closes_with_1009(gw: GatewayServer) -> None:
    with raw_socket(gw) as ws:
        ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": "x" * 70_000}).decode())
        assert closed_code(ws) == 1009


def test_a_binary_message_closes_with_1003(gw: GatewayServer) -> None:
    with raw_socket(gw) as ws:
        ws.send(b'{"type": "response.create"}')
        assert closed_code(ws) == 1003


def handshake(port: int, key: str = KEY) -> socket.socket:
    """A raw TCP connection through the opening handshake: the test writes frames of its own."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    nonce = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /v1/responses HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {nonce}\r\nSec-WebSocket-Version: 13\r\n"
                  f"Authorization: Bearer {key}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101 "), head
    return sock


def read_to_close(sock: socket.socket) -> bytes:
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def test_a_malformed_frame_closes_with_1002(gw: GatewayServer) -> None:
    sock = handshake(gw.port)
    sock.sendall(b"\x83\x80\x00\x00\x00\x00")  # a masked frame of reserved opcode 3
    got = read_to_close(sock)
    sock.close()
    assert got[:1] == b"\x88" and int.from_bytes(got[2:4], "big") == 1002


def test_an_unmasked_client_frame_is_a_protocol_error(gw: GatewayServer) -> None:
    sock = handshake(gw.port)
    sock.sendall(b"\x81\x02hi")  # RFC 6455 §5.1: a client masks every frame
    got = read_to_close(sock)
    sock.close()
    assert got[:1] == b"\x88" and int.from_bytes(got[2:4], "big") == 1002


def test_pings_are_answered(gw: GatewayServer) -> None:
    with raw_socket(gw) as ws:
        assert ws.ping(b"are you there").wait(10)


def test_a_flood_of_pings_and_pongs_is_taken_a_slice_at_a_time_and_the_socket_serves_on(
        upstream: FakeUpstream, gw: GatewayServer) -> None:
    """Frames that are no message, parsed a slice's worth a loop iteration (`core.websocket.FRAMES_PER_CALL`):
    the rest of a read waits in the socket, reading held, and is taken in later iterations, every ping
    answered, and the message behind them served."""
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["After."]))
    count = 40_000  # 240 KB, a read of most of it at once
    sock = handshake(gw.port)
    flood = (b"\x89\x80\x00\x00\x00\x00" + b"\x8a\x80\x00\x00\x00\x00") * (count // 2)
    sock.sendall(flood + _masked(orjson.dumps({"type": "response.create", "model": "claude", "input": "go"})))
    got = b""
    while b"response.completed" not in got:
        chunk = sock.recv(1 << 20)
        assert chunk, "the response completed before the close"
        got += chunk
    sock.close()
    assert got.count(b"\x8a\x00") == count // 2 and b'"delta":"After."' in got


def gated(text: str) -> tuple[Script, Gate]:
    gate = Gate()
    events = [a.message_start(), a.ping(), *a.text_block(0, [text[:1], text[1:]]), a.message_delta(),
              a.message_stop()]
    return Script([*(a.event(e) for e in events[:4]), gate, *(a.event(e) for e in events[4:])]), gate


def test_a_second_create_while_one_runs_gets_response_in_progress(upstream: FakeUpstream,
                                                                 gw: GatewayServer) -> None:
    script, gate = gated("Done.")
    upstream.enqueue(MESSAGES_PATH, script)
    with raw_socket(gw) as ws:
        ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": "one"}).decode())
        types = [recv_json(ws)["type"]]
        while types[-1] != "response.output_text.delta":  # the upstream now waits at the gate
            types.append(recv_json(ws)["type"])
        ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": "two"}).decode())
        busy = recv_json(ws)
        assert busy["type"] == "error" and busy["code"] == "response_in_progress"
        gate.opened.set()
        while types[-1] != "response.completed":
            types.append(recv_json(ws)["type"])
        assert "error" not in types
    assert len(upstream.bodies(MESSAGES_PATH)) == 1


def test_a_refused_turn_has_its_log_line_too(servers: LoopThread, gw: GatewayServer) -> None:
    with capture_logs() as logs:
        with raw_socket(gw) as ws:
            ws.send(orjson.dumps({"type": "response.create", "model": "nope", "input": "x"}).decode())
            assert recv_json(ws)["code"] == "model_not_found"
        servers.run(wait_until(lambda: gw.sample(GAUGE) == 0))
    (line,) = [e for e in logs if e["event"] == "request"]
    assert line["transport"] == "websocket" and line["status"] == 404 and line["reason"] == "model_not_found"


def test_the_gauge_counts_open_connections_and_the_log_line_says_websocket(
        servers: LoopThread, upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["Hi."]))
    with capture_logs() as logs:
        with raw_socket(gw, **{"session-id": "codex-session-1"}) as ws:  # Codex names its session
            servers.run(wait_until(lambda: gw.sample(GAUGE) == 1))
            assert turn(ws, {"model": "claude", "input": "hi"})[-1]["type"] == "response.completed"
        servers.run(wait_until(lambda: gw.sample(GAUGE) == 0 and any(e["event"] == "request" for e in logs)))
    (line,) = [e for e in logs if e["event"] == "request"]
    assert line["transport"] == "websocket" and line["api"] == "responses" and line["status"] == 200
    assert line["key"] == "ws" and line["stream"] is True
    assert line["session_hash"] is not None  # the upgrade's session header reaches each response (affinity)
    assert gw.sample("llm_gateway_requests_total", api="responses", outcome="ok") == 1


def test_an_idle_connection_is_closed(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(ws_config(upstream, websocket_idle_s=1))
    with raw_socket(gw) as ws:
        assert closed_code(ws) == 1000


def test_a_drain_finishes_the_response_in_flight_then_closes_with_1001(
        servers: LoopThread, upstream: FakeUpstream, gw: GatewayServer) -> None:
    script, gate = gated("Finished.")
    upstream.enqueue(MESSAGES_PATH, script)
    assert gw.api is not None
    with raw_socket(gw) as ws, raw_socket(gw) as idle:
        ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": "go"}).decode())
        while recv_json(ws)["type"] != "response.output_text.delta":  # the upstream now waits at the gate
            pass
        api = gw.api
        servers.loop.call_soon_threadsafe(lambda: servers.loop.create_task(api.shutdown(10)))  # SIGTERM's drain
        assert closed_code(idle) == 1001  # nothing in flight: closed at once
        gate.opened.set()
        types = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                types.append(recv_json(ws)["type"])
    assert types[-1] == "response.completed"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001


def test_a_response_that_outlasts_the_drain_gets_an_error_event_then_1001(
        servers: LoopThread, upstream: FakeUpstream, gw: GatewayServer) -> None:
    """Past `server.drain_s` the response is cut, and the client is told: an `error` event (the response
    has no terminal one), then the close frame 1001, not a bare TCP close."""
    script, gate = gated("Never finished.")
    upstream.enqueue(MESSAGES_PATH, script)
    assert gw.api is not None
    with raw_socket(gw) as ws:
        ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": "go"}).decode())
        while recv_json(ws)["type"] != "response.output_text.delta":  # the upstream now waits at the gate
            pass
        api = gw.api
        servers.loop.call_soon_threadsafe(lambda: servers.loop.create_task(api.shutdown(0.2)))  # a short drain
        events = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                events.append(recv_json(ws))
    gate.opened.set()
    assert [(e["type"], e.get("code")) for e in events] == [("error", "unavailable")]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001


def test_a_key_revoked_since_the_upgrade_gets_an_error_event_then_1008(
        servers: LoopThread, upstream: FakeUpstream, gw: GatewayServer) -> None:
    with raw_socket(gw) as ws:
        assert gw.app is not None
        revoked = parse_config({  # the same gateway without the key: revoked
            "auth": {"keys": [{"name": "other", "key": "gw-other-key-0002"}]},
            "providers": {"claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": "sk-ant-SECRET"}},
            "models": [{"name": "claude", "deployments": [{"provider": "claude", "model": "claude-dep"}]}]}, env={})

        async def reload() -> None:
            assert gw.app is not None
            await gw.app.reload(revoked)

        servers.run(reload())
        ws.send(orjson.dumps({"type": "response.create", "model": "claude", "input": "hi"}).decode())
        err = recv_json(ws)
        assert err["type"] == "error" and err["code"] == "invalid_api_key" and err["status"] == 401
        assert closed_code(ws) == 1008
    assert upstream.bodies(MESSAGES_PATH) == []


def test_a_client_that_never_reads_is_bounded_then_cut(servers: LoopThread, upstream: FakeUpstream,
                                                      make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(ws_config(upstream, send_timeout_s=0.5))
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["y" * 4000] * 2000))  # 8 MB of events: more than buffers hold
    sock = handshake(gw.port)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(_masked(orjson.dumps({"type": "response.create", "model": "claude", "input": "go"})))
    servers.run(wait_until(lambda: gw.sample("llm_gateway_http_refused_total", reason="send_stall") == 1, 20))
    servers.run(wait_until(lambda: gw.sample(GAUGE) == 0, 5))
    sock.close()


def _masked(payload: bytes) -> bytes:
    """One masked text frame (a client's), for payloads under 64 KiB."""
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    size = len(payload)
    head = b"\x81" + (bytes([0x80 | size]) if size < 126 else b"\xfe" + size.to_bytes(2, "big"))
    return head + mask + body


def test_messages_split_across_reads_and_frames_are_whole(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["Whole."]))
    sock = handshake(gw.port)
    frame = _masked(orjson.dumps({"type": "response.create", "model": "claude", "input": "hi"}))
    for i in range(len(frame)):  # a byte a write
        sock.sendall(frame[i:i + 1])
    got = b""
    while b"response.completed" not in got:
        chunk = sock.recv(65536)
        assert chunk, "the response completed before the close"
        got += chunk
    sock.close()
    assert b'"delta":"Whole."' in got



def test_a_conversation_grown_past_max_body_bytes_is_refused_with_413(upstream: FakeUpstream,
                                                                      gw: GatewayServer) -> None:
    """Each message is small, but the kept conversation grows: the whole request is held to
    `server.max_body_bytes` as HTTP would hold it (and the connection's memory with it)."""
    big = "z" * 40_000  # two of these outgrow the 64 KiB limit
    upstream.enqueue(MESSAGES_PATH, a.text_stream(["ok"]))
    with raw_socket(gw) as ws:
        first = turn(ws, {"model": "claude", "input": big})
        assert first[-1]["type"] == "response.completed"
        refused = turn(ws, {"model": "claude", "input": big, "previous_response_id": first[-1]["response"]["id"]})
    assert refused == [refused[-1]] and refused[-1]["code"] == "request_too_large" and refused[-1]["status"] == 413
    assert len(upstream.bodies(MESSAGES_PATH)) == 1


def test_websocket_connections_count_against_max_connections(upstream: FakeUpstream,
                                                             make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(ws_config(upstream, max_connections=2))
    with raw_socket(gw), raw_socket(gw):
        sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        got = read_to_close(sock)  # the refusal is written at accept, before anything is read
        sock.close()
    assert got.startswith(b"HTTP/1.1 503 ")


def test_the_clients_close_is_answered_and_the_connection_closed_at_once(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """RFC 6455 §7.1.1: once the closing handshake is done, the server closes the TCP connection. It does not
    linger for the client's FIN, holding a `max_connections` place (and a timer) for a client that sends
    nothing more: the only place is free for the next connection while this client's socket is still open."""
    gw = make_gateway(ws_config(upstream, max_connections=1))
    sock = handshake(gw.port)
    try:
        sock.sendall(b"\x88\x82\x00\x00\x00\x00\x03\xe8")  # a masked close frame, code 1000
        got = read_to_close(sock)  # the gateway's close frame, then the end of its side
        assert got[:1] == b"\x88" and int.from_bytes(got[2:4], "big") == 1000
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as other:
            other.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
            assert read_to_close(other).startswith(b"HTTP/1.1 200 ")
    finally:
        sock.close()


def test_a_client_gone_mid_response_closes_the_upstream_request(servers: LoopThread, upstream: FakeUpstream,
                                                                gw: GatewayServer) -> None:
    events = [a.message_start(), a.ping(), *a.text_block(0, ["Half"])[:2]]
    upstream.enqueue(MESSAGES_PATH, Script([*(a.event(e) for e in events), Hang()]))
    with capture_logs() as logs:
        sock = handshake(gw.port)
        sock.sendall(_masked(orjson.dumps({"type": "response.create", "model": "claude", "input": "go"})))
        got = b""
        while b"response.output_text.delta" not in got:
            chunk = sock.recv(65536)
            assert chunk, "the first token came before any close"
            got += chunk
        sock.close()  # gone, without a close frame
        servers.run(wait_until(lambda: upstream.closed.is_set() and gw.sample(GAUGE) == 0, 10))
        servers.run(wait_until(lambda: any(e["event"] == "request" for e in logs)))
    (line,) = [e for e in logs if e["event"] == "request"]
    assert line["status"] == 499 and line["outcome"] == "cancelled" and line["transport"] == "websocket"
    # what the upstream spent is charged all the same, estimated (the bridge's usage comes at the end): the
    # input "go" and the output "Half" are a token each
    assert (line["input_tokens"], line["output_tokens"], line["estimated"]) == (1, 1, True)
    attempts = "llm_gateway_upstream_attempts_total"  # its first token came: `ok`, not also `client_cancelled`
    assert gw.sample(attempts, outcome="ok") == gw.sample(attempts) == 1
