"""An upstream response's framing, sans I/O: llhttp (through `httptools`, strict: no leniencies) under
our own policy. `feed(bytes)` as reads arrive, split anywhere; the head appears in `head`, decoded body
pieces in `pieces` (the caller takes and clears them), `done` when the message is complete. Every
rejection is our own `HTTPError`; nothing else escapes.

llhttp does the byte-level work (status line, header syntax, chunk sizes, CRLFs: RFC 9112 §4, §5, §7.1)
in C; our policy on top, where llhttp is more permissive or unbounded:

- a head is at most MAX_HEAD_BYTES (interim heads included), MAX_HEADERS fields, each line at most
  MAX_LINE bytes; llhttp itself has no size limit;
- while in the head, llhttp is fed only whole lines: httptools joins the fragments of a value split
  across feeds by concatenation, quadratic when a hostile upstream sends it one byte per read;
- `Transfer-Encoding` must be exactly `chunked` (§6.1: we ask for no other coding), never beside
  `Content-Length` (§6.1: a message with both is a smuggling vector; llhttp refuses it too);
- interim answers: only 100 and 103, at most MAX_INTERIM of them (RFC 9110 §15.2); 101 is an upgrade we
  never asked for;
- bytes past the end of the message make the connection unusable (`extra`), and an empty line before
  the status line is refused (llhttp skips it);
- after the head, a run of MAX_QUIET bytes that carries no body byte (a trailer section or a chunk
  extension that never ends) is refused: httptools would keep growing a trailer value without bound.

A body framed by neither length nor chunks runs until the connection closes (§6.3 rule 8): httptools
has no `finish()`, so `until_close` tells the I/O shell that the connection's end completes it.
"""

from __future__ import annotations

import re

from httptools import HttpParserError, HttpParserUpgrade, HttpResponseParser

from gateway.core.http1 import HTTPError, ResponseHead

MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100
MAX_LINE = 8 * 1024
MAX_INTERIM = 8
MAX_QUIET = 8 * 1024
_INTERIM_OK = (100, 103)

_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


class _Extra(Exception):
    """A second message begins after the final one."""


class ResponseFramer:
    """One response on a connection (a new framer per request)."""

    __slots__ = ("_count", "_head_fed", "_head_size", "_headers", "_in_head", "_interim", "_parser",
                 "_quiet", "_tail", "done", "extra", "head", "on_body", "pieces", "until_close")

    def __init__(self) -> None:
        self.head: ResponseHead | None = None
        self.pieces: list[bytes] = []
        self.on_body = self.pieces.append  # llhttp's body callback: a C call per piece, no Python frame
        self.done = False
        self.extra = False
        self.until_close = False
        self._in_head = True
        self._headers: dict[str, str] = {}
        self._count = 0
        self._head_size = 0
        self._head_fed = 0
        self._interim = 0
        self._quiet = 0
        self._tail = bytearray()
        self._parser: HttpResponseParser | None = HttpResponseParser(self)

    def feed(self, data: bytes) -> None:
        if self._in_head:
            self._feed_head(data)
            return
        if self.done:
            self.extra = self.extra or bool(data)
            return
        pieces = self.pieces
        n = len(pieces)
        try:
            self._parser.feed_data(data)  # type: ignore[union-attr]  # None only once done
        except (HttpParserError, HttpParserUpgrade) as exc:
            self._failed(exc)
        if len(pieces) == n and not self.done:
            self._quiet += len(data)
            if self._quiet > MAX_QUIET:
                raise HTTPError("response framing without body bytes is too long")
        else:
            self._quiet = 0

    def _feed_head(self, data: bytes) -> None:
        nl = data.rfind(b"\n")
        tail = self._tail
        if nl < 0:
            tail += data
            if len(tail) > MAX_LINE:
                raise HTTPError("response header line too long")
            return
        cut = nl + 1
        lines = bytes(tail) + data[:cut] if tail else (data if cut == len(data) else data[:cut])
        tail.clear()
        if not self._head_fed and lines[:1] in (b"\r", b"\n"):
            # llhttp skips empty lines before a status line; RFC 9112 §2.2 allows that only before a
            # request line (h11 refuses it too): bytes before a response are a connection out of step
            raise HTTPError("response begins with an empty line")
        self._head_fed += len(lines)
        self._run(lines)
        rest = data[cut:]
        if self._in_head:
            if self._head_fed > MAX_HEAD_BYTES:
                raise HTTPError("response head too large")
            tail += rest
            if len(tail) > MAX_LINE:
                raise HTTPError("response header line too long")
        elif rest:
            self.feed(rest)

    def _run(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:  # the final message completed earlier in this read
            self.extra = True
            return
        try:
            parser.feed_data(data)
        except (HttpParserError, HttpParserUpgrade) as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        if self.done:  # bytes past the final message (a second message, or garbage)
            self.extra = True
            return
        cause = exc.__context__
        raise HTTPError(str(cause) if isinstance(cause, HTTPError) else "invalid HTTP response") from None

    # llhttp callbacks (httptools looks them up by name when the parser is made)

    def on_message_begin(self) -> None:
        if self.done:
            raise _Extra

    def on_status(self, reason: bytes) -> None:
        # RFC 9112 §4: reason-phrase = *( HTAB / SP / VCHAR / obs-text ); llhttp lets other control
        # bytes through (h11 does not), and a NUL in a status line is a broken or hostile upstream
        if _CONTROL.search(reason):
            raise HTTPError("control character in the status line")

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._in_head:
            return  # a trailer field (RFC 9112 §7.1.2): read, bounded by MAX_QUIET, dropped
        size = len(name) + len(value)
        self._count += 1
        self._head_size += size + 4
        if size > MAX_LINE or self._count > MAX_HEADERS or self._head_size > MAX_HEAD_BYTES:
            raise HTTPError("response head too large")
        key, text = name.decode("latin-1").lower(), value.decode("latin-1").strip(" \t")  # OWS: RFC 9110 §5.5
        headers = self._headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text  # RFC 9110 §5.3

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None
        status = parser.get_status_code()
        headers = self._headers
        if status < 200:
            if status not in _INTERIM_OK:  # 101 included: we never ask to switch protocols
                raise HTTPError(f"unexpected interim status {status}")
            self._interim += 1
            if self._interim > MAX_INTERIM:
                raise HTTPError("too many interim responses")
            headers.clear()
            self._count = 0
            return
        te, cl = headers.get("transfer-encoding"), headers.get("content-length")
        if te is not None:
            if cl is not None:
                raise HTTPError("both transfer-encoding and content-length")
            if te.strip().lower() != "chunked":
                raise HTTPError("unsupported transfer-encoding")
        elif cl is not None:
            if not (cl.isascii() and cl.isdigit()):  # llhttp checks it as well; "²".isdigit() is True
                raise HTTPError("bad content-length")
        elif status not in (204, 304):
            self.until_close = True
        self._in_head = False
        self.head = ResponseHead(status, dict(headers), parser.should_keep_alive() and not self.until_close)

    def on_message_complete(self) -> None:
        if self._in_head:
            return  # an interim answer: the real head follows
        self.done = True
        self._parser = None  # drops the framer <-> parser cycle; more bytes are `extra`
