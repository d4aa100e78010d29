"""Request vectors of the classes a request-smuggling audit probes (RFC 9112 §6, §7.1, §3, §5): the
values of Content-Length and Transfer-Encoding, chunk-size lines, trailers, the request line and field
lines, and requests asking to switch protocols (`Upgrade`, `CONNECT`), with and without a body. Each
is a whole request; `SMUGGLED` is what an attacker pipelines after one."""

from __future__ import annotations

SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: gw\r\n\r\n"


def request(head_lines: list[bytes], body: bytes = b"", line: bytes = b"POST /v1/x HTTP/1.1") -> bytes:
    return line + b"\r\n" + b"".join(h + b"\r\n" for h in head_lines) + b"\r\n" + body


def _cl(value: bytes, body: bytes = b"hello") -> bytes:
    return request([b"Host: gw", b"Content-Length: " + value], body)


def _te(value: bytes) -> bytes:
    return request([b"Host: gw", b"Transfer-Encoding: " + value], b"5\r\nhello\r\n0\r\n\r\n")


def _chunks(body: bytes) -> bytes:
    return request([b"Host: gw", b"Transfer-Encoding: chunked"], body)


def _field(line: bytes) -> bytes:
    return request([b"Host: gw", line, b"Content-Length: 0"])


def _line(line: bytes) -> bytes:
    return request([b"Host: gw"], line=line)


CONTENT_LENGTH = [_cl(v) for v in (
    b"5", b"05", b" 5", b"5 ", b"5\t", b"5\xa0", b"\xa05", b"+5", b"-5", b"5,5", b"5, 5", b"0x5", b"\xc2\xb2",
    b"5\x0b", b"5\x0c", b"", b"99999999999999999999", b"5\x00", b"5\r", b"1_0", b"\xd9\xa5")] + [
    request([b"Host: gw", b"Content-Length: 5", b"Content-Length: 5"], b"hello"),
    request([b"Host: gw", b"Content-Length: 5", b"Content-Length: 6"], b"hello!"),
    request([b"Host: gw", b"Content-Length: 5", b"Transfer-Encoding: chunked"], b"5\r\nhello\r\n0\r\n\r\n"),
    request([b"Host: gw", b"Transfer-Encoding: chunked", b"Content-Length: 5"], b"5\r\nhello\r\n0\r\n\r\n"),
]

