"""A big body parsed in steps (`core.json_split`) reads exactly as one whole parse (`core.json_body`).

Small `sizes` make every literal of a few bytes "long" and cut it into pieces of every size, so every
place a cut can fall (inside escapes, surrogate pairs, UTF-8 sequences, runs of backslashes) is tried.
"""

from __future__ import annotations

import collections
import enum
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.json_body import MAX_CONTAINERS, BodyError, JsonText, encode, parse_object
from gateway.core.json_split import MAX_HALVED, MAX_QUOTES, MAX_RUN, MIN_PIECE, QUOTE_RUN, SplitParse

# Every kind of content a literal's bytes can hold: ASCII, the short escapes, \u escapes (a surrogate
# pair among them), raw UTF-8 of 2, 3 and 4 bytes, and runs of backslashes before a quote.
TRICKY = rb'ab\n\"\\\\\"\u00e9\ud83d\ude00\u0041' + "é中😀".encode() + rb'\\\\\\\"z\/\t'


def whole(raw: bytes) -> Any:
    """What one whole parse gives: the object, or the refusal's message."""
    try:
        return parse_object(raw)
    except BodyError as exc:
        return f"refused: {exc}"


def split(raw: bytes, long: int = 1, piece: int = 1, count: int = 7) -> Any:
    """What the split parse gives, the body parsed whole where it falls back."""
    parse = SplitParse(raw, sizes=(long, piece, count))
    try:
        steps = 0
        while not parse.step():
            steps += 1
            assert steps < 10 * len(raw) + 10, "the parse ends"
    except BodyError as exc:
        return f"refused: {exc}"
    return whole(raw) if parse.fallback else parse.body


def same(a: Any, b: Any) -> bool:
    """Equal, keys in the same order (a re-serialisation of each tells)."""
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return bool(orjson.dumps(a) == orjson.dumps(b))


@pytest.mark.parametrize("piece", range(MIN_PIECE, MIN_PIECE + len(TRICKY) + 1))
def test_a_literal_cut_at_every_place_reads_as_the_whole_parse(piece: int) -> None:
    """Pieces of every length from the shortest to a whole TRICKY longer: the cuts fall at every offset."""
    text = TRICKY * 4
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "' + text + b'"}], "' + text + b'": 1}'
    parse = SplitParse(raw, sizes=(1, piece, 5))
    while not parse.step():
        pass
    assert not parse.fallback, "this body takes the split path"
    assert same(parse.body, orjson.loads(raw))
    content = parse.body["messages"][0]["content"] if parse.body else None
    assert isinstance(content, JsonText) and content.json == b'"' + text + b'"', "it keeps its literal"
    assert same(orjson.loads(encode(parse.body)), orjson.loads(raw)), "written as its literal, the same JSON"


def test_the_bench_body_of_one_long_string_is_split_and_read_whole() -> None:
    text = "a" * (3 * 1024 * 1024) + "é\n\"" * 1000
    raw = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]})
    parse = SplitParse(raw)
    steps = 1
    while not parse.step():
        steps += 1
    assert not parse.fallback and parse.body == orjson.loads(raw)
    assert steps > 12, "the work was spread over steps: counted a MiB at a time, decoded 256 KiB at a time"


@pytest.mark.parametrize("raw", [
    b'{"a": "' + TRICKY,  # unterminated
    b'{"a": "x\x01y"}',  # a control character
    b'{"a": "\\ud83d"}',  # a lone surrogate
    b'{"a": "\\q"}',  # an unknown escape
    b'{"a": "\xff\xfe"}',  # not UTF-8
    b'["' + TRICKY + b'"]',  # not an object
    b'{"a": "' + TRICKY + b'" "b"}',  # the grammar outside the literals
    b'{"a": "' + TRICKY + b'", "b": ' + b"[" * 130 + b"]" * 130 + b"}",  # too deep
    b'{"a": "' + b"\\" * (2 * MAX_RUN + 2) + b'"}',  # a run of backslashes too long to measure: parsed whole
    b'{"a": "' + TRICKY + b"\\" * (2 * QUOTE_RUN + 1) + b'"' + TRICKY + b'"}',  # a quote after a long run
    b'{"a": "' + b'\\"' * (MAX_QUOTES + 1) + b'"}',  # too many quotes: parsed whole
    b'{"a": "' + b"[" * (MAX_CONTAINERS + 1) + b'"}',  # too many containers, inside a string too
    b'{"a": "plain", "b": 1}',
    b'{"gw-split-": "x"}',
])
def test_refusals_and_fallbacks_read_as_the_whole_parse(raw: bytes) -> None:
    for piece in (1, 2, 3, 5, 64):
        assert same(split(raw, piece=piece), whole(raw))


