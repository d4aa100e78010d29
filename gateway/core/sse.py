"""Incremental Server-Sent Events decoder and encoder, sans I/O.

Follows WHATWG HTML §9.2.5/§9.2.6 ("Parsing/Interpreting an event stream"):
- lines end with CRLF, LF or a lone CR, mixed freely; a CR at the end of one chunk followed by an LF at the
  start of the next is ONE line end (we remember it in `_skip_lf`);
- splitting happens on *bytes*, never `str.splitlines()`, which also breaks on U+2028/U+0085 that JSON may
  legally carry inside strings;
- one leading UTF-8 BOM is stripped, even when it arrives split across chunks;
- `:` lines are comments (keep-alives); `field:value` drops one leading space of the value; a line without
  a colon is a field with an empty value; several `data` lines join with LF;
- an event is dispatched on a blank line only if its data buffer is non-empty; a trailing event that is
  not followed by a blank line is discarded at end of stream (§9.2.5: "any pending data must be
  discarded").
Data stays bytes: the JSON parser reads bytes directly, so nothing is decoded twice.

Byte tests are `buf.find(x) >= 0`, not `x in buf`: CPython 3.11's `bytes.__contains__` first tries its
argument as an integer (`Objects/bytes_methods.c`, `_Py_bytes_contains`), so every `x in buf` with a bytes
`x` raises and clears a TypeError with a formatted message: ~0.05 µs hot per test, and on a stream's first
read, cold, the exception machinery's code on top of the search (issue #34, `bench/README.md`).
"""

from __future__ import annotations

from dataclasses import dataclass

BOM = b"\xef\xbb\xbf"
MAX_EVENT_BYTES = 8 * 1024 * 1024  # docs/extensions.md, "Costs a client or an upstream can impose": one upstream SSE
# event is at most 8 MiB
DONE = b"[DONE]"


