"""The upstream response framing (llhttp under our policy) fed whole and at every split, and against h11:
we never complete a response that h11 or plain llhttp refuses, and frame the same body as both."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import pairwise

import h11
import httptools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.http1 import HTTPError
from gateway.upstream.framing import MAX_HEAD_BYTES, MAX_INTERIM, MAX_LINE, MAX_QUIET, ResponseFramer


@dataclass(frozen=True)
class Read:
    """What the framer made of a response: refused, still incomplete, or complete."""

    verdict: str  # "refused", "incomplete", "complete"
    status: int = 0
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    extra: bool = False
    until_close: bool = False


def frame(pieces: list[bytes]) -> Read:
    f = ResponseFramer()
    body: list[bytes] = []
    try:
        for p in pieces:
            f.feed(p)
            body += f.pieces
            f.pieces.clear()  # as the connection takes them
    except HTTPError:
        return Read("refused")
    head = f.head
    status, headers = (head.status, tuple(sorted(head.headers.items()))) if head is not None else (0, ())
    return Read("complete" if f.done else "incomplete", status, headers, b"".join(body), f.extra, f.until_close)


def split(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted(c % (len(raw) + 1) for c in cuts), len(raw)]
    return [raw[a:b] for a, b in pairwise(points)]


def h11_read(raw: bytes) -> tuple[str, bytes]:
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="POST", target="/", headers=[("Host", "x"), ("Content-Length", "0")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(raw)
    body = b""
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                return "incomplete", body
            if isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return "complete", body
    except h11.RemoteProtocolError:
        return "refused", b""


class _Plain:
    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.done = False

    def on_body(self, data: bytes) -> None:
        self.body.append(data)

    def on_message_complete(self) -> None:
        self.done = True


def llhttp_read(raw: bytes) -> tuple[str, bytes]:
    """Plain llhttp, no policy of ours: the final message's body (interim heads have none)."""
    plain = _Plain()
    parser = httptools.HttpResponseParser(plain)
    try:
        parser.feed_data(raw)
    except (httptools.HttpParserError, httptools.HttpParserUpgrade):
        if not plain.done:
            return "refused", b""
    return ("complete" if plain.done else "incomplete"), b"".join(plain.body)


H = b"HTTP/1.1 200 OK\r\n"
CHUNKED = (H + b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nx-a: 2\r\n\r\n"
           b"5\r\nhello\r\n1a;ext=1\r\n abcdefghijklmnopqrstuvwxy\r\n0\r\nTrailer: t\r\n\r\n")
LENGTH = H + b"Content-Length: 11\r\nConnection: close\r\n\r\nhello world"
INTERIM = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n" + LENGTH


@pytest.mark.parametrize("raw", [CHUNKED, LENGTH, INTERIM, b"HTTP/1.1 204 No Content\r\n\r\n"],
                         ids=["chunked", "length", "interim", "204"])
def test_whole_every_split_and_byte_by_byte_read_the_same(raw: bytes) -> None:
    whole = frame([raw])
    assert whole.verdict == "complete" and not whole.extra
    for i in range(len(raw) + 1):
        assert frame([raw[:i], raw[i:]]) == whole, f"split at {i}"
    assert frame([raw[i:i + 1] for i in range(len(raw))]) == whole, "one byte at a time"


def test_what_is_read() -> None:
    r = frame([CHUNKED])
    assert (r.status, r.body) == (200, b"hello abcdefghijklmnopqrstuvwxy")
    assert dict(r.headers)["x-a"] == "1, 2" and "trailer" not in dict(r.headers)
    r = frame([INTERIM])
    assert (r.status, r.body, dict(r.headers).get("link")) == (200, b"hello world", None)


