"""HTTP/1.1 server side, sans I/O: read the requests of one connection, build response heads.

RFC 9112: a request is a request line (`method SP request-target SP HTTP-version`, §3), header lines
and an empty line (§2.1); empty lines before the request line are ignored (§2.2). Its body is framed by
`Transfer-Encoding: chunked` (§7.1) or `Content-Length` (§6.3); a request carrying both is refused
(§6.1 lets a server reject it, and a gateway must not let two readings of one message through:
request smuggling). A header line that starts with whitespace (obsolete line folding, §5.2) and
whitespace between a field name and its colon (§5.1) are refused. HTTP/1.0 connections close after
the response unless the client asked for `keep-alive`. Bytes are fed as they arrive, split anywhere;
nothing here does I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.core.http1 import BodyReader, HTTPError

MAX_REQUEST_HEAD = 64 * 1024
_TOKEN_CHARS = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # RFC 9110 §5.6.2
_TOKEN = re.compile(f"^{_TOKEN_CHARS}$")
# field-line = field-name ":" OWS field-value OWS (RFC 9112 §5); no CR, LF or NUL inside a value (§5.5),
# no whitespace before the colon (§5.1), no folded continuation lines (§5.2)
_FIELD_LINES = re.compile(f"(?:{_TOKEN_CHARS}:[^\r\n\x00]*\r\n)*")
_FIELD = re.compile(f"({_TOKEN_CHARS}):[ \t]*([^\r\n\x00]*)\r\n")  # trailing OWS: stripped after
_KNOWN_METHODS = frozenset(("GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH"))
_VERSION = re.compile(r"^HTTP/(\d)\.(\d)$")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# RFC 9110 §15 reason phrases of the statuses this gateway answers with (clients ignore the phrase, §4)
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 403: "Forbidden",
            404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
            413: "Content Too Large", 422: "Unprocessable Content", 429: "Too Many Requests",
            431: "Request Header Fields Too Large", 499: "Client Closed Request", 500: "Internal Server Error",
            501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
            505: "HTTP Version Not Supported"}


class RequestError(ValueError):
    """Bytes that are not a request this server accepts; `status` is the answer (then the connection
    closes: after a framing error nothing later on it can be trusted)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(slots=True)
class RequestHead:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names; repeated fields joined with ", " (RFC 9110 §5.3)
    keep_alive: bool
    http10: bool
    content_length: int | None
    expects_continue: bool


class RequestReader:
    """Requests in arrival order. `feed(data)` returns the next whole request (head, body) or None;
    bytes past it stay buffered: `feed(b"")` returns the next buffered one (pipelining, RFC 9112 §9.3.2).
    `continue_due()` says once per request that the client waits for `100 Continue` before sending its
    body (RFC 9110 §10.1.1)."""

    __slots__ = ("_buf", "_chunks", "_continue_sent", "_got", "_head", "max_body")

    def __init__(self, max_body: int):
        self.max_body = max_body
        self._buf = bytearray()
        self._head: RequestHead | None = None
        self._chunks: BodyReader | None = None
        self._got: list[bytes] = []
        self._continue_sent = False

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def in_request(self) -> bool:
        """Some bytes of a request have arrived (an idle timeout then cuts a request short)."""
        return self._head is not None or bool(self._buf)

    def feed(self, data: bytes) -> tuple[RequestHead, bytes] | None:
        if data:
            self._buf += data
        if self._head is None and not self._read_head():
            return None
        return self._read_body()

    def continue_due(self) -> bytes:
        """The interim answer to send now, or b""."""
        head = self._head
        if head is None or not head.expects_continue or self._continue_sent:
            return b""
        self._continue_sent = True
        return _CONTINUE

    def _read_head(self) -> bool:
        buf = self._buf
        while buf[:2] == b"\r\n":
            del buf[:2]
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_REQUEST_HEAD:
                raise RequestError(431, "request header fields too large")
            return False
        if end > MAX_REQUEST_HEAD:
            raise RequestError(431, "request header fields too large")
        head = parse_request_head(bytes(buf[:end]))
        del buf[:end + 4]
        if head.content_length is not None and head.content_length > self.max_body:
            raise RequestError(413, f"request body is larger than {self.max_body} bytes")
        self._head, self._continue_sent = head, False
        if head.content_length is None and "transfer-encoding" in head.headers:
            self._chunks = BodyReader.chunked()
        return True

    def _read_body(self) -> tuple[RequestHead, bytes] | None:
        head = self._head
        assert head is not None
        if self._chunks is not None:
            return self._read_chunked(head, self._chunks)
        size = head.content_length or 0
        if len(self._buf) < size:
            return None
        body = bytes(self._buf[:size])
        del self._buf[:size]
        self._head = None
        return head, body

    def _read_chunked(self, head: RequestHead, reader: BodyReader) -> tuple[RequestHead, bytes] | None:
        data = bytes(self._buf)
        self._buf.clear()
        try:
            part = reader.feed(data)
        except HTTPError as exc:
            raise RequestError(400, f"bad chunked body: {exc}") from None
        if part:
            self._got.append(part)
            if sum(map(len, self._got)) > self.max_body:
                raise RequestError(413, f"request body is larger than {self.max_body} bytes")
        if not reader.done:
            return None
        self._buf += reader.extra
        body = b"".join(self._got)
        self._head, self._chunks, self._got = None, None, []
        return head, body


