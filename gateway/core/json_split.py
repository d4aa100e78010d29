"""A big JSON body with long strings in it, parsed a bounded step at a time (bench S2hb, issue #63 goal 4).

orjson parses a 10 MiB body of one string in one call of 10-20 ms (escapes and non-ASCII text are the
slow end), which the event loop cannot interleave: every stream of the process waits that long. Most of
that time is the long string. So a body whose few string literals include long ones is parsed in parts:

1. count its brackets and find the quotes that open and close its strings, a slice of bytes per step
   (`bytes.count` and `find`, at C speed: escaped quotes are counted, not looked at one by one);
2. take the strings of at least LONG_BYTES as its long literals;
3. decode each long literal's content in pieces of `PIECE_BYTES`, cut where no escape sequence or UTF-8
   sequence is split, each piece by orjson as a string of its own (what a JSON string means is its
   pieces' texts joined: escapes are self-contained), and join the pieces;
4. keep the literal of a long text spelled with escapes or non-ASCII characters (`json_body.JsonText`):
   `json_body.encode` writes it back instead of escaping megabytes again in one call;
5. parse the rest (the "skeleton": the body with each long literal replaced by a marker string) in one
   call, and put the long texts where their markers are.

The result is exactly `orjson.loads(body)`: the body is valid if and only if its skeleton and every
literal's content are. Whatever this path does not handle (many strings or brackets, long runs of
backslashes, a marker that a client's string spells) ends in `fallback`: the caller parses the body
whole, as before, so a body is never refused here that a whole parse accepts.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from gateway.core.json_body import (
    CONTAINERS_MESSAGE,
    DEPTH_MESSAGE,
    MAX_CONTAINERS,
    MAX_DEPTH,
    NOT_JSON_MESSAGE,
    NOT_OBJECT_MESSAGE,
    BodyError,
    JsonText,
    depth_exceeds,
)

LONG_BYTES = 64 * 1024  # a literal at least this long is decoded apart from the skeleton
PIECE_BYTES = 256 * 1024  # bytes of one literal decoded per step: well under 1 ms, escapes included
COUNT_BYTES = 128 * 1024  # bytes counted per step: well under 1 ms, ~4 ms on a slice of backslashes
MAX_QUOTES = 4096  # quotes that open or close a string; more: the per-string work would add up, parsed whole
MAX_BRACKETS = 4096  # more: the skeleton's parse and walk would be long; the body is parsed whole
MAX_HALVED = 256  # quotes found by halving a slice (among escaped ones): ~20 µs each; more: parsed whole
MAX_RUN = 64  # a longer run of backslashes is not measured (a Python loop per byte): parsed whole
QUOTE_RUN = 7  # a quote after more backslashes (an escaped quote nested four JSON strings deep): parsed whole
_ESCAPE_WINDOW = 12  # the longest escape a cut may fall in: a surrogate pair, \uXXXX\uXXXX
MIN_PIECE = 16  # a piece this long always has a place to cut (the window, and a UTF-8 sequence)


class SplitParse:
    """`orjson.loads(raw)` for a JSON object, in steps (`core.redact.sliced.Steps`). When `step()` has
    answered True: `body` is the object, or `fallback` says to parse `raw` whole; `brackets` is the
    body's `json_body.bracket_count` either way. A body refused raises `BodyError` from `step()`."""

    __slots__ = ("_at", "_counted", "_literals", "_marker", "_needles", "_pieces", "_quotes", "_raw", "_sizes",
                 "_splits", "_texts", "_wrapped", "body", "brackets", "fallback", "found")

    def __init__(self, raw: bytes, needles: tuple[bytes, ...] = (),
                 sizes: tuple[int, int, int] = (LONG_BYTES, PIECE_BYTES, COUNT_BYTES)) -> None:
        """`needles`: `found` says whether any is in `raw` (searched along with the count, a slice at a
        time: a search of 10 MiB can take 15 ms). `sizes`: the shortest long literal, the bytes decoded
        per piece and counted per step (tests pass small ones to cut small bodies everywhere)."""
        self._raw, self._sizes, self._needles = raw, sizes, needles
        self.found = False
        self._counted = 0
        self._quotes: list[int] = []  # where the strings open and close
        self._splits = True  # no reason found yet to parse the body whole
        self.brackets = 0
        self._literals: list[tuple[int, int]] = []  # (start, end) of each long literal's content
        self._at = 0  # where the literal being decoded is decoded up to
        self._pieces: list[str] = []  # its decoded pieces so far
        self._texts: list[str] = []  # the long literals' texts, in order
        self._wrapped = 0  # texts looked at by `_wrap`
        self._marker = f"gw-split-{secrets.token_hex(8)}-"
        self.body: dict[str, Any] | None = None
        self.fallback = False

    def step(self) -> bool:
        if self._counted < len(self._raw):
            self._count()
        elif len(self._texts) < len(self._literals):
            self._decode()
        elif self._wrapped < len(self._literals):
            self._wrap()
        else:
            self._assemble()
        return self.fallback or self.body is not None

    def _count(self) -> None:
        """One slice: its brackets, the needles, its quotes that open or close a string."""
        raw, start = self._raw, self._counted
        end = min(len(raw), start + self._sizes[2])
        self.brackets += raw.count(b"{", start, end) + raw.count(b"[", start, end)
        self._counted = end
        if not self.found:  # a needle across the slices' border is found too
            self.found = any(raw.find(n, max(0, start - len(n) + 1), end) >= 0 for n in self._needles)
        if self.brackets > MAX_CONTAINERS:
            raise BodyError(CONTAINERS_MESSAGE)
        if self._splits and not _quotes_in(raw, start, end, self._quotes):
            self._splits = False  # counted to the end all the same: the whole parse needs `brackets`
        if end == len(raw):
            if self._splits and self.brackets <= MAX_BRACKETS:
                self._pair_quotes()
            else:
                self.fallback = True

    def _pair_quotes(self) -> None:
        """The long literals: every other quote opens a string, the next closes it."""
        quotes = self._quotes
        if len(quotes) % 2:  # unterminated: the whole parse says how
            self.fallback = True
            return
        self._literals = [(quotes[i] + 1, quotes[i + 1]) for i in range(0, len(quotes), 2)
                          if quotes[i + 1] - quotes[i] - 1 >= self._sizes[0]]
        self.fallback = not self._literals
        if self._literals:
            self._at = self._literals[0][0]

    def _decode(self) -> None:
        """One piece of the literal being decoded; its text once its last piece is."""
        end = self._literals[len(self._texts)][1]
        at = self._at
        cut = min(end, at + max(MIN_PIECE, self._sizes[1]))
        if cut < end:
            cut = _cut(self._raw, at, cut)
            if cut <= at:
                self.fallback = True
                return
        try:
            piece = orjson.loads(b'"' + self._raw[at:cut] + b'"')
        except orjson.JSONDecodeError:
            raise BodyError(NOT_JSON_MESSAGE) from None
        self._pieces.append(piece)
        self._at = cut
        if cut == end:
            self._texts.append("".join(self._pieces))
            self._pieces = []
            if len(self._texts) < len(self._literals):
                self._at = self._literals[len(self._texts)][0]

    def _wrap(self) -> None:
        """A text spelled with escapes or non-ASCII characters keeps its literal (`JsonText`): written
        again as it came (`json_body.encode`), not escaped again in one call. Two copies: a step."""
        i, self._wrapped = self._wrapped, self._wrapped + 1
        start, end = self._literals[i]
        if len(self._texts[i]) != end - start:  # a plain ASCII text is written at memcpy speed anyway
            text = JsonText(self._texts[i])
            text.json = self._raw[start - 1:end + 1]
            self._texts[i] = text

    def _assemble(self) -> None:
        raw, parts, prev = self._raw, list[bytes](), 0
        for i, (start, end) in enumerate(self._literals):
            parts += (raw[prev:start], f"{self._marker}{i}".encode())
            prev = end
        parts.append(raw[prev:])
        try:
            skeleton = orjson.loads(b"".join(parts))
        except orjson.JSONDecodeError:
            raise BodyError(NOT_JSON_MESSAGE) from None
        if not isinstance(skeleton, dict):
            raise BodyError(NOT_OBJECT_MESSAGE)
        if self.brackets >= MAX_DEPTH and depth_exceeds(skeleton, MAX_DEPTH):
            raise BodyError(DEPTH_MESSAGE)
        fill = _Fill(self._marker, self._texts)
        body = fill.value(skeleton)
        if fill.collided:  # a client's own string spelled a marker: parse whole rather than guess
            self.fallback = True
        else:
            self.body = body