def test_keep_alive_extra_bytes_and_until_close() -> None:
    f = ResponseFramer()
    f.feed(LENGTH + b"junk")
    assert f.done and f.extra and f.head is not None and not f.head.keep_alive
    f = ResponseFramer()
    f.feed(H + b"Content-Length: 2\r\n\r\nhi")
    assert f.done and not f.extra and f.head is not None and f.head.keep_alive
    f.feed(b"HTTP/1.1 200 OK\r\n")  # a second answer nobody asked for
    assert f.extra
    f = ResponseFramer()
    f.feed(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert f.done and f.head is not None and not f.head.keep_alive
    r = frame([H + b"\r\nabc", b"def"])
    assert r.verdict == "incomplete" and r.until_close and r.body == b"abcdef"
    r = frame([b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\nhello"])
    assert r.verdict == "complete" and r.body == b"" and r.extra, "a 304 has no body; the rest is not ours"


REFUSED = [
    b"HTTP/1.1 200 \x00OK\r\nContent-Length: 0\r\n\r\n",  # a control byte in the reason (fuzz find)
    b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",  # an empty line before the status line
    H + b"Content-Length: 5\xa0\r\n\r\nhello",
    H + b"Transfer-Encoding: chunked\x0b\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    H + b"Content-Length: +5\r\n\r\nhello",
    H + "Content-Length: ²\r\n\r\nhi".encode(),
    H + b"Content-Length: -1\r\n\r\n",
    H + b"Transfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n",
    H + b"Transfer-Encoding: chunked\r\n\r\n5\r\r\nhello\r\n0\r\n\r\n",
    H + b"Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n",
    H + b"Transfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n",
    H + b"Transfer-Encoding: chunked\r\n\r\n5\t;a=b\r\nhello\r\n0\r\n\r\n",
    H + b"Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
    H + b"Transfer-Encoding: chunked\r\n\r\n1_0\r\n",
    H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
    H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nbad trailer\r\n\r\n",
    H + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    H + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    H + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
    H + b"Content-Length: 5, 5\r\n\r\nhello",
    H + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    H + b"Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    H + b"Transfer-Encoding: gzip\r\n\r\nhello",
    H + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    H + b"X: a\r\n b\r\nContent-Length: 5\r\n\r\nhello",  # obs-fold (RFC 9112 §5.2)
    H + b"X: a\x01b\r\nContent-Length: 5\r\n\r\nhello",
    H + b"X: a\x7fb\r\nContent-Length: 5\r\n\r\nhello",
    H + b"X\x01: ab\r\nContent-Length: 5\r\n\r\nhello",
    H + b"X : ab\r\nContent-Length: 5\r\n\r\nhello",
    H + b"no colon\r\n\r\n",
    H + b"Content-Length: 5\r\r\n\r\nhello",
    H + b"\rContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
    b"HTTP/1.1 2000 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/2 200 OK\r\n\r\n",
    b"NOT HTTP\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\n\r\n" + LENGTH,
    b"HTTP/1.1 102 Processing\r\n\r\n" + LENGTH,
]
ACCEPTED = [
    LENGTH, CHUNKED, INTERIM,
    H + b"Transfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\n\r\n",
    H + b"Transfer-Encoding: Chunked\r\n\r\n00005\r\nhello\r\n0\r\nX: y\r\n\r\n",
    H + b"Content-Length: 05\r\nX: ab  \r\n\r\nhello",
    H + b"Content-Length: 5 \r\n\r\nhello",
    b"HTTP/1.1 200\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 204 No Content\r\n\r\n",
]


@pytest.mark.parametrize("raw", REFUSED)
def test_refused_whole_and_byte_by_byte(raw: bytes) -> None:
    assert frame([raw]).verdict == "refused"
    assert frame([raw[i:i + 1] for i in range(len(raw))]).verdict == "refused"


@pytest.mark.parametrize("raw", REFUSED + ACCEPTED)
def test_against_h11_and_plain_llhttp(raw: bytes) -> None:
    ours, theirs, plain = frame([raw]), h11_read(raw), llhttp_read(raw)
    if theirs[0] == "refused" and plain[0] == "refused":
        assert ours.verdict == "refused"
    if ours.verdict == "complete":
        assert theirs == ("complete", ours.body) and plain == ("complete", ours.body)
    assert (ours.verdict == "complete") == (raw in ACCEPTED)


def test_the_head_is_bounded() -> None:
    line = H + b"X: " + b"y" * (MAX_LINE + 1)
    assert frame([line]).verdict == "refused", "a line that never ends"
    assert frame([line + b"\r\n\r\n"]).verdict == "refused", "a long line in one read"
    many = H + b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"Content-Length: 0\r\n\r\n"
    assert frame([many]).verdict == "refused"
    big = H + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 4000) for i in range(MAX_HEAD_BYTES // 4000 + 1))
    assert frame([big]).verdict == "refused"
    assert frame([big[i:i + 1000] for i in range(0, len(big), 1000)]).verdict == "refused"


def test_interim_heads_are_bounded() -> None:
    flood = b"HTTP/1.1 100 Continue\r\n\r\n" * (MAX_INTERIM + 1) + LENGTH
    assert frame([flood]).verdict == "refused"
    assert frame([b"HTTP/1.1 100 Continue\r\n\r\n" * MAX_INTERIM + LENGTH]).verdict == "complete"


def test_trailers_and_extensions_are_bounded() -> None:
    start = H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX: "
    pieces = [start] + [b"y" * 1024] * (MAX_QUIET // 1024 + 2)
    assert frame(pieces).verdict == "refused"
    pieces = [H + b"Transfer-Encoding: chunked\r\n\r\n5;"] + [b"e" * 1024] * (MAX_QUIET // 1024 + 2)
    assert frame(pieces).verdict == "refused"


def test_a_head_sent_one_byte_per_read_costs_linear_time() -> None:
    """httptools joins a split header value by concatenation; we feed it whole lines only."""
    raw = H + b"X: " + b"v" * (MAX_LINE - 8) + b"\r\nContent-Length: 0\r\n\r\n"
    f = ResponseFramer()
    for i in range(len(raw)):
        f.feed(raw[i:i + 1])
    assert f.done and f.head is not None and len(f.head.headers["x"]) == MAX_LINE - 8


_TOKENS = [b"HTTP/1.1 ", b"HTTP/1.0 ", b"200 OK", b"204", b"100 Continue", b"101", b"\r\n", b"\n", b"\r",
           b"Content-Length: ", b"Transfer-Encoding: ", b"chunked", b"gzip", b",", b" ", b"\t", b"0", b"5",
           b"a", b"F", b"+", b"-", b";x=1", b"\x00", b"\x0b", b"\xa0", "²".encode(), b"X: y", b":",
           b"hello", b"Connection: close", b"Trailer: t", b"\r\n\r\n"]


@st.composite
def responses(draw: st.DrawFn) -> bytes:
    """Mostly near-valid responses, mutated by tokens that break framing in the usual ways."""
    te = draw(st.booleans())
    body = draw(st.binary(max_size=20))
    head = b"HTTP/1.1 200 OK\r\n" + draw(st.sampled_from([b"", b"X: y\r\n", b"Connection: close\r\n"]))
    if te:
        sizes = draw(st.sampled_from([b"%x", b"%X", b"%03x", b"%x;e=1"]))
        framed = head + b"Transfer-Encoding: chunked\r\n\r\n" + (sizes % len(body) + b"\r\n" + body + b"\r\n"
                                                                   if body else b"") + b"0\r\n\r\n"
    else:
        framed = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    raw = bytearray(framed)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(raw)))
        token = draw(st.sampled_from(_TOKENS) | st.binary(min_size=1, max_size=3))
        if draw(st.booleans()):
            raw[at:at] = token
        else:
            del raw[at:at + draw(st.integers(1, 4))]
    return bytes(raw)


def same_read(got: Read, whole: Read, raw: bytes) -> bool:
    """Equal reads. One allowance: empty lines right after a complete message, in the read that ended
    it, are skipped by llhttp without a callback (the robustness rule for empty lines between messages,
    RFC 9112 §2.2), so only a later read shows them as `extra`. Either way the message is the same and
    nothing of it is lost; a connection with such bytes in a later read is not reused."""
    if got == whole:
        return True
    only_crlf = whole.verdict == "complete" and not whole.extra and got.extra and raw.endswith((b"\n", b"\r"))
    return only_crlf and dataclasses.replace(got, extra=False) == whole


@settings(max_examples=300, deadline=None)
@given(responses(), st.lists(st.integers(0, 400), max_size=4))
def test_fuzz_against_h11_and_llhttp_at_any_split(raw: bytes, cuts: list[int]) -> None:
    whole = frame([raw])  # nothing but HTTPError escapes: frame() catches only that
    assert same_read(frame(split(raw, cuts)), whole, raw)
    assert same_read(frame([raw[i:i + 1] for i in range(len(raw))]), whole, raw)
    if whole.verdict == "complete":
        assert h11_read(raw) == ("complete", whole.body)
        assert llhttp_read(raw) == ("complete", whole.body)
