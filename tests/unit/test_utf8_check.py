"""Bytes checked for UTF-8 a slice at a time (`core.utf8_check`) say what one whole decode says, at every
slice size: every place a cut can fall (inside 2-, 3- and 4-byte sequences, next to a bad byte) is tried."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.utf8_check import Utf8Check, utf8_cut

GOOD = "aé中😀b\x7f\u0080\u07ff\u0800\uffff\U00010000\U0010ffffz".encode()
BAD = [
    b"\x80",  # a continuation byte with no lead
    b"\xc3",  # a lead with its continuation missing
    b"\xc3(",  # a lead followed by ASCII
    b"\xe4\xb8",  # a 3-byte sequence cut short
    b"\xf0\x9f\x98",  # a 4-byte sequence cut short
    b"\xc0\xaf",  # an overlong encoding
    b"\xed\xa0\x80",  # a surrogate, encoded
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xff",  # never in UTF-8
    b"\x80\x80\x80\x80\x80",  # a run of continuation bytes longer than a character
    b"\xf0\x9f\x98\x80\x80",  # a character and one continuation byte too many
]


def checked(data: bytes, size: int) -> bool:
    check = Utf8Check(data, size)
    for _ in range(len(data) + 2):  # each step takes a byte at least
        if check.step():
            return check.valid
    raise AssertionError("the check did not end")


def decodes(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("size", range(1, len(GOOD) + 2))
def test_utf8_is_valid_at_every_slice_size(size: int) -> None:
    assert checked(GOOD, size) and checked(b"", size) and checked(b"plain ascii", size)


@pytest.mark.parametrize("bad", BAD)
def test_a_bad_sequence_anywhere_is_found_at_every_slice_size(bad: bytes) -> None:
    assert not decodes(bad)
    for at in range(len(GOOD) + 1):
        if GOOD[at:at + 1] and GOOD[at] & 0xC0 == 0x80:
            continue  # inside a character: where a bad byte would make other sequences than `bad`
        data = GOOD[:at] + bad + GOOD[at:]
        for size in range(1, len(data) + 2):
            assert not checked(data, size), (at, size)


def test_a_cut_never_splits_a_character() -> None:
    for at in range(len(GOOD) + 3):
        cut = utf8_cut(GOOD, at)
        assert cut == min(at, len(GOOD)) or at - 3 <= cut < at
        assert decodes(GOOD[:cut]) and decodes(GOOD[cut:])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40) | st.text(max_size=20).map(str.encode), st.integers(1, 12))
def test_any_bytes_are_judged_as_a_whole_decode_judges_them(data: bytes, size: int) -> None:
    assert checked(data, size) == decodes(data)
