"""Whether bytes are UTF-8, found a slice at a time (pure; a `core.redact.sliced.Steps`).

A WebSocket text message that is not UTF-8 fails the connection (RFC 6455 §8.1, close 1007;
docs/reference.md, WebSocket mode). Decoding a 10 MiB message into a `str` to know it takes ~10 ms of
ASCII and ~25 ms of mixed non-ASCII text in one call the loop cannot interleave, and a big message is
parsed from its bytes (`core.json_split`), so its `str` is never needed: each slice is checked and
dropped. A slice is cut before a byte that opens a character, so the slices are UTF-8 each if and only
if the whole is (a run of more continuation bytes than a character has is cut inside, and fails there).
"""

from __future__ import annotations

CHECK_BYTES = 1024 * 1024  # checked per step: ~0.1 ms of ASCII, ~3 ms of mixed non-ASCII text
_LONGEST = 4  # bytes of the longest UTF-8 sequence: a slice at least this long always has a place to cut


class Utf8Check:
    """Steps over `data`; once `step()` has answered True, `valid` says whether it is UTF-8."""

    __slots__ = ("_at", "_slice", "data", "valid")

    def __init__(self, data: bytes, slice_bytes: int = CHECK_BYTES) -> None:
        self.data, self._slice = data, max(_LONGEST, slice_bytes)
        self._at = 0
        self.valid = True

    def step(self) -> bool:
        data, at = self.data, self._at
        end = utf8_cut(data, at + self._slice)
        piece = data[at:end]
        if not piece.isascii():  # at memchr speed: most of a prompt's bytes are ASCII
            try:
                piece.decode()
            except UnicodeDecodeError:
                self.valid = False
                return True
        self._at = end
        return end >= len(data)


def utf8_cut(data: bytes, at: int) -> int:
    """Where to cut before `at`: the first byte at or up to 3 before it that is not a continuation byte
    (no character split), else `at - 3` (four continuation bytes in a row: not UTF-8, and the slice that
    starts there fails); the end when `at` is past it."""
    if at >= len(data):
        return len(data)
    for _ in range(_LONGEST - 1):
        if data[at] & 0xC0 != 0x80:
            break
        at -= 1
    return at
