"""The gateway's own HTTP/1.1 server on a real socket, driven byte by byte where SDKs would hide the
detail: pipelining, `Expect: 100-continue`, chunked request bodies, HTTP/1.0, HEAD, refused requests,
routes, idle keep-alive connections and a client that does not read."""

from __future__ import annotations

import dataclasses
import http.client
import socket
import time
from email.utils import parsedate_to_datetime

import orjson

from tests.chat_scripts import completion, text_stream
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread, wait_until

PATH = "/v1/chat/completions"
BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def connect(gw: GatewayServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gw.port), timeout=5)


def read_response(sock: socket.socket, buf: bytearray) -> tuple[bytes, dict[str, str], bytes]:
    """One response framed by Content-Length (the status line, headers, body); bytes after it stay
    in `buf` for the next one."""
    while b"\r\n\r\n" not in buf:
        more = sock.recv(65536)
        assert more, f"closed before a whole head: {bytes(buf)!r}"
        buf += more
    end = buf.index(b"\r\n\r\n")
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    del buf[:end + 4]
    size = int(headers.get("content-length", "0"))
    while len(buf) < size:
        more = sock.recv(65536)
        assert more, "closed inside a body"
        buf += more
    body = bytes(buf[:size])
    del buf[:size]
    return lines[0].encode(), headers, body


def read_to_close(sock: socket.socket) -> bytes:
    out = bytearray()
    while more := sock.recv(65536):
        out += more
    return bytes(out)


def post_head(path: str, length: int, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n").encode()


def test_pipelined_requests_are_answered_in_order_on_one_connection(gateway: GatewayServer) -> None:
    with connect(gateway) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\nGET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"
                     b"HEAD /healthz HTTP/1.1\r\nHost: gw\r\n\r\nGET /readyz HTTP/1.1\r\nHost: gw\r\n\r\n")
        buf = bytearray()
        status, _, body = read_response(sock, buf)
        assert status == b"HTTP/1.1 200 OK" and orjson.loads(body)["data"][0]["id"] == "m"
        assert orjson.loads(read_response(sock, buf)[2]) == {"status": "ok"}
        # HEAD: the GET's headers, its length, no body (RFC 9110 §9.3.2); the next answer follows at once
        while b"\r\n\r\n" not in buf:
            buf += sock.recv(65536)
        head_end = buf.index(b"\r\n\r\n") + 4
        head = bytes(buf[:head_end])
        del buf[:head_end]
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Content-Length: 15\r\n" in head
        assert orjson.loads(read_response(sock, buf)[2]) == {"status": "ready", "state": "ok"}


def test_expect_100_continue_gets_the_interim_answer_before_the_body(upstream: FakeUpstream,
                                                                      gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, completion("continued"))
    with connect(gateway) as sock:
        sock.sendall(post_head(PATH, len(BODY), "Expect: 100-continue\r\n"))
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(BODY)
        status, _, body = read_response(sock, bytearray())
    assert status == b"HTTP/1.1 200 OK"
    assert orjson.loads(body)["choices"][0]["message"]["content"] == "continued"


def test_a_chunked_request_body_reaches_the_upstream_whole(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, completion("chunked"))
    halves = [BODY[:10], BODY[10:]]
    chunked = b"".join(b"%x\r\n%b\r\n" % (len(h), h) for h in halves) + b"0\r\n\r\n"
    with connect(gateway) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n")
        sock.sendall(chunked)
        status, _, body = read_response(sock, bytearray())
    assert status == b"HTTP/1.1 200 OK" and orjson.loads(body)["choices"][0]["message"]["content"] == "chunked"
    assert upstream.received[-1].body["messages"] == [{"role": "user", "content": "hi"}]


def test_an_unreadable_request_gets_an_openai_error_and_the_connection_closes(gateway: GatewayServer) -> None:
    with connect(gateway) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked"
                     b"\r\n\r\n")
        raw = read_to_close(sock)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"Connection: close" in head
    assert orjson.loads(body)["error"]["type"] == "invalid_request_error"
    assert orjson.loads(body)["error"]["code"] == "invalid_request"


def test_unknown_routes_and_methods_get_openai_errors(gateway: GatewayServer) -> None:
    with connect(gateway) as sock:
        sock.sendall(b"GET /v1/nothing HTTP/1.1\r\nHost: gw\r\n\r\n"
                     b"GET /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n")
        buf = bytearray()
        status, _, body = read_response(sock, buf)
        assert status == b"HTTP/1.1 404 Not Found" and orjson.loads(body)["error"]["code"] == "not_found"
        status, headers, body = read_response(sock, buf)
        assert status == b"HTTP/1.1 405 Method Not Allowed" and headers["allow"] == "POST"
        assert orjson.loads(body)["error"]["code"] == "method_not_allowed"