TRANSFER_ENCODING = [_te(v) for v in (
    b"chunked", b"Chunked", b"CHUNKED", b" chunked", b"chunked ", b"chunked\x0b", b"chunked\x85", b"chunked\xa0",
    b"gzip, chunked", b"chunked, gzip", b"identity", b"chunked,", b",chunked", b"xchunked", b"chunked;q=1",
    b"\tchunked", b"chunked\x00", b"chunk\xc4\xb1d", b"identity, chunked", b"")] + [
    request([b"Host: gw", b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"], b"5\r\nhello\r\n0\r\n\r\n"),
    request([b"Host: gw", b"Transfer-Encoding: gzip", b"Transfer-Encoding: chunked"], b"5\r\nhello\r\n0\r\n\r\n"),
    request([b"Host: gw", b"Transfer-Encoding: chunked"], b"5\r\nhello\r\n0\r\n\r\n", line=b"POST /v1/x HTTP/1.0"),
]

CHUNK_LINES = [_chunks(b) for b in (
    b"5\r\nhello\r\n0\r\n\r\n", b"5\nhello\r\n0\r\n\r\n", b"5\r\r\nhello\r\n0\r\n\r\n", b" 5\r\nhello\r\n0\r\n\r\n",
    b"5 \r\nhello\r\n0\r\n\r\n", b"5\t\r\nhello\r\n0\r\n\r\n", b"5;ext\r\nhello\r\n0\r\n\r\n",
    b"5 ;ext\r\nhello\r\n0\r\n\r\n", b"5;a=\"b\"\r\nhello\r\n0\r\n\r\n", b"0x5\r\nhello\r\n0\r\n\r\n",
    b"+5\r\nhello\r\n0\r\n\r\n", b"05\r\nhello\r\n0\r\n\r\n", b"5\r\nhello\n0\r\n\r\n", b"5\r\nhelloXX\r\n0\r\n\r\n",
    b"5\r\nhell\r\n0\r\n\r\n", b"ffffffffffffffffff\r\nhello\r\n0\r\n\r\n", b"5\r\nhello\r\r\n0\r\n\r\n",
    b"3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n", b"5\x00\r\nhello\r\n0\r\n\r\n", b"-5\r\nhello\r\n0\r\n\r\n",
    b"5;\r\nhello\r\n0\r\n\r\n", b"5;\x01\r\nhello\r\n0\r\n\r\n", b"\r\n5\r\nhello\r\n0\r\n\r\n")]

TRAILERS = [_chunks(b"5\r\nhello\r\n" + t) for t in (
    b"0\r\n\r\n", b"0\r\nX: y\r\n\r\n", b"0\r\nGET /smuggled HTTP/1.1\r\n\r\n", b"0\r\n X: y\r\n\r\n",
    b"0\r\nX y\r\n\r\n", b"0\n\n", b"0\r\n\n", b"0\n\r\n", b"0\r\nX: y\n\r\n", b"0\r\nX: a\x00b\r\n\r\n",
    b"0;ext\r\n\r\n", b"00\r\n\r\n", b"0\r\nContent-Length: 5\r\n\r\n", b"0\r\nX:y\r\nX:z\r\n\r\n")]

REQUEST_LINES = [_line(v) for v in (
    b"GET / HTTP/1.1", b"GET  / HTTP/1.1", b"GET / HTTP/1.1 ", b"GET /\x00 HTTP/1.1", b"GET /a\tb HTTP/1.1",
    b"GET http://gw/ HTTP/1.1", b"GET * HTTP/1.1", b"OPTIONS * HTTP/1.1", b"get / HTTP/1.1", b"GET / http/1.1",
    b"GET / HTTP/1.10", b"GET / HTTP/2.0", b"GET / HTTP/0.9", b"G\x00T / HTTP/1.1", b"GET /\x7f HTTP/1.1",
    b"GET /\xc3\xa9 HTTP/1.1", b"GET /?a=b#frag HTTP/1.1", b"GET /a b HTTP/1.1", b"GET", b"GET /",
    b" GET / HTTP/1.1", b"GET / HTTP/1.1\r", b"CONNECT gw:443 HTTP/1.1", b"GET /\r HTTP/1.1",
    b"GET //a HTTP/1.1", b"GET /%00 HTTP/1.1", b"GE(T / HTTP/1.1", b"GET / HTTP/1.1\x00")] + [
    b"GET / HTTP/1.1\nHost: gw\n\n", b"GET / HTTP/1.1\r\nHost: gw\n\r\n", b"\r\nGET / HTTP/1.1\r\nHost: gw\r\n\r\n",
    b"\nGET / HTTP/1.1\r\nHost: gw\r\n\r\n",
]

FIELD_LINES = [_field(v) for v in (
    b"X: a\x00b", b"X: a\x01b", b"X: a\x7fb", b"X: a\rb", b"X : a", b"X\t: a", b"X: a\r\n b", b"X:\ta",
    b"X: \xffa", b": a", b"X", b"X;: a", b"X: a\x0bb", b"X: a\x1bb", b"X\x00: a", b"X\xff: a", b"X: a\tb",
    b"X-\xc3\xa9: a", b"X: " + b"a" * 9000, b"Host: other", b"Content-Length : 0", b"X:", b"X:   ")] + [
    request([b"X: a"]),  # no Host
    request([b"Host: a", b"Host: b"]),
    request([b"Host: gw"], line=b"GET / HTTP/1.0"),
    request([b"Host: gw", b" X: a"]),
    request([b"Host: gw"] + [b"X-%d: v" % i for i in range(150)]),
]

_WS = [b"Host: gw", b"Connection: Upgrade", b"Upgrade: websocket", b"Sec-WebSocket-Version: 13",
       b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
_H2C = [b"Host: gw", b"Connection: Upgrade, HTTP2-Settings", b"Upgrade: h2c",
        b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA"]

# Requests asking to switch protocols, each the last request read from its connection (issue #27: a
# body behind `Upgrade` was parsed as the next request). Those with a body carry a whole request in it.
UPGRADE = [
    request([*_WS, b"Content-Length: %d" % len(SMUGGLED)], SMUGGLED),
    request([*_WS, b"Transfer-Encoding: chunked"], b"%x\r\n%s\r\n0\r\n\r\n" % (len(SMUGGLED), SMUGGLED)),
    request(_WS, line=b"GET /v1/responses HTTP/1.1"),
    request([b"Host: gw", b"Connection: uPgRaDe", b"Upgrade: WebSocket"], line=b"GET /v1/responses HTTP/1.1"),
    request([b"Host: gw", b"Connection: keep-alive, Upgrade", b"Upgrade: websocket", b"Content-Length: 5"], b"hello"),
    request([b"Host: gw", b"Connection: close,upgrade", b"Upgrade: websocket, h2c"], line=b"GET /healthz HTTP/1.1"),
    request(_H2C, line=b"GET /healthz HTTP/1.1"),
    request([*_H2C, b"Content-Length: %d" % len(SMUGGLED)], SMUGGLED),
    request([*_H2C, b"Transfer-Encoding: chunked"], b"3\r\nGET\r\n0\r\n\r\n"),
    request([b"Host: gw", b"Upgrade: websocket", b"Content-Length: 5"], b"hello"),  # no Connection: upgrade
    request([b"Host: gw", b"Connection: Upgrade", b"Upgrade: h2c", b"Content-Length: 5"], b"hello",
            line=b"POST /v1/x HTTP/1.0"),
    request([b"Host: gw", b"Content-Length: %d" % len(SMUGGLED)], SMUGGLED, line=b"CONNECT /v1/x HTTP/1.1"),
    request([b"Host: gw"], line=b"CONNECT gw:443 HTTP/1.1"),
]

ALL = CONTENT_LENGTH + TRANSFER_ENCODING + CHUNK_LINES + TRAILERS + REQUEST_LINES + FIELD_LINES + UPGRADE
