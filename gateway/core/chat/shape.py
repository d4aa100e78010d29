"""Read a stream's content-only chunks from their bytes, without a JSON parse (the per-chunk hot path).

An OpenAI-compatible server wraps every content token of a stream in the same envelope (id, created,
model, fingerprint, `"choices":[{"index":0,"delta":{"content":…},"logprobs":null,"finish_reason":null}]`);
only the content string changes, plus OpenAI's `obfuscation` padding. So once one
chunk has been parsed whole and found content-only (`chat.content_only`), the bytes before and after
its content string are kept as the stream's *shape*.

Why a match is exact: by the JSON grammar (RFC 8259 §2, §7) replacing one string token with another
keeps the structure of the document. A later chunk that starts with the shape's head, ends with its
tail, and has between them one plain string token — a quote, no quote, backslash or control character
inside, a quote — therefore parses to the learned object with another content, and that content is the
token's bytes decoded as UTF-8. Learning proves the head/tail split with a probe: the head, a probe
string and the tail must parse to a content-only chunk whose content is the probe. Anything else
(an escape in the text, a finish, usage, a new envelope) does not match and takes the full parse.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import compress, repeat
from operator import and_, getitem
from typing import Any, cast

import orjson

from gateway.core.chat.wire import content_only

_PROBE, _PAD = "\x5fgw_probe\x5f", "\x5fgw_pad\x5f"
_OBFUSCATION_KEY = b',"obfuscation":'
_slice = cast(Callable[[bytes, slice], bytes], getitem)  # for `map`: one C call per chunk
# what a plain string token's bytes may not hold (RFC 8259 §7: the characters that need escaping), LF
# aside: `_texts` joins tokens with it and counts it
_NOT_PLAIN_BUT_LF = re.compile(rb'["\\\x00-\x09\x0b-\x1f]')
MAX_UNMATCHED_LEARNS = 8


def plain_string(token: bytes) -> str | None:
    """The value of a JSON string token that needs no unescaping, else None. "Plain" is stricter
    than JSON needs: no quote, no backslash, and only printable characters (str.isprintable: no
    control, format or separator character other than the ASCII space), which is one C-speed scan;
    the rest takes the full parse."""
    if len(token) < 2 or token[0] != 0x22 or token[-1] != 0x22:
        return None
    try:
        text = token[1:-1].decode()
    except UnicodeDecodeError:
        return None
    if '"' in text or "\\" in text or not text.isprintable():
        return None
    return text


def string_token(text: str) -> bytes:
    """`text` as a JSON string token. A plain text is quoted by hand: `orjson.dumps` starts every
    result in a 1 KiB buffer and shrinks it, which costs ~2 µs a call once results are kept alive
    (as a read's output pieces are, until they are joined) against ~0.2 µs."""
    if '"' in text or "\\" in text or not text.isprintable():
        return orjson.dumps(text)
    return b'"' + text.encode() + b'"'


class ContentShape:
    """Per stream. `learn` from a parsed content-only chunk; `match` later chunks by their bytes."""

    __slots__ = ("_head", "_index", "_padded", "_pending", "_prefix", "_suffix", "_tail", "_unmatched")

    def __init__(self) -> None:
        self._head = b""
        self._tail = b""
        self._padded = False  # the tail ends with an `obfuscation` string that changes per chunk
        self._unmatched = 0  # learns since the last match: a stream whose envelope changes per chunk
        self._prefix = self._suffix = b""  # the SSE event around a matched chunk's content token
        self._index = 0  # the choice index every matching chunk carries
        self._pending: tuple[bytes, str] | None = None  # a learn not yet done (see `learn`)

    @property
    def learned(self) -> bool:
        self._settle()
        return bool(self._head)

    @property
    def index(self) -> int:
        """The choice index every matching chunk carries."""
        if self._pending is not None:
            self._settle()
        return self._index

    def learn(self, raw: bytes, text: str) -> None:
        """`raw` parsed to a content-only chunk with content `text` (non-empty). Keeps its envelope if
        the split is proven; otherwise keeps the previous shape. A stream whose envelope changes on
        every chunk (per-chunk ids, Azure's filter results) stops being learned after a few tries.

        The learning itself waits until the shape is next used (`match`, `runs`, `index`, `learned`,
        or the next `learn`), in the same order as if it ran now: a stream's first content chunk is
        parsed whole, and its envelope serves only the chunks after it, so the first token does not
        wait for the split and its probe parse (issue #34: the first token's way out)."""
        self._settle()
        self._pending = (raw, text)

    def _settle(self) -> None:
        """Do the pending learn, if any. The readers run once a read or once a chunk (`index`, `match`,
        `runs`) test `_pending` themselves before calling this: no call when nothing waits."""
        if self._pending is not None:
            raw, text = self._pending
            self._pending = None
            self._learn(raw, text)

    def _learn(self, raw: bytes, text: str) -> None:
        if self._unmatched >= MAX_UNMATCHED_LEARNS:
            return
        self._unmatched += 1
        if raw.find(b"\n") >= 0:  # not `in`: see `core.sse`
            return  # a multi-line event's data: its envelope is no one-line `data:` to forward by bytes
        token = orjson.dumps(text)
        start = raw.find(token)
        if start < 0 or raw.find(token, start + 1) >= 0 or plain_string(token) is None:
            return  # escaped differently, or the same string elsewhere too: no unique split
        head, tail = raw[:start], raw[start + len(token):]
        padded = False
        cut = tail.rfind(_OBFUSCATION_KEY)
        if cut >= 0 and tail.endswith(b'"}') and plain_string(tail[cut + len(_OBFUSCATION_KEY):-1]) is not None:
            tail, padded = tail[:cut + len(_OBFUSCATION_KEY)], True
        index = _probe(head, tail, padded)
        if index is not None:
            self._head, self._tail, self._padded, self._index = head, tail, padded, index
            self._prefix, self._suffix = b"data: " + head, tail + b"\n\n"

    def match(self, raw: bytes) -> tuple[str, int, int] | None:
        """(content, start, end) of a chunk of the learned shape, `raw[start:end]` being the content's
        string token; None when the chunk needs the full parse. `plain_string`, inlined: this runs for
        every chunk."""
        if self._pending is not None:
            self._settle()
        head = self._head
        if not head or not raw.startswith(head):
            return None
        start = len(head)
        if self._padded:
            end = raw.rfind(self._tail)
            if end < start or raw[-1] != 0x7D or plain_string(raw[end + len(self._tail):-1]) is None:
                return None
        elif raw.endswith(self._tail):
            end = len(raw) - len(self._tail)
        else:
            return None
        if end - start < 3 or raw[start] != 0x22 or raw[end - 1] != 0x22:
            return None
        try:
            text = raw[start + 1:end - 1].decode()
        except UnicodeDecodeError:
            return None
        if '"' in text or "\\" in text or not text.isprintable():
            return None
        self._unmatched = 0
        return text, start, end


    def splice_into(self, out: list[bytes], raw: bytes, end: int, text: str) -> None:
        """Append the SSE event of `raw` (a chunk this shape matched, its content token ending at `end`)
        with `text` as its content. The envelope's bytes are the learned ones, not slices of `raw`."""
        suffix = raw[end:] + b"\n\n" if self._padded else self._suffix
        out += (self._prefix, string_token(text), suffix)

    def runs(self, datas: list[bytes]) -> list[Run | list[bytes]] | None:
        """The data of one read's events (`sse.data_lines`) as segments in order: each run of
        consecutive chunks that `match` would read, as one `Run`, and the data between runs (other
        events, for the parse). None when the shape has per-chunk padding or is not learned (then
        read the events one by one).

        Why it is exact: a chunk of the learned envelope starts with its head and an opening quote
        and ends with a closing quote and its tail; what lies between is its content token's inside,
        which needs no unescaping when it holds no quote, backslash or control byte (RFC 8259 §7)
        and reads as UTF-8. Each test runs over the whole read at C speed (`map`, one join, one
        regex scan) instead of once per chunk in Python."""
        if self._pending is not None:
            self._settle()
        if not self._head or self._padded:
            return None
        hq, tq = self._head + b'"', b'"' + self._tail  # around a content token's inside
        fits = list(map(and_, map(bytes.startswith, datas, repeat(hq)), map(bytes.endswith, datas, repeat(tq))))
        cut = slice(len(hq), -len(tq))
        out: list[Run | list[bytes]] = []
        i, n = 0, len(datas)
        while i < n:
            j = _index(fits, not fits[i], i, n)
            if fits[i]:
                self._runs(datas[i:j], list(map(_slice, datas[i:j], repeat(cut))), out)
            else:
                out.append(datas[i:j])
            i = j
        if any(type(seg) is Run for seg in out):
            self._unmatched = 0
        return out

    def _runs(self, datas: list[bytes], contents: list[bytes], out: list[Run | list[bytes]]) -> None:
        """Chunks of the learned envelope: in runs, but a chunk whose content token is not one JSON
        string (or is empty: not an output token) goes to the parse."""
        texts, bad = _texts(contents)
        lo = 0
        for i in [*sorted(bad), len(contents)]:
            if i > lo:
                out.append(Run(self, datas[lo:i], texts[lo:i] if bad else texts))
            if i < len(contents):
                out.append(datas[i:i + 1])
            lo = i + 1


class Run:
    """Consecutive content-only chunks of one learned envelope, as they came in one read."""

    __slots__ = ("_prefix", "_suffix", "datas", "index", "texts")

    def __init__(self, shape: ContentShape, datas: list[bytes], texts: list[str]):
        self._prefix, self._suffix = shape._prefix, shape._suffix  # the learned event around a content token
        self.index = shape._index  # the choice every chunk of the run belongs to (`runs` settled it)
        self.datas, self.texts = datas, texts  # each chunk's bytes, and its content

    def events(self, released: list[str]) -> bytes:
        """The run's events with each chunk's text replaced by what the text windows released for it
        (an empty release drops its event). Unchanged chunks keep their bytes: a run released as it
        came is its own bytes. The usual change is at the ends alone: the first chunk also carries
        text held before the run, the last holds back its unfinished word."""
        texts, n = self.texts, len(self.texts)
        a = 0 if released[0] == texts[0] else 1
        b = n if released[-1] == texts[-1] else n - 1
        if a >= b or released[a:b] != texts[a:b]:
            a = b = 0  # changed inside: chunk by chunk
        out: list[bytes] = []
        for i in range(a):
            self._event(out, i, released[i])
        if b > a:
            out += (b"data: ", b"\n\ndata: ".join(self.datas[a:b]), b"\n\n")
        # Only the chunks that release something: a long run without whitespace is held for thousands
        # of chunks, each released as "" (its event dropped), skipped here at C speed.
        for i in compress(range(b, n), released[b:]):
            self._event(out, i, released[i])
        return b"".join(out)

    def _event(self, out: list[bytes], i: int, text: str) -> None:
        if text == self.texts[i]:
            out += (b"data: ", self.datas[i], b"\n\n")
        elif text:
            out += (self._prefix, string_token(text), self._suffix)


def _index(flags: list[bool], value: bool, start: int, stop: int) -> int:
    """The first index from `start` where `flags` holds `value`, else `stop`."""
    try:
        return flags.index(value, start, stop)
    except ValueError:
        return stop


def _texts(contents: list[bytes]) -> tuple[list[str], set[int]]:
    """The texts of string tokens' insides, and the indexes of those that are not one JSON string (or
    are empty). Plain insides (no quote, backslash or control byte: RFC 8259 §7) are their own UTF-8
    text, decoded and checked together; an inside with an escape (`\\n`, `\\"`, `\\u00e9`) is read by
    the JSON parser, quoted: that it parses to one string proves it is one string token's inside."""
    joined = b"\n".join(contents)
    texts: list[str] | None = None
    if joined.count(b"\n") == len(contents) - 1:  # else an inside holds an LF (a multi-line event's data)
        try:
            texts = joined.decode().split("\n")
        except UnicodeDecodeError:
            pass
    if texts is None:  # one at a time
        texts = [""] * len(contents)
        return texts, {i for i, c in enumerate(contents) if _one_text(c, texts, i)}
    bad = {i for i, c in enumerate(contents) if not c} if not all(contents) else set()
    escaped = {joined.count(b"\n", 0, m.start()) for m in _NOT_PLAIN_BUT_LF.finditer(joined)}
    bad.update(i for i in escaped - bad if _one_text(contents[i], texts, i))
    return texts, bad


def _one_text(inside: bytes, texts: list[str], i: int) -> bool:
    """Set texts[i] to the string whose token's inside is `inside`; True when it is none (or empty)."""
    try:
        text = orjson.loads(b'"' + inside + b'"')
    except orjson.JSONDecodeError:
        return True
    if not text:
        return True
    texts[i] = text
    return False


def _probe(head: bytes, tail: bytes, padded: bool) -> int | None:
    """The choice index when head + a probe string + tail is a content-only chunk with the probe as its
    content (and the pad as its obfuscation), else None."""
    doc = head + orjson.dumps(_PROBE) + tail + (orjson.dumps(_PAD) + b"}" if padded else b"")
    try:
        obj: Any = orjson.loads(doc)
    except orjson.JSONDecodeError:
        return None
    if content_only(obj) != _PROBE or (padded and obj.get("obfuscation") != _PAD):
        return None
    index = obj["choices"][0].get("index", 0)
    return index if type(index) is int else None
