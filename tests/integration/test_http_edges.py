"""The API port against hostile clients, over raw sockets on 127.0.0.1: smuggling vectors followed by a
pipelined request, slow heads, clients that stop reading, too many connections, too many headers,
JSON nested too deep, pipelining floods, a 1-byte-chunk trickle (issue "Harden the HTTP edges"), and
requests asking to switch protocols, each followed by a pipelined one (issue #27)."""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

import openai
import orjson
import pytest
import trustme
from structlog.testing import capture_logs

from gateway.core.json_body import MAX_CONTAINERS
from tests.chat_scripts import completion, text_stream
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.integration.test_inbound_http import BODY, PATH, connect, post_head, read_response, read_to_close
from tests.responses_scripts import Answer, body_script
from tests.unit.http_vectors import ALL, SMUGGLED, UPGRADE
from tests.unit.test_request_differential import ours

REFUSED = [v for v in ALL if ours(v, False).refused and not ours(v, False).requests]


def statuses(raw: bytes) -> list[bytes]:
    """The status lines in what a connection sent back (bodies are JSON: no line starts with HTTP/)."""
    return [line for line in raw.split(b"\r\n") if line.startswith(b"HTTP/1.")]


def test_most_smuggling_vectors_are_refused() -> None:
    assert len(REFUSED) >= 60


@pytest.mark.parametrize("vector", REFUSED, ids=[repr(v[:50]) for v in REFUSED])
def test_a_smuggling_vector_gets_one_error_and_the_pipelined_request_is_never_served(
        gateway: GatewayServer, vector: bytes) -> None:
    with connect(gateway) as sock:
        sock.sendall(vector + SMUGGLED)
        got = read_to_close(sock)
    lines = statuses(got)
    assert len(lines) == 1, got
    assert 400 <= int(lines[0].split()[1]) < 600
    assert b"smuggled" not in got


def test_a_slow_head_gets_408_and_the_connection_closes(make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(server={"request_head_timeout_s": 0.2})
    with connect(gw) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Ty")
        got = read_to_close(sock)
    assert statuses(got) == [b"HTTP/1.1 408 Request Timeout"]
    assert gw.sample("llm_gateway_http_refused_total", reason="head_timeout") == 1


def test_a_connection_that_sends_nothing_is_closed_after_the_head_timeout(
        make_gateway: Callable[..., GatewayServer]) -> None:
    """A client that connects and says nothing was held for the keep-alive time (75 s), not the head
    timeout: a slow-loris client held sockets 5 times longer than one that sends a byte. The first head's
    clock now starts at the accept; with nothing to answer, the close is silent (counted)."""
    gw = make_gateway(server={"request_head_timeout_s": 0.2})
    with connect(gw) as sock:  # its 5 s timeout bounds the wait: the old code failed it with TimeoutError
        assert read_to_close(sock) == b""
    assert gw.sample("llm_gateway_http_refused_total", reason="head_timeout") == 1


def with_request_timeout(gw: GatewayServer, seconds: float) -> GatewayServer:
    """`gw` with a request deadline of `seconds` (first byte to the whole body), on its running server."""
    api = gw.api
    assert api is not None
    api.limits = dataclasses.replace(api.limits, request_timeout_s=seconds)
    return gw


def test_a_body_that_does_not_come_whole_in_time_gets_408_in_the_routes_shape(
        make_gateway: Callable[..., GatewayServer]) -> None:
    """A body stalled half-way was cut without an answer by the keep-alive sweep (the client saw a reset);
    now the request has its own deadline from its first byte and is answered 408 in its route's shape."""
    gw = with_request_timeout(make_gateway(), 0.2)
    with connect(gw) as sock:
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: gw\r\nX-Request-Id: slow-1\r\nContent-Length: 100\r\n"
                     b"anthropic-version: 2023-06-01\r\n\r\n{\"model\":")
        status, headers, body = read_response(sock, bytearray())
        assert sock.recv(1) == b""  # then the close
    assert status == b"HTTP/1.1 408 Request Timeout" and headers["connection"] == "close"
    assert headers["x-request-id"] == "slow-1"
    assert orjson.loads(body) == {"type": "error", "error": {"type": "invalid_request_error",
                                                             "message": "the request body took too long"}}
    assert gw.sample("llm_gateway_http_refused_total", reason="body_timeout") == 1


