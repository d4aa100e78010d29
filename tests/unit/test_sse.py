"""The SSE decoder fed bytes at every chunk boundary, for every line ending (WHATWG HTML §9.2.5)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.sse import (
    BOM,
    SSEDecoder,
    SSEError,
    SSEEvent,
    data_lines,
    encode_data,
    encode_event,
    encode_multiline,
)

FIXTURES = sorted((Path(__file__).parent.parent / "fixtures" / "sse").glob("*.sse"))
ENDINGS = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}


def decode_all(pieces: list[bytes]) -> list[SSEEvent]:
    dec = SSEDecoder()
    out: list[SSEEvent] = []
    for p in pieces:
        out.extend(dec.feed(p))
    out.extend(dec.finish())
    return out


def with_ending(raw: bytes, ending: bytes) -> bytes:
    return raw.replace(b"\n", ending)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
@pytest.mark.parametrize("ending", list(ENDINGS), ids=list(ENDINGS))
def test_every_split_point_gives_the_same_events(path: Path, ending: str) -> None:
    raw = with_ending(path.read_bytes(), ENDINGS[ending])
    expected = decode_all([raw])
    assert expected, "fixture decodes to events"
    for i in range(len(raw) + 1):
        assert decode_all([raw[:i], raw[i:]]) == expected, f"split at byte {i}"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
@pytest.mark.parametrize("ending", list(ENDINGS), ids=list(ENDINGS))
def test_one_byte_at_a_time(path: Path, ending: str) -> None:
    raw = with_ending(path.read_bytes(), ENDINGS[ending])
    assert decode_all([raw[i:i + 1] for i in range(len(raw))]) == decode_all([raw])


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_line_endings_do_not_change_the_events(path: Path) -> None:
    raw = path.read_bytes()
    results = [decode_all([with_ending(raw, e)]) for e in ENDINGS.values()]
    assert results[0] == results[1] == results[2]


def test_fixture_payloads_are_json_and_keep_u2028_inside_strings() -> None:
    events = decode_all([(FIXTURES[0].parent / "chat_text.sse").read_bytes()])
    contents = [orjson.loads(e.data) for e in events if e.data != b"[DONE]"]
    assert "изв\u2028естни" in contents[2]["choices"][0]["delta"]["content"]


def test_crlf_split_across_reads_is_one_line_end() -> None:
    events = decode_all([b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"])
    assert [e.data for e in events] == [b"a", b"b"]


def test_lone_cr_then_lf_in_next_chunk_is_not_a_blank_line() -> None:
    # "data: a\r" + "\ndata: b\r\r": the LF completes the CR, so "a" and "b" are ONE event
    events = decode_all([b"data: a\r", b"\ndata: b\r\r"])
    assert [e.data for e in events] == [b"a\nb"]


def test_comments_are_counted_not_dispatched() -> None:
    dec = SSEDecoder()
    assert dec.feed(b": keepalive\n\n: OPENROUTER PROCESSING\n\n") == []
    assert dec.comments == 2


def test_field_without_space_and_with_two_spaces() -> None:
    events = decode_all([b"data:x\n\ndata:  y\n\n"])
    assert [e.data for e in events] == [b"x", b" y"]


def test_multi_line_data_joins_with_lf_and_bare_data_line_adds_empty_line() -> None:
    events = decode_all([b"data: a\ndata\ndata: b\n\n"])
    assert [e.data for e in events] == [b"a\n\nb"]


def test_event_name_and_id_are_kept_and_id_persists() -> None:
    events = decode_all([b"event: response.created\nid: 1\ndata: {}\n\ndata: 2\n\n"])
    assert events[0] == SSEEvent(b"{}", "response.created", "1")
    assert events[1] == SSEEvent(b"2", None, "1")


def test_event_without_data_dispatches_nothing() -> None:
    assert decode_all([b"event: ping\n\n\n\nretry: 10\n\n"]) == []


def test_bom_stripped_once_even_when_split() -> None:
    raw = BOM + b"data: a\n\n"
    for i in range(len(raw) + 1):
        assert [e.data for e in decode_all([raw[:i], raw[i:]])] == [b"a"]
    assert decode_all([BOM + BOM + b"data: a\n\n"]) == []  # a second BOM is part of the field name


def test_unterminated_final_event_is_discarded() -> None:
    assert [e.data for e in decode_all([b"data: a\n\ndata: b"])] == [b"a"]
    assert [e.data for e in decode_all([b"data: a\n\ndata: b\n"])] == [b"a"]


def test_size_limit_on_one_line_and_on_one_event() -> None:
    with pytest.raises(SSEError):
        SSEDecoder(max_event_bytes=100).feed(b"data: " + b"x" * 200)
    dec = SSEDecoder(max_event_bytes=100)
    with pytest.raises(SSEError):
        for _ in range(20):
            dec.feed(b"data: " + b"y" * 10 + b"\n")


def test_encoders_round_trip() -> None:
    payload = b'{"a":"line\\nbreak"}'
    assert decode_all([encode_data(payload)]) == [SSEEvent(payload)]
    assert decode_all([encode_event("response.done", b"{}")]) == [SSEEvent(b"{}", "response.done")]
    assert decode_all([encode_multiline(b"one\r\ntwo\nthree", "x")]) == [SSEEvent(b"one\ntwo\nthree", "x")]


def decode_general(raw: bytes) -> list[SSEEvent]:
    """The reference: the line-by-line parser alone, never the fast path for whole `data:` events."""
    dec = SSEDecoder()
    return dec._feed(raw) + dec.finish()


_LINES = st.sampled_from([b"data: {\"a\":1}", b"data: x", b"data:", b"data: ", b"data:  two", b": ping",
                          b"event: delta", b"id: 7", b"", b"data: [DONE]", b"retry: 5", b"data: a\\n",
                          b"data: \xe2\x80\xa8", b"dat", b"data: data: x"])


def _stream_in_pieces(lines: list[bytes], cuts: list[int], end: bool) -> tuple[bytes, list[bytes]]:
    raw = b"\n".join(lines) + (b"\n\n" if end else b"")
    pieces, last = [], 0
    for cut in sorted(c % (len(raw) + 1) for c in cuts):
        pieces.append(raw[last:cut])
        last = cut
    pieces.append(raw[last:])
    return raw, pieces


@settings(max_examples=400, deadline=None)
@given(st.lists(_LINES, max_size=14), st.lists(st.integers(0, 200), max_size=4), st.booleans())
def test_the_fast_path_reads_what_the_line_parser_reads(lines: list[bytes], cuts: list[int], end: bool) -> None:
    raw, pieces = _stream_in_pieces(lines, cuts, end)
    assert decode_all(pieces) == decode_general(raw)


@settings(max_examples=400, deadline=None)
@given(st.lists(_LINES, max_size=14), st.lists(st.integers(0, 200), max_size=4), st.booleans())
def test_a_region_or_else_feed_reads_the_data_the_line_parser_reads(lines: list[bytes], cuts: list[int],
                                                                     end: bool) -> None:
    """Every piece by `take_region` when it takes it (its events by `data_lines`, else `events_of`,
    read by halves at an event boundary), else by `feed`."""
    raw, pieces = _stream_in_pieces(lines, cuts, end)
    dec = SSEDecoder()
    got: list[bytes] = []
    for piece in pieces:
        region = dec.take_region(piece)
        if region is None:
            got += [e.data for e in dec.feed(piece)]
            continue
        assert region == b"" or region.endswith(b"\n\n")
        datas = data_lines(region)
        if datas is not None:
            got += datas
            continue
        cut = region.find(b"\n\n") + 2
        got += [e.data for e in dec.events_of(region[:cut]) + dec.events_of(region[cut:])]
    got += [e.data for e in dec.finish()]
    assert got == [e.data for e in decode_general(raw)]


def test_take_region_takes_whole_events_and_leaves_the_rest_to_feed() -> None:
    dec = SSEDecoder()
    assert dec.take_region(b"\xef\xbb") is None, "a BOM split across reads is the line parser's"
    assert dec.feed(b"\xef\xbb") == []
    assert [e.data for e in dec.feed(b"\xbfdata: a\n\n")] == [b"a"]
    assert SSEDecoder().take_region(BOM + b"data: a\n\n") == b"data: a\n\n"
    assert dec.take_region(b"data: b\n\ndata: c\n\ndata: d") == b"data: b\n\ndata: c\n\n"
    assert dec.take_region(b"") == b""  # "data: d" stays buffered
    region = dec.take_region(b"\n\nevent: x\ndata: e\n\n")
    assert region == b"data: d\n\nevent: x\ndata: e\n\n"
    assert data_lines(region) is None
    assert [(e.event, e.data) for e in dec.events_of(region)] == [(None, b"d"), ("x", b"e")]
    assert dec.take_region(b"data: f\n") is None, "a complete line of an unfinished event is feed's"
    assert dec.take_region(b"\r\n") is None
    assert [e.data for e in dec.feed(b"data: f\n\n")] == [b"f"]


def test_a_region_over_the_event_size_limit_is_left_to_feed() -> None:
    dec = SSEDecoder(max_event_bytes=64)
    dec.feed(b"data: a\n\n")
    assert dec.take_region(b"data: " + b"x" * 100 + b"\n\n") is None
    with pytest.raises(SSEError):
        dec.feed(b"data: " + b"x" * 100 + b"\n\n")