def test_an_http_1_0_client_gets_a_stream_that_ends_at_the_close(upstream: FakeUpstream,
                                                                  gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, text_stream(["Hel", "lo"]))
    body = orjson.dumps({**orjson.loads(BODY), "stream": True})
    with connect(gateway) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
        raw = read_to_close(sock)
    head, _, stream = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 OK\r\n") and b"Transfer-Encoding" not in head
    assert b"Connection: close" in head and stream.endswith(b"data: [DONE]\n\n")
    texts = [orjson.loads(line[6:])["choices"][0]["delta"].get("content", "")
             for line in stream.split(b"\n\n") if line.startswith(b"data: {") and b'"choices":[{' in line]
    assert "".join(texts) == "Hello"


def test_an_idle_keep_alive_connection_is_closed_after_the_timeout(gateway: GatewayServer) -> None:
    assert gateway.api is not None
    gateway.api.limits = dataclasses.replace(gateway.api.limits, keepalive_s=0.2)
    with connect(gateway) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        buf = bytearray()
        assert read_response(sock, buf)[0] == b"HTTP/1.1 200 OK"
        assert sock.recv(1) == b"" and not buf  # the server closed it (recv would time out otherwise)


def test_a_request_under_way_is_not_cut_by_the_keep_alive_sweep(upstream: FakeUpstream,
                                                                gateway: GatewayServer) -> None:
    """The keep-alive clock runs between requests only: a request begun late in a connection's idle time
    was cut by the sweep half-way through its body (the client saw its connection reset, no answer). A
    connection opened after it and closed as idle proves a sweep ran past both idle deadlines."""
    assert gateway.api is not None
    gateway.api.limits = dataclasses.replace(gateway.api.limits, keepalive_s=0.2)
    upstream.enqueue(PATH, completion("whole"))
    with connect(gateway) as sock:
        sock.sendall(post_head(PATH, len(BODY), "Expect: 100-continue\r\n") + BODY[:10])
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"  # the head is read: the request is under way
        with connect(gateway) as witness:
            assert witness.recv(1) == b""  # idle: closed by a sweep
        sock.sendall(BODY[10:])
        status, _, body = read_response(sock, bytearray())
    assert status == b"HTTP/1.1 200 OK" and orjson.loads(body)["choices"][0]["message"]["content"] == "whole"


def test_a_client_that_does_not_read_holds_its_stream_back(servers: LoopThread, upstream: FakeUpstream,
                                                            gateway: GatewayServer) -> None:
    """The gateway stops writing (and so stops reading the upstream) while the client's socket is
    full, then resumes: every byte arrives, in order."""
    pieces = [f"{i:05d}" + "x" * 4000 for i in range(2000)]  # 8 MB: more than the kernel buffers hold
    upstream.enqueue(PATH, text_stream(pieces))
    api = gateway.api
    assert api is not None
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    conn.request("POST", PATH, orjson.dumps({**orjson.loads(BODY), "stream": True}),
                 {"Content-Type": "application/json"})
    servers.run(wait_until(lambda: any(c.writing_paused for c in api.connections), 10.0))
    resp = conn.getresponse()
    stream = resp.read()
    conn.close()
    texts = [orjson.loads(line[6:])["choices"][0]["delta"].get("content", "")
             for line in stream.split(b"\n\n") if line.startswith(b"data: {") and b'"choices":[{' in line]
    assert "".join(texts) == "".join(pieces)


def test_request_ids_are_unique_32_hex_digits_and_a_safe_given_one_is_kept(gateway: GatewayServer) -> None:
    with connect(gateway) as sock:
        plain = b"GET /v1/nothing HTTP/1.1\r\nHost: gw\r\n\r\n"
        sock.sendall(plain * 3 + b"GET /v1/nothing HTTP/1.1\r\nHost: gw\r\nX-Request-Id: abc-1\r\n\r\n"
                     b"GET /v1/nothing HTTP/1.1\r\nHost: gw\r\nX-Request-Id: a b\r\n\r\n")
        buf = bytearray()
        ids = [read_response(sock, buf)[1]["x-request-id"] for _ in range(5)]
    assert ids[3] == "abc-1"
    fresh = ids[:3] + ids[4:]
    assert len(set(fresh)) == 4 and all(len(i) == 32 and int(i, 16) >= 0 for i in fresh)


def test_a_response_carries_the_date_made_ahead_by_the_sweep(servers: LoopThread, gateway: GatewayServer) -> None:
    with connect(gateway) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        _, headers, _ = read_response(sock, bytearray())
    sent = parsedate_to_datetime(headers["date"]).timestamp()
    assert abs(sent - time.time()) <= 2.0 and headers["date"].endswith(" GMT")
    api = gateway.api
    assert api is not None
    # a response only finds or formats its own second: the next one is there only if the sweep made it
    servers.run(wait_until(lambda: int(time.time()) + 1 in api.dates, 3.0))
