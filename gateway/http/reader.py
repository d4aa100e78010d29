"""The requests of one connection, framed by llhttp (`httptools`, strict) and held to our policy
(`gateway.core.http1_request`). Sans I/O: bytes in, whole requests out; split anywhere.

Why llhttp: it is the parser of Node.js, fuzzed and audited for request smuggling; our own parser was
looser than llhttp and h11 on 33 framing vectors. What stays ours is policy and bounds:
- head bytes are fed to llhttp only up to the last line end seen, so a field value that trickles in one
  byte a read reaches httptools in one piece (it joins a value's fragments by concatenation: quadratic
  otherwise). A held partial line is measured as it grows (`LineGauge`: the same measure llhttp's
  callbacks give for a whole line), so a line is accepted or refused alike however reads split it;
- a body is fed up to where it can end and no further (all of a Content-Length body's remaining bytes;
  a chunked body up to its last line end, since it ends at one): whatever follows begins at a line
  start, held as above. The body is gathered in one bytearray and counted as it comes, so `max_body`
  is enforced while reading and a 1-byte-chunk trickle costs CPU linear in size;
- a chunked body's framing is counted too (the bytes fed less the data llhttp gave back): llhttp skips
  chunk extensions and leading zeros of any length, and httptools joins a trailer value's fragments by
  concatenation, so an endless extension kept the loop busy for nothing and an endless trailer value grew
  memory at a quadratic cost (the class of Node's CVE-2024-22019);
- a request carrying `Upgrade` (RFC 9110 §7.8) is the last one read from its connection: its body is
  read as a body (httptools would skip it and hand the bytes back as "another protocol": the
  smuggling hole of issue #27), nothing after it is parsed, and it is answered with `Connection: close`;
- pipelined requests completed by one read queue up to MAX_PIPELINED; past that the queued ones are
  served and the connection closes after them, lingering (`HttpConnection._linger`: a close on the
  client's unread bytes resets it, erasing answers it has not read), the rest unanswered (RFC 9112
  §9.3.2: a client must be ready to retry).
"""

from __future__ import annotations

import re
from collections import deque

import httptools

from gateway.core.http1_request import (
    MAX_CHUNK_LINE,
    MAX_FIELDS,
    MAX_REQUEST_HEAD,
    MAX_TARGET,
    FieldCollector,
    HeadSeen,
    LineGauge,
    RequestError,
    RequestHead,
    body_framing_head,
    continue_line,
    framing_budget,
    head_seen,
    partial_request_line,
    request_head,
)

MAX_PIPELINED = 16


MAX_UPGRADED_BYTES = 1 << 20  # kept of what came with an Upgrade head: more than any tunnel takes at once


_BLANK_LINE = re.compile(rb"(?:^|\n)\r?\n")


def _after_head(lines: bytes) -> bytes:
    """What follows the head's end (its first empty line) in `lines`, whole lines fed with an Upgrade
    request's head: the first bytes of the new protocol."""
    m = _BLANK_LINE.search(lines)
    return lines[m.end():] if m else b""


_SPENT = httptools.HttpRequestParser(None)  # what a released reader holds instead of its parser: never fed


class _Saturated(Exception):
    """Raised inside llhttp's message-complete callback: nothing more is read from this connection."""