def _quotes_in(raw: bytes, lo: int, hi: int, out: list[int]) -> bool:
    """Append the places of the quotes in raw[lo:hi] that open or close a string (after an even run of
    backslashes); False past MAX_QUOTES or MAX_HALVED, or after a run of more than QUOTE_RUN backslashes.
    Counted at C speed (`bytes.count`), halving the range around escaped quotes instead of looking at each."""
    quotes = raw.count(b'"', lo, hi)
    if quotes == 0:
        return True
    escaped = _escaped_quotes(raw, lo, hi)
    if escaped < 0 or len(out) + quotes - escaped > MAX_QUOTES:
        return False
    if 0 < escaped < quotes and quotes - escaped > MAX_HALVED:  # bounds one slice's halvings
        return False
    if escaped == quotes:
        return True
    if escaped == 0:
        at = lo
        for _ in range(quotes):
            at = raw.find(b'"', at, hi)
            out.append(at)
            at += 1
        return True
    if hi - lo > 64:
        mid = (lo + hi) // 2
        return _quotes_in(raw, lo, mid, out) and _quotes_in(raw, mid, hi, out)
    at = raw.find(b'"', lo, hi)
    while at >= 0:
        run = _backslashes_before(raw, 0, at)
        if run < 0:
            return False
        if run % 2 == 0:
            out.append(at)
        at = raw.find(b'"', at + 1, hi)
    return True


