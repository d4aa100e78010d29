"""HTTP/1.1 server side, sans I/O: our policy on top of the parsed request, and response heads.

The bytes are framed by llhttp (`gateway/http/reader.py`); what llhttp accepts is then held to
this server's stricter policy, field by field (RFC 9112, RFC 9110):
- the request target is origin-form only (RFC 9112 §3.2.1): no absolute-form, no CONNECT;
- exactly one `Host` in an HTTP/1.1 request (RFC 9112 §3.2: a server MUST answer 400 otherwise);
- `Transfer-Encoding` only `chunked` (§6.1: we decode nothing else: 501), never with `Content-Length`
  (§6.1 lets a server refuse it; a gateway must not let two readings of one message through) and never
  in HTTP/1.0 (§6.1);
- singleton fields at most once (a second `Content-Length`, `Host`, `Authorization`… is two readings);
- no CONNECT (its target is not a path, and llhttp reads the bytes after its head as a tunnel's);
- at most MAX_FIELDS field lines, MAX_LINE bytes a line (a field's name and value as llhttp gives them;
  a target of at most MAX_TARGET bytes: 414), MAX_REQUEST_HEAD bytes a head (431), and a body of at most
  `max_body` bytes (413, from `Content-Length` before the body is read). A line still arriving is
  measured the same way (`LineGauge`), so where reads split a line never changes its verdict;
- a chunked body's framing bounded too (MAX_CHUNK_LINE, `framing_budget`): what is not data costs
  reading as much as data does;
- a request carrying `Upgrade` (RFC 9110 §7.8) is answered, then its connection closes: nothing after
  it is read as a request (one request smuggled behind an upgrade is one too many).
HTTP/1.0 connections close after the response unless the client asked for `keep-alive`. Nothing
here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MAX_REQUEST_HEAD = 64 * 1024
MAX_LINE = 8 * 1024
MAX_TARGET = 8 * 1024
MAX_FIELDS = 100
# A chunked body's framing (chunk size lines with their extensions, chunk ends, trailers) is no data, so
# `max_body` does not bound it, and llhttp skips extensions and leading zeros of any length: at most
# MAX_CHUNK_LINE bytes of it may come without a data byte or a whole trailer field between (a line too
# long: 400), and at most `max_body` + 2 * MAX_REQUEST_HEAD (the trailers' own bound) in all (413).
MAX_CHUNK_LINE = 2 * MAX_LINE
# Fields whose second copy is a second reading of the request (RFC 9110 §5.3: only list-valued fields
# may repeat); `Content-Length` is one (llhttp refuses its repetition too).
SINGLETON_FIELDS = frozenset(("host", "content-length", "content-type", "transfer-encoding", "authorization",
                              "api-key", "x-api-key", "expect", "anthropic-version"))
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# RFC 9110 §15 reason phrases of the statuses this gateway answers with (clients ignore the phrase, §4)
_REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 401: "Unauthorized", 402: "Payment Required",
            403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
            413: "Content Too Large", 414: "URI Too Long", 422: "Unprocessable Content", 426: "Upgrade Required",
            429: "Too Many Requests", 431: "Request Header Fields Too Large", 499: "Client Closed Request",
            500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway",
            503: "Service Unavailable", 504: "Gateway Timeout", 505: "HTTP Version Not Supported"}
# status and reason, written once: a stream's first write formats no integer (issue #34, a cold hop's
# cost is the code it runs)
_STATUS_TEXT = {status: f"{status} {reason}" for status, reason in _REASONS.items()}


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
    content_length: int | None  # None: chunked
    expects_continue: bool
    upgrade: str | None = None  # the `Upgrade` field, lower-cased: the connection's last request

    def __init__(self, method: str, path: str, query: str, headers: dict[str, str], keep_alive: bool, http10: bool,
                 content_length: int | None, expects_continue: bool, upgrade: str | None = None) -> None:
        self.method, self.path, self.query, self.headers = method, path, query, headers  # docs/compiled.md
        self.keep_alive, self.http10, self.content_length = keep_alive, http10, content_length
        self.expects_continue, self.upgrade = expects_continue, upgrade

    @property
    def wants_websocket(self) -> bool:
        """A WebSocket handshake (RFC 6455 §4.1): the server's upgrader answers it (http/upgrade.py), or 426."""
        return self.upgrade is not None and "websocket" in {t.strip() for t in self.upgrade.split(",")}