def test_a_client_string_that_spells_a_marker_is_parsed_whole() -> None:
    raw = b'{"a": "' + TRICKY + b'", "b": "x"}'
    parse = SplitParse(raw, sizes=(40, 4, 64))  # the marker (27 bytes) is not long: TRICKY is
    marker = parse._marker + "0"  # what the skeleton holds in place of the long literal
    raw = raw.replace(b'"x"', orjson.dumps(marker))
    parse = SplitParse(raw, sizes=(40, 4, 64))  # the marker (27 bytes) is not long: TRICKY is
    parse._marker = marker[:-1]
    while not parse.step():
        pass
    assert parse.fallback, "two strings read as the same marker: not guessed"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=5), st.integers(1, 9), st.integers(1, 9))
def test_any_object_reads_as_the_whole_parse(obj: dict[str, Any], long: int, piece: int) -> None:
    raw = orjson.dumps(obj)
    assert same(split(raw, long=long, piece=piece), orjson.loads(raw))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.integers(1, 9))
def test_any_bytes_in_a_literal_read_as_the_whole_parse(content: bytes, piece: int) -> None:
    raw = b'{"k": "' + content + b'", "n": [1, "' + content[::-1] + b'"]}'
    assert same(split(raw, long=2, piece=piece), whole(raw))


@pytest.mark.parametrize("count", [1, 2, 3, 7, 64])
def test_needles_are_found_across_the_slices_of_the_count(count: int) -> None:
    raw = b'{"a": "' + TRICKY + b'", "x": {"cache_control": {}}}'
    for needles, found in (((b'"cache_control"',), True), ((b'"cache_controls"',), False), ((b"\\u",), True)):
        parse = SplitParse(raw, needles, sizes=(8, 16, count))
        while not parse.step():
            pass
        assert parse.found is found, needles


def test_encode_writes_other_subclasses_as_orjson_does() -> None:
    class Kind(enum.StrEnum):
        A = "a"

    value = {"e": Kind.A, "i": enum.IntEnum("N", "ONE").ONE, "o": collections.OrderedDict(x=[1.5, None, True]),
             "d": collections.defaultdict(list, {"k": ["v"]})}
    assert encode(value) == orjson.dumps(value)
    with pytest.raises(TypeError):
        encode({"x": object()})


@pytest.mark.parametrize("count", range(1, 41))
def test_strings_are_found_whatever_slices_the_count_takes(count: int) -> None:
    """Escaped quotes after runs of 1 to 5 backslashes, slices of every size from a byte up."""
    text = TRICKY + b"\\" * 1 + b'"' + b"\\" * 3 + b'"' + b"\\" * 5 + b'"' + b"\\" * 4 + b"n" + TRICKY
    text += b"\\" * QUOTE_RUN + b'"' + b"\\" * (QUOTE_RUN - 1) + b"n"  # the longest run taken
    raw = b'{"k": "' + text + b'", "short": "s\\"", "n": ["' + text + b'", 1]}'
    parse = SplitParse(raw, sizes=(40, 16, count))
    while not parse.step():
        pass
    assert not parse.fallback and same(parse.body, orjson.loads(raw))


def test_a_body_of_many_strings_is_parsed_whole() -> None:
    raw = orjson.dumps({"a": ["s"] * (MAX_QUOTES // 2 + 1), "b": "x" * 100})
    parse = SplitParse(raw, sizes=(50, 16, 1024))
    while not parse.step():
        pass
    assert parse.fallback and parse.brackets == 2, "told to parse it whole, its brackets all counted"


def test_a_slice_of_many_strings_among_escaped_quotes_is_parsed_whole() -> None:
    """Finding each string's quotes among escaped ones takes a halving each: past MAX_HALVED in one
    slice the body is parsed whole (the same result), so that no step of the count runs long."""
    strings = [rb'"\"' + bytes([97 + i % 26]) + b'"' for i in range(MAX_HALVED + 1)]
    raw = b'{"a": [' + b", ".join(strings) + b'], "b": "' + b"x" * 100 + b'"}'
    parse = SplitParse(raw, sizes=(50, 16, len(raw)))
    while not parse.step():
        pass
    assert parse.fallback
    fewer = b'{"a": [' + b", ".join(strings[:MAX_HALVED // 2]) + b'], "b": "' + b"x" * 100 + b'"}'
    assert same(split(fewer, long=50, piece=16, count=len(fewer)), orjson.loads(fewer))
