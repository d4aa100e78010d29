"""HTTP/1.1 server side, sans I/O: our policy on top of the parsed request, and response heads.

The bytes are framed by llhttp (`gateway/inbound/reader.py`); what llhttp accepts is then held to
this server's stricter policy, field by field (RFC 9112, RFC 9110):
- the request target is origin-form only (RFC 9112 §3.2.1): no absolute-form, no CONNECT;
- exactly one `Host` in an HTTP/1.1 request (RFC 9112 §3.2: a server MUST answer 400 otherwise);
- `Transfer-Encoding` only `chunked` (§6.1: we decode nothing else: 501), never with `Content-Length`
  (§6.1 lets a server refuse it; a gateway must not let two readings of one message through) and never
  in HTTP/1.0 (§6.1);
- singleton fields at most once (a second `Content-Length`, `Host`, `Authorization`… is two readings);
- at most MAX_FIELDS field lines, MAX_LINE bytes a line, MAX_REQUEST_HEAD bytes a head (431), and a
  body of at most `max_body` bytes (413, from `Content-Length` before the body is read).
HTTP/1.0 connections close after the response unless the client asked for `keep-alive`. Nothing
here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_REQUEST_HEAD = 64 * 1024
MAX_LINE = 8 * 1024
MAX_FIELDS = 100
# Fields whose second copy is a second reading of the request (RFC 9110 §5.3: only list-valued fields
# may repeat); `Content-Length` is one (llhttp refuses its repetition too).
SINGLETON_FIELDS = frozenset(("host", "content-length", "content-type", "transfer-encoding", "authorization",
                              "api-key", "x-api-key", "expect", "anthropic-version"))
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# RFC 9110 §15 reason phrases of the statuses this gateway answers with (clients ignore the phrase, §4)
_REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 401: "Unauthorized", 402: "Payment Required",
            403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
            413: "Content Too Large", 414: "URI Too Long", 422: "Unprocessable Content",
            429: "Too Many Requests", 431: "Request Header Fields Too Large", 499: "Client Closed Request",
            500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway",
            503: "Service Unavailable", 504: "Gateway Timeout", 505: "HTTP Version Not Supported"}


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
    if not target.startswith("/"):
        raise RequestError(400, "the request target must be a path")  # origin-form only (§3.2.1)
    if not http10 and "host" not in fields:
        raise RequestError(400, "missing Host header")
    path, _, query = target.partition("?")
    length = _content_length(fields, http10)
    if length is not None and length > max_body:
        raise RequestError(413, f"request body is larger than {max_body} bytes")
    conn = {t.strip().lower() for t in fields.get("connection", "").split(",")}
    keep_alive = "keep-alive" in conn if http10 else "close" not in conn
    return RequestHead(method, path, query, fields, keep_alive, http10, length,
                       fields.get("expect", "").lower() == "100-continue")


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
    reason = _REASONS.get(status, "Status")
    lines = [f"HTTP/1.{0 if http10 else 1} {status} {reason}", f"Date: {date}"]
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


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (never empty: a zero-size chunk ends the body)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