class SSEError(ValueError):
    """The stream is not usable (an event over the size limit)."""


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event. Treated as immutable, not declared frozen: one is built per upstream
    event, and a frozen dataclass costs ~0.5 µs to build against ~0.2 µs."""

    data: bytes
    event: str | None = None
    id: str | None = None

    def __init__(self, data: bytes, event: str | None = None, id: str | None = None) -> None:  # docs/compiled.md
        self.data, self.event, self.id = data, event, id


class SSEDecoder:
    """Feed bytes as they arrive; get complete events back. Never blocks, never does I/O.

    Linear in its input however it is split: a read that ends no line (a big event in small reads) is
    kept as a piece (`_more`), scanned once for a line end and joined once, when a later read ends the
    line; what is buffered is never searched again for an end it cannot hold. `rescanned` counts the
    bytes of earlier reads copied again (joined to a later read's): at most about twice the input."""

    __slots__ = ("_bom_checked", "_buf", "_data", "_data_size", "_event", "_id", "_limit", "_more", "_more_len",
                 "_skip_lf", "comments", "rescanned")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buf = b""  # an incomplete line (after `take_region(lines_ok=True)`: an unfinished event's lines)
        self._more: list[bytes] = []  # later reads that ended no line, to join after `_buf`
        self._more_len = 0
        self._skip_lf = False  # the previous chunk ended in CR: an LF now is part of that line end
        self._bom_checked = False
        self._data: list[bytes] = []
        self._data_size = 0
        self._event: str | None = None
        self._id: str | None = None
        self._limit = max_event_bytes
        self.comments = 0  # keep-alive comments seen; they are not events
        self.rescanned = 0  # bytes of earlier reads copied again (see the class docstring)

    @property
    def last_id(self) -> str | None:
        """The last event ID seen: every later event carries it (§9.2.6)."""
        return self._id

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        region = self.take_region(chunk)
        if region is None:
            return self._feed(chunk)
        datas = data_lines(region)
        if datas is not None:
            ident = self._id
            return [SSEEvent(d, None, ident) for d in datas]
        return self.events_of(region)

    def take_region(self, chunk: bytes, *, lines_ok: bool = False) -> bytes | None:
        """The fast path's first step, for a caller that reads events by their bytes: the complete
        events of what is buffered plus `chunk`, as one region that starts and ends at an event
        boundary (read it with `data_lines` or `events_of`); the partial line after it stays
        buffered. None, with nothing consumed, unless the decoder is between events (no field of an
        unfinished event read, no CR pending), the chunk has no CR (and, as a stream's first read,
        at least the 3 bytes of a BOM), what follows the region is at most a partial line, and the
        region is within the event size limit (so no event in it can exceed it). `lines_ok`: what follows
        the region may also hold whole lines of an unfinished event (streams whose events have two
        lines, `event:` and `data:`, as Anthropic's): they stay buffered as bytes, read with the rest.
        What is buffered holds no blank line, so the region's end is searched for in `chunk` alone."""
        if self._data or self._event is not None or self._skip_lf or chunk.find(b"\r") >= 0:
            return None
        if not self._bom_checked:  # a BOM split across reads is left to the line parser
            if self._buf or len(chunk) < 3:
                return None
            if chunk[:3] == BOM:
                chunk = chunk[3:]
        end = chunk.rfind(b"\n\n") + 2
        if end < 2:
            return self._no_event_end(chunk, lines_ok)
        rest = chunk[end:]
        limit = self._limit
        if (not lines_ok and rest.find(b"\n") >= 0) or len(rest) > limit:
            return None
        kept = self._buf
        if self._more:
            if len(kept) + self._more_len + end > limit:
                return None
            region = self._joined(chunk[:end])
        elif kept:
            if len(kept) + end > limit:
                return None
            self.rescanned += len(kept)
            region = kept + chunk[:end]
        elif end > limit:
            return None
        else:
            region = chunk[:end] if rest else chunk
        self._buf, self._bom_checked = rest, True
        return region

    def _no_event_end(self, chunk: bytes, lines_ok: bool) -> bytes | None:
        """`take_region` of a read without a blank line: the end of an event whose last line the buffer
        ends with (the read begins with the blank line's LF), or else the buffer grows by a piece."""
        if chunk[:1] == b"\n" and (self._more[-1] if self._more else self._buf)[-1:] == b"\n":
            rest, limit = chunk[1:], self._limit
            too_long = len(rest) > limit or len(self._buf) + self._more_len + 1 > limit
            if too_long or (not lines_ok and rest.find(b"\n") >= 0):
                return None
            region = self._joined(b"\n")
            self._buf = rest
            return region
        if (not lines_ok and chunk.find(b"\n") >= 0) or len(self._buf) + self._more_len + len(chunk) > self._limit:
            return None
        if chunk:
            self._more.append(chunk)
            self._more_len += len(chunk)
        self._bom_checked = True
        return b""

    def _joined(self, chunk: bytes) -> bytes:
        """What is buffered and `chunk`, joined once; the pieces are emptied."""
        self.rescanned += len(self._buf) + self._more_len
        joined = b"".join((self._buf, *self._more, chunk))
        self._more, self._more_len = [], 0
        return joined

    def event_end(self, chunk: bytes) -> int:
        """Where in `chunk` (without CR) the event being read ends, just after its blank line, or -1:
        feed `chunk[:end]` to finish it, and the decoder is between events again. (What is buffered
        holds no blank line: the end is in `chunk`, or at its first byte after a buffered line end.)"""
        if chunk[:1] == b"\n":
            tail = self._more[-1] if self._more else self._buf
            if tail[-1:] == b"\n" or (not tail and (self._data or self._event is not None)):
                return 1  # the previous read ended with the event's last line
        at = chunk.find(b"\n\n")
        return -1 if at < 0 else at + 2

    def events_of(self, region: bytes) -> list[SSEEvent]:
        """The events of a region from `take_region` (or of a part of one that starts and ends at an
        event boundary), read by the line parser in order with what came before; the partial line
        kept after the region stays buffered."""
        kept, more, self._buf, self._more = self._buf, self._more, b"", []
        try:
            return self._feed(region)
        finally:
            self._buf, self._more = kept, more

    def _feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
        if self._bom_checked and chunk.find(b"\n") < 0 and chunk.find(b"\r") < 0:
            return self._grow(chunk)
        if self._more:
            buf = self._joined(chunk)
        elif self._buf:
            self.rescanned += len(self._buf)
            buf = self._buf + chunk
        else:
            buf = chunk
        if not self._bom_checked:
            if len(buf) < 3 and BOM.startswith(buf):
                self._buf = buf  # could still be a BOM split across reads
                return []
            self._bom_checked = True
            if buf.startswith(BOM):
                buf = buf[3:]
        if buf.find(b"\r") >= 0:
            if buf.endswith(b"\r"):
                self._skip_lf = True
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        if len(self._buf) > self._limit:
            raise SSEError("an upstream event exceeds the size limit")
        events: list[SSEEvent] = []
        for line in lines:
            if line:
                self._field(line)
            elif self._data:
                events.append(self._dispatch())
            else:
                self._event = None
        return events

    def _grow(self, chunk: bytes) -> list[SSEEvent]:
        """A read that ends no line: kept as a piece of the line, to be joined once when it ends."""
        if len(self._buf) + self._more_len + len(chunk) > self._limit:
            raise SSEError("an upstream event exceeds the size limit")
        if chunk:
            self._more.append(chunk)
            self._more_len += len(chunk)
        return []

    def finish(self) -> list[SSEEvent]:
        """End of stream. A final line without line end still counts as a line; an event that was never
        terminated by a blank line is discarded, as the spec says."""
        if self._more:
            self._buf = self._joined(b"")
        for line in self._buf.split(b"\n") if self._buf else ():
            if line:
                self._field(line)
        self._buf = b""
        self._data, self._data_size, self._event = [], 0, None
        return []

    def _field(self, line: bytes) -> None:
        colon = line.find(b":")
        if colon == 0:
            self.comments += 1
            return
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._data_size += len(value) + 1
            if self._data_size > self._limit:
                raise SSEError("an upstream event exceeds the size limit")
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id" and value.find(b"\x00") < 0:
            self._id = value.decode("utf-8", "replace")
        # `retry` and unknown fields are ignored (§9.2.6)

    def _dispatch(self) -> SSEEvent:
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        event = SSEEvent(data, self._event, self._id)
        self._data, self._data_size, self._event = [], 0, None
        return event


def data_lines(region: bytes) -> list[bytes] | None:
    """The data of a region's events (see `SSEDecoder.take_region`) when it holds nothing but one-line
    `data: ` events, each followed by one blank line; else None (read it with `events_of`). Builds no
    event object: the per-read fast path."""
    if not region:
        return []
    head = region[:-2]
    if not head.startswith(b"data: "):
        return None
    parts = head.split(b"\n\ndata: ")
    # any other line end (a multi-line event, a comment or field line, a blank run) is left in a part;
    # the join and memchr cost a fraction of one `count` over the region
    if b"".join(parts).find(b"\n") >= 0:
        return None
    parts[0] = parts[0][6:]
    return parts


def encode_data(data: bytes) -> bytes:
    """One `data:` event for any payload. Compact JSON has no line break and goes out as one line;
    an upstream's multi-line event (its `data` lines joined with LF) goes out a `data:` line per line,
    which the client's parser joins back into the same value (`encode_multiline`)."""
    if data.find(b"\n") >= 0 or data.find(b"\r") >= 0:
        return encode_multiline(data)
    return b"data: " + data + b"\n\n"


def encode_event(event: str, data: bytes) -> bytes:
    """A named event, as the Responses and Messages APIs send them; any payload (see `encode_data`)."""
    name = event.encode()
    if data.find(b"\n") >= 0 or data.find(b"\r") >= 0 or name.find(b"\n") >= 0 or name.find(b"\r") >= 0:
        return encode_multiline(data, event)
    return b"event: " + name + b"\ndata: " + data + b"\n\n"


def encode_multiline(data: bytes, event: str | None = None) -> bytes:
    """Any payload: each line becomes its own `data:` line, so the receiver rejoins them with LF (a CR
    can't be carried by an event stream: CRLF and CR become LF, as any receiver would read them). An
    event name can't hold a line break: one in it (an upstream's `type` value) becomes a space."""
    head = b""
    if event:
        name = event.encode().replace(b"\r", b" ").replace(b"\n", b" ")
        head = b"event: " + name + b"\n"
    lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return head + b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


DONE_EVENT = b"data: [DONE]\n\n"
KEEPALIVE = b": keepalive\n\n"


_SSE_STARTS = (b"data:", b"event:", b"id:", b"retry:", b":")


def looks_like_sse(head: bytes) -> bool:
    """Whether a body whose content type says otherwise is an event stream after all, from its first
    bytes: some servers label SSE `application/json` or `text/plain`. A JSON body starts with `{` or `[`
    (after whitespace); an event stream's first line is a field or a comment (WHATWG HTML §9.2.6),
    possibly after a BOM or blank lines."""
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip(b"\r\n")
    return head.startswith(_SSE_STARTS)