@dataclass(frozen=True, slots=True)
class HeadSeen:
    """What was read of a refused request's head: its path, and the fields parsed before the refusal (all,
    some or none). The server's own refusals are answered in its route's shape with the client's request
    id by the application (`gateway.http.Refusals`)."""

    path: str
    headers: Mapping[str, str]


def head_seen(target: bytes, fields: Mapping[str, str]) -> HeadSeen:
    return HeadSeen(target.decode("latin-1").partition("?")[0], fields)


def partial_request_line(line: bytes) -> HeadSeen | None:
    """What a request line refused before its end names (a target too long: 414): the target so far."""
    parts = line.split(b" ", 2)
    return head_seen(parts[1], {}) if len(parts) > 1 else None


class FieldCollector:
    """The field lines of one head as they are parsed: lower-case names, repeated list fields joined,
    the count, line and head size limits, and singleton fields refused when repeated."""

    __slots__ = ("fields", "lines", "size")

    def __init__(self, target_size: int) -> None:
        self.fields: dict[str, str] = {}
        self.lines = 0
        self.size = target_size

    def add(self, name: bytes, value: bytes) -> None:
        self.lines += 1
        line = len(name) + len(value)
        self.size += line + 4
        if self.lines > MAX_FIELDS or line > MAX_LINE or self.size > MAX_REQUEST_HEAD:
            raise RequestError(431, "request header fields too large")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").rstrip(" \t")  # llhttp keeps trailing OWS (RFC 9112 §5.1 drops it)
        fields = self.fields
        if key in fields:
            if key in SINGLETON_FIELDS:
                raise RequestError(400, f"repeated {key} header")
            fields[key] = f"{fields[key]}, {text}"
        else:
            fields[key] = text


def request_head(method: str, target: str, version: str, fields: dict[str, str], max_body: int) -> RequestHead:
    """The parsed head held to our policy; raises RequestError with the status to answer."""
    if version not in ("1.1", "1.0"):
        raise RequestError(505, "HTTP version not supported")
    http10 = version == "1.0"
    if not target.startswith("/") or method == "CONNECT":
        raise RequestError(400, "the request target must be a path")  # origin-form only (§3.2.1)
    if not http10 and "host" not in fields:
        raise RequestError(400, "missing Host header")
    path, _, query = target.partition("?")
    length = _content_length(fields, http10)
    if length is not None and length > max_body:
        raise RequestError(413, f"request body is larger than {max_body} bytes")
    conn = {t.strip().lower() for t in fields.get("connection", "").split(",")}
    keep_alive = "keep-alive" in conn if http10 else "close" not in conn
    upgrade = fields.get("upgrade")
    # an HTTP/1.0 client knows no 1xx: it would take `100 Continue` for its answer (RFC 9110 §10.1.1: ignored)
    expects_continue = not http10 and fields.get("expect", "").lower() == "100-continue"
    return RequestHead(method, path, query, fields, keep_alive and upgrade is None, http10, length,
                       expects_continue, None if upgrade is None else upgrade.lower())


def framing_budget(max_body: int) -> int:
    """The most chunked framing one request body may carry (see MAX_CHUNK_LINE)."""
    return max_body + 2 * MAX_REQUEST_HEAD


def body_framing_head(head: RequestHead) -> bytes:
    """A head that carries only `head`'s body framing: fed to a fresh llhttp parser, it makes llhttp
    read the bytes that follow as that body (see `RequestReader._after_upgrade`)."""
    if head.content_length is None:
        return b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    return b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % head.content_length