def parse_request_head(block: bytes) -> RequestHead:
    text = block.decode("latin-1")  # every byte decodes; RFC 9110 §5.5 treats obs-text as opaque
    line_end = text.find("\r\n")
    fields = "" if line_end < 0 else text[line_end + 2:] + "\r\n"
    method, path, query, http10 = _request_line(text if line_end < 0 else text[:line_end])
    # two C passes instead of a loop per line: the field lines are checked whole, then read
    if _FIELD_LINES.fullmatch(fields) is None:
        raise RequestError(400, "bad header line")
    headers: dict[str, str] = {}
    for name, value in _FIELD.findall(fields):
        if value and value[-1] in " \t":
            value = value.rstrip(" \t")
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    conn = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep_alive = "keep-alive" in conn if http10 else "close" not in conn
    return RequestHead(method, path, query, headers, keep_alive, http10, _content_length(headers, http10),
                       headers.get("expect", "").lower() == "100-continue")


def _request_line(line: str) -> tuple[str, str, str, bool]:
    parts = line.split(" ")
    if len(parts) != 3 or (parts[0] not in _KNOWN_METHODS and not _TOKEN.match(parts[0])):
        raise RequestError(400, "bad request line")
    method, target, version = parts
    if version == "HTTP/1.1":
        http10 = False
    else:
        m = _VERSION.match(version)
        if m is None:
            raise RequestError(400, "bad HTTP version")
        if m.group(1) != "1":
            raise RequestError(505, "HTTP version not supported")
        http10 = m.group(2) == "0"
    if not target.startswith("/"):
        raise RequestError(400, "the request target must be a path")  # origin-form only (§3.2.1)
    path, _, query = target.partition("?")
    return method, path, query, http10


def _content_length(headers: dict[str, str], http10: bool) -> int | None:
    te = headers.get("transfer-encoding")
    cl = headers.get("content-length")
    if te is not None:
        if cl is not None:
            raise RequestError(400, "both Transfer-Encoding and Content-Length")
        if http10:
            raise RequestError(400, "Transfer-Encoding in an HTTP/1.0 request")
        if te.strip().lower() != "chunked":
            raise RequestError(501, "unsupported transfer-encoding")
        return None
    if cl is None:
        return 0
    values = {v.strip() for v in cl.split(",")}  # a repeated field with one value is allowed (§6.3)
    if len(values) != 1:
        raise RequestError(400, "conflicting Content-Length")
    value = values.pop()
    if not value.isdigit() or len(value) > 18:
        raise RequestError(400, "bad Content-Length")
    return int(value)


def response_head(status: int, headers: dict[str, str], date: str, *, length: int | None,
                  keep_alive: bool, http10: bool) -> bytes:
    """Status line and headers. `length` None: the body is chunked (HTTP/1.1) or runs to the close
    (HTTP/1.0). Values come from our own code and config; a line break would inject a header line."""
    reason = _REASONS.get(status, "Status")
    lines = [f"HTTP/1.{0 if http10 else 1} {status} {reason}", f"Date: {date}"]
    for name, value in headers.items():
        if "\n" in value or "\r" in value:
            raise ValueError(f"header {name} holds a line break")
        lines.append(f"{name}: {value}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    elif not http10:
        lines.append("Transfer-Encoding: chunked")
    if not keep_alive:
        lines.append("Connection: close")
    elif http10:
        lines.append("Connection: keep-alive")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (never empty: a zero-size chunk ends the body)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
