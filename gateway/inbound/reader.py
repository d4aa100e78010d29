"""The requests of one connection, framed by llhttp (`httptools`, strict) and held to our policy
(`gateway.core.http1_request`). Sans I/O: bytes in, whole requests out; split anywhere.

Why llhttp: it is the parser of Node.js, fuzzed and audited for request smuggling; our own parser was
looser than llhttp and h11 on 33 framing vectors. What stays ours is policy and bounds:
- head bytes are fed to llhttp only up to the last line end seen, so a field value that trickles in one
  byte a read reaches httptools in one piece (it joins a value's fragments by concatenation: quadratic
  otherwise), and a line longer than MAX_LINE is refused before it is complete (431);
- the body is gathered in one bytearray (amortised linear, no list of tiny parts) and counted as it
  comes, so `max_body` is enforced while reading and a 1-byte-chunk trickle costs CPU linear in size;
- pipelined requests completed by one read queue up to MAX_PIPELINED; past that the queued ones are
  served and the connection closes after them (RFC 9112 §9.3.2: a client must be ready to retry).
"""

from __future__ import annotations

from collections import deque

import httptools

from gateway.core.http1_request import (
    MAX_FIELDS,
    MAX_LINE,
    MAX_REQUEST_HEAD,
    FieldCollector,
    RequestError,
    RequestHead,
    continue_line,
    request_head,
)

MAX_PIPELINED = 16
MAX_TARGET = 8 * 1024


class _Saturated(Exception):
    """Raised inside llhttp's message-complete callback: enough requests are queued."""


class RequestReader:
    """Requests in arrival order. `feed(data)` returns the next whole request (head, body) or None;
    requests and bytes past it stay queued: `feed(b"")` returns the next one (pipelining).
    `continue_due()` says once per request that the client waits for `100 Continue` before sending its
    body (RFC 9110 §10.1.1). Raises only RequestError."""

    __slots__ = ("_body", "_continue_sent", "_error", "_fields", "_head", "_in_head", "_parser", "_ready",
                 "_size", "_started", "_target", "_unfed", "max_body", "saturated")

    def __init__(self, max_body: int):
        self.max_body = max_body
        self._parser = httptools.HttpRequestParser(self)
        self._ready: deque[tuple[RequestHead, bytes]] = deque()
        self._unfed = bytearray()  # head bytes after the last line end, not yet given to llhttp
        self._error: RequestError | None = None
        self.saturated = False  # MAX_PIPELINED reached: serve what is queued, then close
        self._new_message()

    def _new_message(self) -> None:
        self._in_head = True
        self._started = False
        self._target: list[bytes] = []
        self._fields: FieldCollector | None = None
        self._head: RequestHead | None = None
        self._body: bytes | bytearray = b""
        self._size = 0
        self._continue_sent = False

    @property
    def buffered(self) -> bool:
        """A request, or bytes of one, wait to be read."""
        return bool(self._ready) or bool(self._unfed) or self._error is not None

    @property
    def in_request(self) -> bool:
        """Some bytes of a request have arrived (an idle timeout then cuts a request short)."""
        return self._started or bool(self._unfed) or bool(self._ready)

    @property
    def awaiting_head(self) -> bool:
        """A request has begun and its head is not complete yet (the request-head timeout runs)."""
        return self._in_head and (self._started or bool(self._unfed))

    def feed(self, data: bytes) -> tuple[RequestHead, bytes] | None:
        if data and self._error is None and not self.saturated:
            self._take(data)
        if self._ready:
            return self._ready.popleft()
        if self._error is not None:
            raise self._error
        return None

    def continue_due(self) -> bytes:
        """The interim answer to send now, or b""."""
        head = self._head
        if head is None or not head.expects_continue or self._continue_sent or self._in_head:
            return b""
        self._continue_sent = True
        return continue_line()

    def _take(self, data: bytes) -> None:
        if not self._in_head:
            self._execute(data)
            return
        end = data.rfind(b"\n")
        if end < 0:
            self._hold(data)
            return
        if self._unfed:
            end += len(self._unfed)
            self._unfed += data
            data = bytes(self._unfed)
            self._unfed.clear()
        self._execute(data[:end + 1])
        rest = data[end + 1:]
        if rest and self._error is None and not self.saturated:
            if self._in_head:
                self._hold(rest)
            else:
                self._execute(rest)

    def _hold(self, data: bytes) -> None:
        """Head bytes with no line end yet: wait for one (a line is at most MAX_LINE bytes)."""
        self._unfed += data
        if len(self._unfed) > MAX_LINE:
            self._error = RequestError(431, "request header line too long")

    def _execute(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._after_upgrade(data, int(upgrade.args[0]))
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, _Saturated):
                self.saturated = True
            elif isinstance(cause, RequestError):
                self._error = cause
            else:
                self._error = RequestError(400, "bad request")
        except httptools.HttpParserError as exc:
            self._error = RequestError(400, f"bad request: {exc}")

    def _after_upgrade(self, data: bytes, at: int) -> None:
        """llhttp stops after a request asking to switch protocols (`Upgrade`, RFC 9110 §7.8). We
        don't switch (a server may ignore Upgrade): the request was served as HTTP/1.1, and what
        follows is read by a fresh parser as the next request."""
        self._parser = httptools.HttpRequestParser(self)
        self._new_message()
        if at < len(data):
            self._take(data[at:])

    # llhttp callbacks (exceptions raised here come back out of feed_data as HttpParserCallbackError)

    def on_message_begin(self) -> None:
        self._started = True

    def on_url(self, part: bytes) -> None:
        self._target.append(part)
        if sum(map(len, self._target)) > MAX_TARGET:
            raise RequestError(414, "request target too long")

    def on_header(self, name: bytes, value: bytes) -> None:
        fields = self._fields
        if fields is None:
            fields = self._fields = FieldCollector(sum(map(len, self._target)))
        if self._in_head:
            fields.add(name, value)
        else:  # a trailer field (RFC 9112 §7.1.2): counted against the limits, then dropped
            fields.lines += 1
            fields.size += len(name) + len(value) + 4
            if fields.lines > MAX_FIELDS or fields.size > 2 * MAX_REQUEST_HEAD:
                raise RequestError(431, "request trailer fields too large")

    def on_headers_complete(self) -> None:
        fields = self._fields.fields if self._fields is not None else {}
        target = b"".join(self._target).decode("latin-1")
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
        self._ready.append((head, bytes(self._body)))
        self._new_message()
        if len(self._ready) >= MAX_PIPELINED:
            head.keep_alive = False  # the last one served on this connection
            raise _Saturated
