"""The SSE writer against the clients' own parsers, and the decoder's cost on a big event in small reads.

What we write must read back, through openai-python's and anthropic-sdk-python's own SSE decoders, as the
data we meant, for ANY data our decoder can hand us (an upstream's multi-line event joined with LF,
an empty `data` line, U+2028 inside JSON). And an incomplete line must cost linear time: the decoder
counts the bytes of earlier reads it copies again (`rescanned`), an operation count, not a timing."""

from __future__ import annotations

import anthropic._streaming as anthropic_sse
import openai._streaming as openai_sse
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.sse import SSEDecoder, encode_data, encode_event
from tests.unit.fidelity import fidelity
from tests.unit.test_sse import _LINES as _SSE_LINES
from tests.unit.test_sse import _stream_in_pieces, decode_general

# any data a decoder can dispatch: no CR (a CR ends a line), lines joined with LF, empty lines included
_LINE = st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
_DATA = st.lists(_LINE, min_size=1, max_size=5).map(b"\n".join)
_NAME = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), min_size=1, max_size=10)


def ours(raw: bytes) -> list[tuple[bytes, str | None]]:
    dec = SSEDecoder()
    return [(e.data, e.event) for e in dec.feed(raw) + dec.finish()]


def openai_reads(raw: bytes) -> list[tuple[bytes, str | None]]:
    return [(e.data.encode(), e.event) for e in openai_sse.SSEDecoder().iter_bytes(iter([raw]))]


def anthropic_reads(raw: bytes) -> list[tuple[bytes, str | None]]:
    return [(e.data.encode(), e.event) for e in anthropic_sse.SSEDecoder().iter_bytes(iter([raw]))]


@fidelity(300)
@given(st.lists(_DATA, min_size=1, max_size=4))
def test_encode_data_reads_back_as_the_same_data_in_every_parser(datas: list[bytes]) -> None:
    utf8 = [d for d in datas if _utf8(d)]
    raw = b"".join(encode_data(d) for d in datas)
    assert ours(raw) == [(d, None) for d in datas]
    if len(utf8) == len(datas):  # the SDKs decode text
        assert openai_reads(raw) == [(d, None) for d in datas]


@fidelity(200)
@given(_NAME, _DATA)
def test_encode_event_reads_back_as_one_event_of_that_name(name: str, data: bytes) -> None:
    raw = encode_event(name, data)
    assert ours(raw) == [(data, name)]
    if _utf8(data):
        assert anthropic_reads(raw) == [(data, name)]


def test_an_event_name_with_a_line_break_cannot_inject_lines() -> None:
    raw = encode_event("delta\ndata: {\"injected\":1}\n", b"{}")
    assert ours(raw) == [(b"{}", "delta data: {\"injected\":1} ")]


def test_multi_line_json_and_an_empty_first_line_stay_one_json_event() -> None:
    data = b'\n{"a":\n"b"}'
    assert openai_reads(encode_data(data)) == [(data, None)]
    assert openai_sse.ServerSentEvent(data=data.decode()).json() == {"a": "b"}


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


# -- the cost of one big event in small reads ------------------------------------------------------------

def _big_event(size: int) -> bytes:
    return b'event: x\ndata: {"text":"' + b"a" * size + b'"}\n\n'


def _feed(dec: SSEDecoder, raw: bytes, read: int, mode: str) -> int:
    events = 0
    for i in range(0, len(raw), read):
        chunk = raw[i:i + read]
        if mode == "feed":
            events += len(dec.feed(chunk))
            continue
        if mode == "event_end":  # the Messages core's path for a read that finishes an event
            dec.event_end(chunk)
            events += len(dec.feed(chunk))
            continue
        region = dec.take_region(chunk, lines_ok=mode == "region_lines")
        if region is None:
            events += len(dec.feed(chunk))
        elif region:
            events += len(dec.events_of(region))
    return events


@pytest.mark.parametrize("mode", ["feed", "region", "region_lines", "event_end"])
@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_a_big_event_in_small_reads_costs_linear_work(mode: str, ending: bytes) -> None:
    """Each byte of an incomplete line is copied again a bounded number of times, whatever the size:
    the count for 1 MiB in 1 KiB reads stays under twice the input, and doubling the input doubles it
    (a decoder that re-joins the partial line per read copies ~size²/2KiB: 512 MiB here)."""
    counts = []
    for size in (1 << 19, 1 << 20):
        raw = _big_event(size).replace(b"\n", ending)
        dec = SSEDecoder()
        assert _feed(dec, raw, 1024, mode) == 1
        assert dec.rescanned <= 2 * len(raw), f"{dec.rescanned} bytes re-read for {len(raw)}"
        counts.append(dec.rescanned)
    assert counts[1] <= 2 * counts[0] + 4096


@fidelity(300)
@given(st.lists(_SSE_LINES, max_size=14), st.lists(st.integers(0, 200), max_size=6), st.booleans(),
       st.sampled_from([0, 1, 3]))
def test_regions_with_lines_kept_read_what_the_line_parser_reads(lines: list[bytes], cuts: list[int], end: bool,
                                                                 size: int) -> None:
    """The Messages core's way (`take_region(lines_ok=True)`, `event_end`, else `feed`), with reads cut
    anywhere or in small sizes (a buffered line end meets the blank line's LF in the next read; pieces
    of a growing line are joined once): the same data as the line parser alone."""
    raw, pieces = _stream_in_pieces(lines, cuts, end)
    if size:
        pieces = [raw[i:i + size] for i in range(0, len(raw), size)]
    dec = SSEDecoder()
    got: list[bytes] = []
    for piece in pieces:
        region = dec.take_region(piece, lines_ok=True)
        if region is None:
            at = dec.event_end(piece) if b"\r" not in piece else -1
            if at > 0:
                got += [e.data for e in dec.feed(piece[:at])]
                piece = piece[at:]
            got += [e.data for e in dec.feed(piece)]
        elif region:
            got += [e.data for e in dec.events_of(region)]
    got += [e.data for e in dec.finish()]
    assert got == [e.data for e in decode_general(raw)]