def test_an_http_1_0_request_expecting_100_continue_gets_no_interim_answer(
        make_gateway: Callable[..., GatewayServer]) -> None:
    """RFC 9110 §10.1.1: a server ignores `Expect: 100-continue` from an HTTP/1.0 client, which knows no
    1xx and took the `HTTP/1.1 100 Continue` it got for its answer. Its body stalls here, so the one answer
    it gets is the 408, with nothing before it."""
    gw = with_request_timeout(make_gateway(), 0.2)
    with connect(gw) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n%b"
                     % (len(BODY), BODY[:10]))
        got = read_to_close(sock)
    assert statuses(got) == [b"HTTP/1.1 408 Request Timeout"]


def test_a_connection_past_max_connections_gets_503(make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(server={"max_connections": 2})
    held = [connect(gw), connect(gw)]
    try:
        for sock in held:  # answered: both are accepted and counted
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
            assert read_response(sock, bytearray())[0] == b"HTTP/1.1 200 OK"
        with connect(gw) as third:
            got = read_to_close(third)
        assert statuses(got) == [b"HTTP/1.1 503 Service Unavailable"] and b"Retry-After: 1" in got
        assert gw.sample("llm_gateway_http_refused_total", reason="max_connections") == 1
    finally:
        for sock in held:
            sock.close()


def test_a_client_that_stops_reading_is_cut_and_its_upstream_closed(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(server={"send_timeout_s": 0.3})
    upstream.enqueue(PATH, text_stream(["x" * 4000] * 4000))  # 16 MB: far more than the socket buffers
    sock = connect(gw)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    body = orjson.dumps({**orjson.loads(BODY), "stream": True})
    sock.sendall(f"POST {PATH} HTTP/1.1\r\nHost: gw\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    servers.run(asyncio.wait_for(upstream.closed.wait(), 10))  # the gateway hung up on the upstream
    api = gw.api
    assert api is not None and not api.connections
    assert gw.sample("llm_gateway_http_refused_total", reason="send_stall") == 1
    sock.close()


def test_more_than_100_header_fields_get_431(gateway: GatewayServer) -> None:
    fields = "".join(f"X-{i}: v\r\n" for i in range(150))
    with connect(gateway) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: gw\r\n{fields}\r\n".encode())
        assert statuses(read_to_close(sock)) == [b"HTTP/1.1 431 Request Header Fields Too Large"]


@pytest.mark.parametrize("hosts", [[], ["gw", "other"]])
def test_an_http_1_1_request_without_exactly_one_host_gets_400(gateway: GatewayServer, hosts: list[str]) -> None:
    head = "".join(f"Host: {h}\r\n" for h in hosts)
    with connect(gateway) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\n{head}\r\n".encode())
        assert statuses(read_to_close(sock)) == [b"HTTP/1.1 400 Bad Request"]


@pytest.mark.parametrize("pad", [0, 40_000], ids=["small", "walked-in-slices"])
@pytest.mark.parametrize("depth", [200, 300, 1000])
def test_json_nested_deeper_than_the_limit_is_a_400(gateway: GatewayServer, depth: int, pad: int) -> None:
    """A body over 64 KiB has its depth walked a slice at a time (`pipeline/request.py`): same answer."""
    padding = b'"pad": [' + b",".join([b"{}"] * pad) + b"], " if pad else b""
    body = b'{"model": "m", "messages": [], ' + padding + b'"x": ' + b"[" * depth + b"]" * depth + b"}"
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=5)
    conn.request("POST", PATH, body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    error = orjson.loads(resp.read())["error"]
    conn.close()
    assert resp.status == 400 and error["code"] == "invalid_request" and "nested" in error["message"]


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_a_body_of_more_containers_than_the_limit_is_a_400_before_it_is_parsed(gateway: GatewayServer,
                                                                                 api: str) -> None:
    """Bench S2hd: 10 MiB of nested empty arrays (millions of containers) froze the loop for ~0.9 s in
    one orjson call. Over MAX_CONTAINERS it is refused, in the API's own error shape."""
    path = "/v1/messages" if api == "messages" else PATH
    unit = b"[" * 100 + b"]" * 100
    over = b'{"model": "m", "max_tokens": 5, "messages": [], "x": [' + b",".join([unit] * (MAX_CONTAINERS // 100 + 1)) \
        + b"]}"
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    conn.request("POST", path, over, {"Content-Type": "application/json", "anthropic-version": "2023-06-01"})
    resp = conn.getresponse()
    doc = orjson.loads(resp.read())
    conn.close()
    assert resp.status == 400
    message = doc["error"]["message"]
    assert "JSON arrays and objects" in message
    if api == "messages":
        assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    else:
        assert doc["error"]["code"] == "invalid_request"


def test_a_pipelining_flood_is_served_in_part_then_the_connection_closes(gateway: GatewayServer) -> None:
    with connect(gateway) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n" * 200)
        got = read_to_close(sock)
    lines = statuses(got)
    assert 1 <= len(lines) <= 16 and set(lines) == {b"HTTP/1.1 200 OK"}


def test_a_pipelining_flood_gets_every_answer_queued_then_a_clean_close(gateway: GatewayServer) -> None:
    """Past MAX_PIPELINED the queued requests are served and the connection ends; it was closed while the
    client was still sending, which resets it (RFC 9112 §9.6), and a reset can erase answers the client
    has not read yet. Now it lingers: the answers, a FIN, and what the client still sends read and dropped."""
    flood = b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n" * 16 + post_head(PATH, 8 << 20) + bytes(8 << 20)
    failed: list[OSError] = []

    def send(sock: socket.socket) -> None:
        try:
            sock.sendall(flood)
        except OSError as exc:  # the old code's reset (EPIPE, ECONNRESET)
            failed.append(exc)

    with connect(gateway) as sock:
        sender = threading.Thread(target=send, args=(sock,))
        sender.start()
        buf = bytearray()
        answers = [read_response(sock, buf)[0] for _ in range(16)]
        end = sock.recv(65536)  # the FIN (the old code's reset could come first: ConnectionResetError)
        sender.join(10)  # the rest of the flood, read and dropped
    assert answers == [b"HTTP/1.1 200 OK"] * 16 and end == b"" and not buf
    assert not sender.is_alive() and failed == []


@pytest.mark.parametrize("vector", UPGRADE, ids=[repr(v[:70]) for v in UPGRADE])
def test_an_upgrade_request_gets_exactly_one_answer_then_the_connection_closes(
        gateway: GatewayServer, vector: bytes) -> None:
    """Issue #27: a body behind `Upgrade` was parsed as a second request (one client read another's
    answer behind a proxy). Every vector, a request pipelined after it: one answer, then the close; a
    WebSocket handshake gets 426 (on `GET /v1/responses`, WebSocket mode: a whole handshake gets 101, and
    what follows is WebSocket frames, never a request; one without its key fields, 400); a new connection
    is served as usual."""
    accepted = vector.startswith(b"GET /v1/responses ") and b"Sec-WebSocket-Key" in vector
    with connect(gateway) as sock:
        sock.sendall(vector + SMUGGLED)
        if accepted:
            sock.sendall(b"\x88\x82\x00\x00\x00\x00\x03\xe8")  # a client's close frame (1000)
        got = read_to_close(sock)
    lines = statuses(got)
    assert len(lines) == 1, got
    if accepted:
        assert lines == [b"HTTP/1.1 101 Switching Protocols"]
        return
    assert b"Connection: close" in got
    if b"CONNECT" in vector:
        assert lines == [b"HTTP/1.1 400 Bad Request"]
    elif vector.startswith(b"GET /v1/responses "):
        assert lines == [b"HTTP/1.1 400 Bad Request"]  # not a whole WebSocket handshake
    elif b"websocket" in vector.lower():
        assert lines == [b"HTTP/1.1 426 Upgrade Required"]
        assert orjson.loads(got.partition(b"\r\n\r\n")[2])["error"]["code"] == "upgrade_required"
    with connect(gateway) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        assert read_response(sock, bytearray())[0] == b"HTTP/1.1 200 OK"


def test_a_websocket_handshake_on_another_route_gets_426_in_openai_shape(upstream: FakeUpstream,
                                                                        gateway: GatewayServer) -> None:
    with connect(gateway) as sock:
        sock.sendall(b"GET /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                     b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        status, headers, body = read_response(sock, bytearray())
        assert sock.recv(1) == b""  # then the close
    assert status == b"HTTP/1.1 426 Upgrade Required" and headers["connection"] == "close"
    error = orjson.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert gateway.sample("llm_gateway_http_refused_total", reason="upgrade") == 1
    assert upstream.bodies("/v1/responses") == []
    # a client that falls back: the request over HTTP, on a new connection, is served (issue #31)
    upstream.enqueue("/v1/responses", body_script(Answer().message(["over HTTP"])))
    got = openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0).responses.create(model="m", input="hi")
    assert got.output_text == "over HTTP" and len(upstream.bodies("/v1/responses")) == 1


def test_an_upgrade_request_body_is_read_as_its_body_and_served_once(upstream: FakeUpstream,
                                                                   gateway: GatewayServer) -> None:
    """An h2c upgrade we ignore (RFC 9110 §7.8 lets a server): the request is served as HTTP/1.1 with
    the body its head frames, chunked here, and the bytes after it are never a request."""
    upstream.enqueue(PATH, completion("ok"))
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(BODY[i:i + 7]), BODY[i:i + 7]) for i in range(0, len(BODY), 7))
    with connect(gateway) as sock:
        sock.sendall(f"POST {PATH} HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                     "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
                     + chunks + b"0\r\n\r\n" + SMUGGLED)
        got = read_to_close(sock)
    assert statuses(got) == [b"HTTP/1.1 200 OK"] and b"Connection: close" in got
    assert upstream.bodies(PATH)[0]["messages"] == orjson.loads(BODY)["messages"]


def test_a_body_of_one_byte_chunks_reaches_the_upstream_whole(upstream: FakeUpstream,
                                                              gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, completion("ok"))
    body = orjson.dumps({**orjson.loads(BODY), "pad": "p" * 5000})
    chunks = b"".join(b"1\r\n%b\r\n" % body[i:i + 1] for i in range(len(body))) + b"0\r\n\r\n"
    with connect(gateway) as sock:
        sock.sendall(f"POST {PATH} HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n".encode() + chunks)
        status, _, _ = read_response(sock, bytearray())
    assert status == b"HTTP/1.1 200 OK"
    assert upstream.bodies(PATH)[-1]["pad"] == "p" * 5000


CHUNKED_HEAD = f"POST {PATH} HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
ENDLESS = {  # chunked framing that carries no data, sent as far as the server reads it
    "chunk-extension": b"1;" + b"e" * (1 << 20),
    "zero-padded-size": b"0" * (1 << 20),
    "trailer-value": b"1\r\nx\r\n0\r\nX-Trailer: " + b"t" * (1 << 20),
}


@pytest.mark.parametrize("framing", list(ENDLESS))
def test_chunk_framing_without_data_is_refused_before_it_grows(gateway: GatewayServer, framing: str) -> None:
    """llhttp skips a chunk extension or a size's leading zeros of any length, and httptools joins a
    trailer value's pieces by concatenation: 1 MiB of either was read to the end (the loop busy for
    nothing: ~1 GB/s for as long as the client sent; a trailer value held in memory at a quadratic cost),
    never answered. Now a line of framing past MAX_CHUNK_LINE is a 400 and the connection closes."""
    with connect(gateway) as sock:
        sock.sendall(CHUNKED_HEAD + ENDLESS[framing])
        got = read_to_close(sock)
    assert statuses(got) == [b"HTTP/1.1 400 Bad Request"]
    assert "chunk size line or trailer field" in orjson.loads(got.partition(b"\r\n\r\n")[2])["error"]["message"]


def test_chunk_framing_is_held_to_a_budget_even_between_data_bytes(make_gateway: Callable[..., GatewayServer]) -> None:
    """Each chunk one data byte behind an 8 KB extension: no line is over the bound, but the framing in
    all is held to max_body_bytes + 128 KiB (413), as the data is to max_body_bytes."""
    gw = make_gateway(server={"max_body_bytes": 1000})
    chunks = (b"1;" + b"e" * 8000 + b"\r\nx\r\n") * 100  # 800 KB of framing for 100 bytes of data
    with connect(gw) as sock:
        sock.sendall(CHUNKED_HEAD + chunks)
        got = read_to_close(sock)
    assert statuses(got) == [b"HTTP/1.1 413 Content Too Large"]
    assert orjson.loads(got.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_too_large"


def test_chunk_extensions_and_trailers_within_the_bounds_are_served(upstream: FakeUpstream,
                                                                    gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, completion("ok"))
    pieces = [BODY[i:i + 9] for i in range(0, len(BODY), 9)]
    chunks = b"".join(b"%x;ext=%s\r\n%s\r\n" % (len(p), b"v" * 4000, p) for p in pieces)
    with connect(gateway) as sock:
        sock.sendall(CHUNKED_HEAD + chunks + b"0\r\nX-Trailer: " + b"t" * 6000 + b"\r\n\r\n")
        status, _, _ = read_response(sock, bytearray())
    assert status == b"HTTP/1.1 200 OK"
    assert upstream.bodies(PATH)[-1]["messages"] == orjson.loads(BODY)["messages"]


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[trustme.CA, dict[str, str]]:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return ca, {"cert_file": str(cert), "key_file": str(key)}


def tls_client(gw: GatewayServer, ca: trustme.CA) -> ssl.SSLSocket:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx.wrap_socket(connect(gw), server_hostname="127.0.0.1")


def tls_get(gw: GatewayServer, ca: trustme.CA) -> bytes:
    with tls_client(gw, ca) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        return read_response(sock, bytearray())[0]


def test_tls_handshakes_count_as_connections_and_end_within_the_head_timeout(
        servers: LoopThread, make_gateway: Callable[..., GatewayServer],
        tls_files: tuple[trustme.CA, dict[str, str]]) -> None:
    """Issue #27: sockets that connect to the TLS port and say nothing sat outside `max_connections`
    and the head timeout (300 exhausted the descriptors). Now each counts from accept; past the limit a
    new one is closed at once (no 503 can precede a handshake), and a silent one is closed after
    `request_head_timeout_s`; both are counted and logged."""
    ca, tls = tls_files
    with capture_logs() as logs:
        gw = make_gateway(server={"tls": tls, "max_connections": 3, "request_head_timeout_s": 0.3})
        assert tls_get(gw, ca) == b"HTTP/1.1 200 OK"
        api = gw.api
        assert api is not None
        servers.run(wait_until(lambda: not api.connections))  # that client's close has been seen
        silent = [connect(gw) for _ in range(3)]
        try:
            with connect(gw) as extra:  # the fourth: refused without a byte
                assert read_to_close(extra) == b""
            for sock in silent:  # closed by the server, the handshake never begun
                assert read_to_close(sock) == b""
        finally:
            for sock in silent:
                sock.close()
        refused = "llm_gateway_http_refused_total"
        servers.run(wait_until(lambda: gw.sample(refused, reason="tls_handshake") == 3))
        assert gw.sample(refused, reason="max_connections") == 1
        assert tls_get(gw, ca) == b"HTTP/1.1 200 OK"  # the slots are free again
        servers.run(wait_until(lambda: sum(e["event"] == "http_refused" for e in logs) >= 2, 3.0))
    counts: dict[str, int] = {}
    for e in logs:
        if e["event"] == "http_refused":
            counts[e["reason"]] = counts.get(e["reason"], 0) + e["count"]
    assert counts == {"max_connections": 1, "tls_handshake": 3}


def test_a_tls_connection_that_sends_nothing_after_its_handshake_is_closed_after_the_head_timeout(
        make_gateway: Callable[..., GatewayServer], tls_files: tuple[trustme.CA, dict[str, str]]) -> None:
    """The handshake was bounded by the head timeout, then a client that said nothing was held for the
    keep-alive time (75 s): the first head's clock runs from the accept, over TLS as over plain TCP."""
    ca, tls = tls_files
    gw = make_gateway(server={"tls": tls, "request_head_timeout_s": 0.3})
    with tls_client(gw, ca) as quiet:  # the socket's 5 s timeout bounds the wait (the old code's TimeoutError)
        assert read_to_close(quiet) == b""
    assert gw.sample("llm_gateway_http_refused_total", reason="head_timeout") == 1


def test_a_refusal_over_tls_reaches_a_client_still_sending_its_body(
        make_gateway: Callable[..., GatewayServer], tls_files: tuple[trustme.CA, dict[str, str]]) -> None:
    """A refusal's close over TLS is its TLS shutdown (no half-close to linger on): the answer and a
    close_notify go out, and what the client still sends is read and dropped meanwhile, so the client is
    not reset before it reads the 413."""
    ca, tls = tls_files
    gw = make_gateway(server={"tls": tls, "max_body_bytes": 1024})
    with tls_client(gw, ca) as sock:
        sock.sendall(post_head(PATH, 4 << 20) + b"x" * (1 << 20))  # refused at the head; the body goes on
        status, headers, _ = read_response(sock, bytearray())
        assert sock.recv(65536) == b""  # then the end
    assert status == b"HTTP/1.1 413 Content Too Large" and headers["connection"] == "close"


def test_websocket_bytes_that_come_with_the_handshake_reach_the_socket(gateway: GatewayServer) -> None:
    """A client may send its first frames in the same packet as the handshake: they are the socket's,
    not dropped with the HTTP reader's leftovers (a close frame read with the head was lost: the
    connection then hung until the client gave up)."""
    handshake = next(v for v in UPGRADE if v.startswith(b"GET /v1/responses ") and b"Sec-WebSocket-Key" in v)
    with connect(gateway) as sock:
        sock.sendall(handshake + b"\x88\x82\x00\x00\x00\x00\x03\xe8")  # the head and a close frame (1000)
        got = read_to_close(sock)
    assert statuses(got) == [b"HTTP/1.1 101 Switching Protocols"]
    assert got.endswith(b"\x88\x02\x03\xe8")  # the server's close frame, 1000, then the end