class RequestReader:
    """Requests in arrival order. `feed(data)` returns the next whole request (head, body) or None;
    requests and bytes past it stay queued: `feed(b"")` returns the next one (pipelining).
    `continue_due()` says once per request that the client waits for `100 Continue` before sending its
    body (RFC 9110 §10.1.1). Raises only RequestError. `saturated`: the queued requests are the last
    ones (MAX_PIPELINED reached, or an `Upgrade` request): serve them, then close."""

    __slots__ = ("_body", "_continue_sent", "_error", "_fields", "_framing", "_gauge", "_head", "_in_head",
                 "_parser", "_ready", "_refeed", "_refeeding", "_size", "_stalled", "_started", "_target", "_unfed",
                 "max_body", "saturated", "upgraded_bytes")

    def __init__(self, max_body: int):
        self.max_body = max_body
        self._parser = httptools.HttpRequestParser(self)
        self._ready: deque[tuple[RequestHead, bytes]] = deque()
        self._unfed = bytearray()  # head bytes after the last line end, not yet given to llhttp
        self._gauge: LineGauge | None = None  # the measure of the line `_unfed` begins
        self._error: RequestError | None = None
        self._refeed = self._refeeding = False  # an Upgrade request's body, see _after_upgrade
        self.saturated = False
        # the bytes after the head of a body-less Upgrade request, read with it: the new protocol's, for
        # the tunnel an accepted upgrade hands the connection to (http/upgrade.py); dropped otherwise
        self.upgraded_bytes = b""
        self._new_message()

    def _new_message(self) -> None:
        self._in_head = True
        self._started = False
        # the request target: llhttp is given whole lines (`_take_head`), so it comes in one piece
        self._target = b""
        self._fields: FieldCollector | None = None
        self._head: RequestHead | None = None
        self._body: bytes | bytearray = b""
        self._size = 0
        self._framing = 0  # a chunked body's bytes that are not data (MAX_CHUNK_LINE)
        self._stalled = 0  # of which fed since the last data byte or trailer field
        self._continue_sent = False

    @property
    def buffered(self) -> bool:
        """A request, or bytes of one, wait to be read."""
        return bool(self._ready) or bool(self._unfed) or self._error is not None

    @property
    def in_request(self) -> bool:
        """Some bytes of a request have arrived: the connection is not idle (its deadlines are the request's)."""
        return self._started or bool(self._unfed) or bool(self._ready)

    @property
    def awaiting_head(self) -> bool:
        """A request has begun and its head is not complete yet (the request-head timeout runs)."""
        return self._in_head and (self._started or bool(self._unfed))

    @property
    def awaiting_body(self) -> bool:
        """A request's head has been read and its body has not all come (the request timeout runs)."""
        return not self._in_head and not self.saturated

    def feed(self, data: bytes) -> tuple[RequestHead, bytes] | None:
        if data:
            self._take(data)
        if self._ready:
            return self._ready.popleft()
        if self._error is not None:
            raise self._error
        return None

    def seen(self) -> HeadSeen | None:
        """What was read of the head of the request `feed` refused (its path, the fields parsed so far);
        None when not even its target was."""
        if self._head is not None:
            return HeadSeen(self._head.path, self._head.headers)
        if self._target:
            return head_seen(self._target, self._fields.fields if self._fields is not None else {})
        if not self._started and self._unfed:  # a request line refused before its end (414)
            return partial_request_line(bytes(self._unfed))
        return None

    def release(self) -> None:
        """The connection is gone: drop the parser. llhttp's parser holds this reader's callbacks (and
        the last exception raised in one, with its frames), and this reader holds it: a cycle only the
        cyclic collector would free, once per connection (docs/reference.md, "WebSocket mode").
        Nothing is parsed after (`saturated`: nothing more is read)."""
        self._parser = _SPENT
        self.saturated = True

    def continue_due(self) -> bytes:
        """The interim answer to send now, or b""."""
        head = self._head
        if head is None or not head.expects_continue or self._continue_sent or self._in_head:
            return b""
        self._continue_sent = True
        return continue_line()

    def _take(self, data: bytes) -> None:
        while data and self._error is None and not self.saturated:
            data = self._take_head(data) if self._in_head else self._take_body(data)

    def _take_head(self, data: bytes) -> bytes:
        """Feed whole lines (the head, and whatever they complete after it); hold a partial line.
        Returns the bytes after the last line end when llhttp has left the head by then."""
        end = data.rfind(b"\n")
        if end < 0:
            self._hold(data)
            return b""
        if self._unfed:
            end += len(self._unfed)
            self._unfed += data
            data = bytes(self._unfed)
            self._unfed.clear()
        self._gauge = None
        left = self._execute(data[:end + 1])
        if self.saturated and self._ready and self._ready[-1][0].upgrade is not None and not self.upgraded_bytes:
            self.upgraded_bytes = _after_head(data[:end + 1])[:MAX_UPGRADED_BYTES] + data[end + 1:]
        return left + data[end + 1:] if left else data[end + 1:]

    def _take_body(self, data: bytes) -> bytes:
        """Feed body bytes up to where the body can end, so the next head begins at a line start."""
        head = self._head
        assert head is not None
        if head.content_length is not None:
            n = head.content_length - self._size
            if n <= 0:  # llhttp ends a body at its last byte: never here, but never a loop without progress
                self._error = RequestError(400, "bad request")
                return b""
            left = self._execute(data[:n])
            return left + data[n:] if left else data[n:]
        end = data.rfind(b"\n")  # a chunked body ends with a line end: bytes after the last cannot end it
        if end < 0 or end == len(data) - 1:
            return self._feed_chunked(data)
        left = self._feed_chunked(data[:end + 1])
        return left + data[end + 1:] if left else data[end + 1:]

    def _feed_chunked(self, data: bytes) -> bytes:
        """Feed chunked body bytes and count their framing: the bytes fed less the data they carried.
        Framing fed with neither data nor a whole trailer field is a chunk line or a trailer line still
        growing (MAX_CHUNK_LINE); all of it is held to `framing_budget`."""
        head, size, fields = self._head, self._size, self._fields
        lines = fields.lines if fields is not None else 0
        left = self._execute(data)
        if self._head is not head or self._error is not None:
            return left  # the body ended in these bytes (what followed it is the next request's)
        framing = len(data) - len(left) - (self._size - size)
        self._framing += framing
        moved = self._size != size or (fields is not None and fields.lines != lines)
        self._stalled = 0 if moved else self._stalled + framing
        if self._stalled > MAX_CHUNK_LINE:
            self._error = RequestError(400, "a chunk size line or trailer field is too long")
        elif self._framing > framing_budget(self.max_body):
            self._error = RequestError(413, f"the request body's chunked framing passed "
                                            f"{framing_budget(self.max_body)} bytes")
        return left

    def _hold(self, data: bytes) -> None:
        """Head bytes with no line end yet: wait for one, measuring the line as it grows."""
        self._unfed += data
        gauge = self._gauge
        if gauge is None:
            gauge = self._gauge = LineGauge(request_line=not self._started)
            gauge.add(bytes(self._unfed))
        else:
            gauge.add(data)
        done = self._fields.size if self._fields is not None else 0
        if len(self._unfed) > MAX_REQUEST_HEAD or done + gauge.bound() > MAX_REQUEST_HEAD:
            self._error = RequestError(431, "request header fields too large")
        elif gauge.over():
            self._error = gauge.error()

    def _execute(self, data: bytes) -> bytes:
        """Feed llhttp; returns the bytes it handed back unread (an Upgrade request's body)."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            return self._after_upgrade(data[int(upgrade.args[0]):])
        except httptools.HttpParserCallbackError as exc:
            self._callback_failed(exc.__context__)
        except httptools.HttpParserError as exc:
            self._error = RequestError(400, f"bad request: {exc}")
        return b""

    def _callback_failed(self, cause: BaseException | None) -> None:
        """What one of our callbacks raised inside llhttp. Not bound in `_execute`'s own frame: the
        exception's traceback holds that frame, and a local naming the exception would make a cycle of
        the two (with the connection the frames above it hold), left to the cyclic collector."""
        if isinstance(cause, _Saturated):
            self.saturated = True
        elif isinstance(cause, RequestError):
            self._error = cause
        else:
            self._error = RequestError(400, "bad request")

    def _after_upgrade(self, rest: bytes) -> bytes:
        """httptools stops after the head of a request asking to switch protocols and skips its body
        (it expects the bytes after the head to be the new protocol's). We switch to nothing: the body
        is read as the body its head announces, as h11 and llhttp itself read it. A fresh parser is
        given a head carrying only that framing (so llhttp, not our code, decodes the body), then the
        bytes; the request is queued once its body ends and nothing after it is read."""
        head = self._head
        if not self._refeed or head is None:
            self.saturated = True
            self.upgraded_bytes = rest[:MAX_UPGRADED_BYTES]
            return b""
        self._refeed = False
        self._parser = httptools.HttpRequestParser(self)
        self._refeeding = True
        try:
            self._parser.feed_data(body_framing_head(head))
        finally:
            self._refeeding = False
        self._head, self._in_head = head, False
        return rest

    # llhttp callbacks (exceptions raised here come back out of feed_data as HttpParserCallbackError)

    def on_message_begin(self) -> None:
        self._started = True

    def on_url(self, part: bytes) -> None:
        if self._refeeding:
            return
        self._target += part
        if len(self._target) > MAX_TARGET:
            raise RequestError(414, "request target too long")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refeeding:
            return
        fields = self._fields
        if fields is None:
            fields = self._fields = FieldCollector(len(self._target))
        if self._in_head:
            fields.add(name, value)
        else:  # a trailer field (RFC 9112 §7.1.2): counted against the limits, then dropped
            fields.lines += 1
            fields.size += len(name) + len(value) + 4
            if fields.lines > MAX_FIELDS or fields.size > 2 * MAX_REQUEST_HEAD:
                raise RequestError(431, "request trailer fields too large")

    def on_headers_complete(self) -> None:
        if not self._refeeding:
            fields = self._fields.fields if self._fields is not None else {}
            target = self._target.decode("latin-1")
            method = self._parser.get_method().decode("ascii")
            self._head = request_head(method, target, self._parser.get_http_version(), fields, self.max_body)
        self._in_head = False

    def on_body(self, part: bytes) -> None:
        size = self._size + len(part)
        if size > self.max_body:
            raise RequestError(413, f"request body is larger than {self.max_body} bytes")
        self._size = size
        body = self._body
        if not body:
            self._body = part
        elif isinstance(body, bytes):
            self._body = bytearray(body) + part
        else:
            body += part

    def on_message_complete(self) -> None:
        head = self._head
        assert head is not None
        if head.upgrade is not None and head.content_length != 0 and self._parser.should_upgrade():
            self._refeed = True  # httptools skipped the body: llhttp pauses next, see _after_upgrade
            return
        self._ready.append((head, bytes(self._body)))
        self._new_message()
        if head.upgrade is not None or len(self._ready) >= MAX_PIPELINED:
            head.keep_alive = False  # the last one served on this connection
            raise _Saturated
