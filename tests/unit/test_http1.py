"""The HTTP/1.1 response reader fed at every split point (RFC 9112 §4, §6.3, §7.1)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.http1 import BodyReader, HTTPError, parse_head, request_bytes


def read_all(raw: bytes, cuts: list[int]) -> tuple[int, dict[str, str], bytes, bool, bytes]:
    """Feed `raw` split at `cuts`: (status, headers, body, done, extra)."""
    pieces, last = [], 0
    for c in sorted(cuts):
        pieces.append(raw[last:c])
        last = c
    pieces.append(raw[last:])
    buf, reader, body, head = b"", None, [], None
    for p in pieces:
        if reader is None:
            buf += p
            got = parse_head(buf)
            if got is None:
                continue
            head, at = got
            reader = BodyReader(head)
            p = buf[at:]
        body.append(reader.feed(p))
    assert head is not None and reader is not None
    return head.status, head.headers, b"".join(body), reader.done, reader.extra


CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
           b"X-A: 1\r\nx-a: 2\r\n\r\n"
           b"5\r\nhello\r\n1a;ext=1\r\n abcdefghijklmnopqrstuvwxy\r\n0\r\nTrailer: t\r\n\r\n")
LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world"
INTERIM = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n" + LENGTH


@pytest.mark.parametrize("raw", [CHUNKED, LENGTH, INTERIM], ids=["chunked", "length", "interim"])
def test_every_split_point_reads_the_same_response(raw: bytes) -> None:
    whole = read_all(raw, [])
    assert whole[3] and whole[4] == b""
    for i in range(len(raw) + 1):
        assert read_all(raw, [i]) == whole, f"split at {i}"
    assert read_all(raw, list(range(len(raw)))) == whole, "one byte at a time"


def test_what_the_reader_reads() -> None:
    status, headers, body, _, _ = read_all(CHUNKED, [])
    assert (status, body) == (200, b"hello abcdefghijklmnopqrstuvwxy")
    assert headers["x-a"] == "1, 2" and headers["content-type"] == "text/event-stream"
    status, headers, body, _, _ = read_all(INTERIM, [])
    assert (status, body, headers.get("link")) == (200, b"hello world", None)


def test_keep_alive_and_bytes_past_the_end() -> None:
    head, at = parse_head(LENGTH + b"junk") or (None, 0)
    assert head is not None and not head.keep_alive
    reader = BodyReader(head)
    assert reader.feed((LENGTH + b"junk")[at:]) == b"hello world" and reader.extra == b"junk"
    h10, _ = parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n") or (None, 0)
    assert h10 is not None and not h10.keep_alive
    h11, _ = parse_head(b"HTTP/1.1 204 No Content\r\n\r\n") or (None, 0)
    assert h11 is not None and h11.keep_alive and BodyReader(h11).done


def test_until_close_when_nothing_frames_the_body() -> None:
    head, _ = parse_head(b"HTTP/1.1 200 OK\r\n\r\n") or (None, 0)
    assert head is not None
    reader = BodyReader(head)
    assert reader.until_close and reader.feed(b"abc") == b"abc" and not reader.done


@pytest.mark.parametrize("bad", [b"0x5\r\nhello\r\n", b"+5\r\nhello\r\n", b"1_0\r\n", b"zz\r\n", b"\r\n",
                                 b"2\r\nabc\r\n"])
def test_bad_chunk_framing_is_an_error(bad: bytes) -> None:
    head, _ = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") or (None, 0)
    assert head is not None
    with pytest.raises(HTTPError):
        BodyReader(head).feed(bad)


@pytest.mark.parametrize("bad", [b"HTTP/2 200 OK\r\n\r\n", b"HTTP/1.1 2000 OK\r\n\r\n",
                                 b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
                                 b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                                 b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"])
def test_bad_heads_are_errors(bad: bytes) -> None:
    with pytest.raises(HTTPError):
        head, _ = parse_head(bad) or (None, 0)
        assert head is not None
        BodyReader(head)


def test_a_head_without_end_is_bounded() -> None:
    assert parse_head(b"HTTP/1.1 200 OK\r\nX: y\r\n") is None
    with pytest.raises(HTTPError):
        parse_head(b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * 70_000)


def test_request_bytes_and_header_injection() -> None:
    raw = request_bytes("POST", "/v1/chat/completions?a=1", "api.example.com", {"Authorization": "Bearer k",
                        "content-length": "999"}, b"{}")
    assert raw == (b"POST /v1/chat/completions?a=1 HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 2\r\n"
                   b"Authorization: Bearer k\r\n\r\n{}")
    with pytest.raises(HTTPError):
        request_bytes("POST", "/", "h", {"X-Evil": "a\r\nInjected: 1"}, b"")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), max_size=8), st.lists(st.integers(0, 500), max_size=4),
       st.booleans())
def test_whole_chunks_read_like_one_byte_at_a_time(bodies: list[bytes], cuts: list[int], upper: bool) -> None:
    """The fast path for reads of whole chunks against the line-by-line reader (one byte per read)."""
    fmt = b"%X\r\n%s\r\n" if upper else b"%x\r\n%s\r\n"
    raw = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(fmt % (len(b), b) for b in bodies)
           + b"0\r\n\r\n")
    reference = read_all(raw, list(range(len(raw))))
    assert reference[2] == b"".join(bodies) and reference[3]
    assert read_all(raw, [c % (len(raw) + 1) for c in cuts]) == reference


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=12).map(lambda b: b.replace(b"x", b"\r\n")), min_size=2, max_size=8),
       st.lists(st.sampled_from([b"%x", b"%03x", b"%X", b"%x;ext=1", b"%x "]), min_size=8, max_size=8),
       st.lists(st.integers(0, 300), max_size=3), st.sampled_from([b"0\r\n\r\n", b"0\r\nTrailer: 1\r\n\r\n", b""]))
def test_reads_of_many_chunks_read_like_one_byte_at_a_time(bodies: list[bytes], sizes: list[bytes], cuts: list[int],
                                                          end: bytes) -> None:
    """Data holding CRLFs, sizes with leading zeros, extensions, trailers: the all-at-once read of whole
    chunks either reads what the line parser reads or leaves the read to it."""
    chunks = b"".join(sizes[i] % len(b) + b"\r\n" + b + b"\r\n" for i, b in enumerate(bodies))
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + end
    try:
        reference = read_all(raw, list(range(len(raw))))
    except HTTPError:  # a size followed by a space is not a size
        with pytest.raises(HTTPError):
            read_all(raw, [c % (len(raw) + 1) for c in cuts])
        return
    assert reference[2] == b"".join(bodies) and reference[3] == bool(end)
    assert read_all(raw, [c % (len(raw) + 1) for c in cuts]) == reference
    assert read_all(raw, []) == reference