class LineGauge:
    """The measure of a head line whose end has not arrived, as it grows: a lower bound of what the
    line measures once whole (a field's name and value as llhttp gives them, leading whitespace of the
    value not counted; a request line's target), so a partial line is refused only when the whole line
    would be. Each byte is looked at once (`add` takes only the new bytes)."""

    __slots__ = ("cr", "phase", "request_line", "size")

    def __init__(self, *, request_line: bool) -> None:
        self.request_line = request_line
        self.phase = 0  # field: name, whitespace, value; request line: method, target, version
        self.size = 0
        self.cr = False  # the last byte is a CR, maybe the line end's (not counted)

    def add(self, data: bytes) -> None:
        if self.request_line:
            self._add_request_line(data)
            return
        if self.phase == 0:
            colon = data.find(b":")
            if colon < 0:
                self._count(data)
                return
            self.size += colon
            self.cr = False
            self.phase, data = 1, data[colon + 1:]
        if self.phase == 1:
            data = data.lstrip(b" \t")
            if not data:
                return
            self.phase = 2
        self._count(data)

    def _add_request_line(self, data: bytes) -> None:
        if self.phase == 0:
            space = data.find(b" ")
            if space < 0:
                return
            self.phase, data = 1, data[space + 1:]
        if self.phase == 1:
            space = data.find(b" ")
            if space < 0:
                self._count(data)
                return
            self.size += space
            self.phase, self.cr = 2, False

    def _count(self, data: bytes) -> None:
        if data:
            self.size += len(data)
            self.cr = data.endswith(b"\r")

    def bound(self) -> int:
        """At least this many bytes of the line count against the head's size."""
        return self.size - self.cr

    def over(self) -> bool:
        return self.bound() > (MAX_TARGET if self.request_line else MAX_LINE)

    def error(self) -> RequestError:
        if self.request_line:
            return RequestError(414, "request target too long")
        return RequestError(431, "request header fields too large")


def _content_length(fields: dict[str, str], http10: bool) -> int | None:
    te = fields.get("transfer-encoding")
    cl = fields.get("content-length")
    if te is not None:
        if cl is not None:
            raise RequestError(400, "both Transfer-Encoding and Content-Length")
        if http10:
            raise RequestError(400, "Transfer-Encoding in an HTTP/1.0 request")
        if te.lower() != "chunked":
            raise RequestError(501, "unsupported transfer-encoding")
        return None
    if cl is None:
        return 0
    # ASCII digits only: str.isdigit() alone takes "²" and other Unicode digits (llhttp refuses them too)
    if not (cl.isascii() and cl.isdigit()) or len(cl) > 18:
        raise RequestError(400, "bad Content-Length")
    return int(cl)


def continue_line() -> bytes:
    """The interim answer to a client waiting with `Expect: 100-continue` (RFC 9110 §10.1.1)."""
    return _CONTINUE


def response_head(status: int, headers: dict[str, str], date: str, *, length: int | None,
                  keep_alive: bool, http10: bool) -> bytes:
    """Status line and headers. `length` None: the body is chunked (HTTP/1.1) or runs to the close
    (HTTP/1.0). Values come from our own code and config; a line break would inject a header line."""
    text = _STATUS_TEXT.get(status) or f"{status} Status"
    lines = [("HTTP/1.0 " if http10 else "HTTP/1.1 ") + text, f"Date: {date}"]
    for name, value in headers.items():
        if "\n" in value or "\r" in value:
            raise ValueError(f"header {name} holds a line break")
        lines.append(f"{name}: {value}")
    if status == 204:
        pass  # no body and no Content-Length (RFC 9110 §8.6)
    elif length is not None:
        lines.append(f"Content-Length: {length}")
    elif not http10:
        lines.append("Transfer-Encoding: chunked")
    if not keep_alive:
        lines.append("Connection: close")
    elif http10:
        lines.append("Connection: keep-alive")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


# the size lines of chunks under 2 KiB (an SSE write is a few events): a chunk's framing is then a lookup,
# not `bytes %`'s formatting code, which a stream's first write would run cold (issue #34); ~90 KiB
_SIZE_LINES = tuple(b"%x\r\n" % n for n in range(2048))


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (never empty: a zero-size chunk ends the body)."""
    size = len(data)
    if size < 2048:
        return _SIZE_LINES[size] + data + b"\r\n"
    return b"%x\r\n%b\r\n" % (size, data)


LAST_CHUNK = b"0\r\n\r\n"