def _escaped_quotes(raw: bytes, lo: int, hi: int) -> int:
    """How many quotes in raw[lo:hi] come after an odd run of backslashes; -1 when one comes after more
    than QUOTE_RUN. With c(k) the quotes after at least k backslashes (an occurrence of k backslashes
    and a quote ends at each such quote, so `count` sees each once): c(1) - c(2) + c(3) - ..."""
    total, sign = 0, 1
    for k in range(1, QUOTE_RUN + 2):
        count = raw.count(b"\\" * k + b'"', max(0, lo - k), hi)
        if count == 0:
            return total
        if k == 1 and raw.count(b"\\" * (QUOTE_RUN + 1) + b'"', max(0, lo - QUOTE_RUN - 1), hi):
            return -1  # a count per k up to the longest run would be ~1.4 ms each on a slice of backslashes
        total += sign * count
        sign = -sign
    return -1


def _backslashes_before(raw: bytes, lo: int, at: int) -> int:
    """How many backslashes come right before `at` (not before `lo`); -1 past MAX_RUN."""
    run = 0
    while at - run > lo and raw[at - run - 1] == 0x5C:
        run += 1
        if run > MAX_RUN:
            return -1
    return run


def _cut(raw: bytes, lo: int, at: int) -> int:
    """The last place at or before `at` where a literal's content can be cut: not inside a UTF-8 sequence,
    an escape or a surrogate pair. `lo` (the piece's start) is one; a place after it is found when the
    piece is at least MIN_PIECE long, except past a run of backslashes longer than MAX_RUN."""
    while at > lo and raw[at] & 0xC0 == 0x80:  # raw[at] opens the next piece: not a continuation byte
        at -= 1
    last = raw.rfind(b"\\", max(lo, at - _ESCAPE_WINDOW), at)  # an escape reaching `at` opens in the window
    if last < 0:
        return at
    run = _backslashes_before(raw, lo, last + 1)
    if run < 0:
        return lo
    if run % 2 == 0 or last + _escape_length(raw, last) <= at:  # escaped backslashes, or an escape ended
        return at
    if _is_low_half(raw, last) and last - 6 > lo and _is_high_half(raw, last - 6):
        return last - 6  # keep the pair whole
    return last


def _escape_length(raw: bytes, opener: int) -> int:
    if raw[opener + 1:opener + 2] != b"u":
        return 2
    return 12 if _is_high_half(raw, opener) else 6  # a high surrogate is the first half of a pair


def _is_high_half(raw: bytes, at: int) -> bool:
    return raw[at + 1:at + 2] == b"u" and raw[at + 2:at + 4].lower() in (b"d8", b"d9", b"da", b"db")


def _is_low_half(raw: bytes, at: int) -> bool:
    return raw[at + 1:at + 2] == b"u" and raw[at + 2:at + 4].lower() in (b"dc", b"dd", b"de", b"df")


class _Fill:
    """The skeleton with each marker (a key or a value) replaced by its literal's text."""

    def __init__(self, marker: str, texts: list[str]) -> None:
        self.marker, self.texts = marker, texts
        self.used = [False] * len(texts)
        self.collided = False

    def text(self, value: str) -> str:
        if not value.startswith(self.marker):
            return value
        index = value[len(self.marker):]
        i = int(index) if index.isdigit() and index.isascii() else -1
        if not 0 <= i < len(self.texts) or self.used[i] or index != str(i):
            self.collided = True
            return value
        self.used[i] = True
        return self.texts[i]

    def value(self, node: Any) -> Any:
        if isinstance(node, str):
            return self.text(node)
        if isinstance(node, list):
            return [self.value(v) for v in node]
        if isinstance(node, dict):
            return {str(self.text(k)): self.value(v) for k, v in node.items()}  # a key is a plain str
        return node
