"""HTTP/1.1 client side, sans I/O: build a request's bytes, read a response's head and body framing.

RFC 9112: a response head is a status line and header lines ending in an empty line (§2.1, §4); 1xx
answers are interim and another head follows (RFC 9110 §15.2); the body is framed by
`Transfer-Encoding: chunked` (§7.1: hex size, optional `;extensions`, CRLF, data, CRLF; a zero-size
chunk, optional trailer lines and an empty line end it), else by `Content-Length` (§6.3), else it runs
until the connection closes. 204 and 304 answers have no body. Bytes are fed as they arrive, split
anywhere; nothing here does I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import repeat

MAX_HEAD_BYTES = 64 * 1024
MAX_CHUNK_LINE = 4096
_PLAIN_CHUNK = re.compile(rb"([0-9A-Fa-f]{1,16})\r\n")
_HEX = b"0123456789abcdefABCDEF"


class HTTPError(ValueError):
    """The upstream's bytes are not HTTP/1.1 this reader can trust."""


@dataclass(slots=True)
class ResponseHead:
    status: int
    headers: dict[str, str]  # lower-case names; repeated fields joined with ", " (RFC 9110 §5.3)
    keep_alive: bool


def request_bytes(method: str, target: str, host: str, headers: dict[str, str], body: bytes) -> bytes:
    """One request, head and body in one buffer. Header names and values must not carry line breaks
    (they would inject lines): they come from config and translators, and are checked here anyway."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    for name, value in headers.items():
        if name.lower() in ("host", "content-length", "transfer-encoding", "connection"):
            continue
        line = f"{name}: {value}"
        if "\n" in line or "\r" in line:
            raise HTTPError("a header name or value holds a line break")
        lines.append(line)
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body


def parse_head(buf: bytes) -> tuple[ResponseHead, int] | None:
    """The first final response head in `buf` and where its body starts; None while incomplete."""
    start = 0
    while True:
        end = buf.find(b"\r\n\r\n", start)
        if end < 0:
            if len(buf) - start > MAX_HEAD_BYTES:
                raise HTTPError("response head too large")
            return None
        head = _head(buf[start:end])
        if not 100 <= head.status < 200:
            return head, end + 4
        start = end + 4  # an interim answer (100 Continue, 103 Early Hints): the real one follows


def _head(block: bytes) -> ResponseHead:
    lines = block.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (parts[1].isdigit() and len(parts[1]) == 3):
        raise HTTPError("bad status line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HTTPError("bad header line")
        key, value = name.lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    conn = headers.get("connection", "").lower()
    keep_alive = "close" not in conn if parts[0] == "HTTP/1.1" else "keep-alive" in conn
    return ResponseHead(int(parts[1]), headers, keep_alive)


class BodyReader:
    """The body of one response: `feed` returns the body bytes in what arrived; `done` once it is
    complete (`extra` then holds bytes past its end, which make the connection unusable)."""

    __slots__ = ("_chunk_left", "_left", "_line", "_state", "done", "extra", "until_close")

    def __init__(self, head: ResponseHead, request_method: str = "POST") -> None:
        self.done = False
        self.extra = b""
        self.until_close = False
        self._line = b""
        self._chunk_left = 0
        self._left = 0
        te = head.headers.get("transfer-encoding", "").lower()
        if head.status in (204, 304) or request_method == "HEAD":
            self._state, self.done = "length", True
        elif te:
            if te.rsplit(",", 1)[-1].strip() != "chunked":
                raise HTTPError("unsupported transfer-encoding")
            self._state = "size"
        elif "content-length" in head.headers:
            value = head.headers["content-length"]
            if not value.isdigit():
                raise HTTPError("bad content-length")
            self._state, self._left = "length", int(value)
            self.done = self._left == 0
        else:
            self._state, self.until_close = "close", True

    @classmethod
    def chunked(cls) -> BodyReader:
        """A chunked body without a response head (a request's, on the server side)."""
        return cls(ResponseHead(200, {"transfer-encoding": "chunked"}, True))

    def feed(self, data: bytes) -> bytes:
        if self.done:
            self.extra += data
            return b""
        if self._state == "length":
            body, rest = data[:self._left], data[self._left:]
            self._left -= len(body)
            if self._left == 0:
                self.done, self.extra = True, rest
            return body
        if self._state == "close":
            return data
        return self._chunked(data)

    def _chunked(self, data: bytes) -> bytes:
        out: list[bytes] = []
        pos, n = 0, len(data)
        if self._state == "size" and not self._line:
            pos = self._whole_chunks(data, out)
        while pos < n and not self.done:
            if self._state == "data":
                take = min(self._chunk_left, n - pos)
                out.append(data[pos:pos + take])
                pos += take
                self._chunk_left -= take
                if self._chunk_left == 0:
                    self._state = "data_end"
                continue
            line_end = data.find(b"\n", pos)
            if line_end < 0:
                self._line += data[pos:]
                if len(self._line) > MAX_CHUNK_LINE:
                    raise HTTPError("chunk line too long")
                break
            line = self._line + data[pos:line_end]
            self._line, pos = b"", line_end + 1
            self._on_line(line[:-1] if line.endswith(b"\r") else line)
        if self.done:
            self.extra = data[pos:]
        return b"".join(out)

    def _whole_chunks(self, data: bytes, out: list[bytes]) -> int:
        """The common read: complete `size CRLF data CRLF` chunks, all at once. Split at every CRLF,
        the read is size, data, size, data, ...: when every size is plain hex (no extension, at most
        16 digits, not 0) and every data part is as long as its size, that is exactly what the line
        parser reads (a data part holding a CRLF of its own would come out shorter than its size).
        Else one regex match per chunk. Either stops (for the general loop, which gives the same
        result) at anything else: a partial chunk, an extension, the last chunk, a bad framing."""
        parts = data.split(b"\r\n")
        pairs = (len(parts) - 1) // 2
        sizes = parts[0:2 * pairs:2]
        if b"0" in sizes:  # the last chunk: the general loop reads it and what follows
            pairs = sizes.index(b"0")
            del sizes[pairs:]
        if pairs < 2:
            return self._chunks_one_by_one(data, out)
        bodies = parts[1:2 * pairs:2]
        digits = b"".join(sizes)
        if digits.translate(None, _HEX) or not all(sizes) or max(map(len, sizes)) > 16:
            return self._chunks_one_by_one(data, out)
        lengths = list(map(int, sizes, repeat(16)))
        if lengths != list(map(len, bodies)) or 0 in lengths:
            return self._chunks_one_by_one(data, out)
        out += bodies
        return len(digits) + sum(lengths) + 4 * pairs

    def _chunks_one_by_one(self, data: bytes, out: list[bytes]) -> int:
        pos, n, match = 0, len(data), _PLAIN_CHUNK.match
        while (m := match(data, pos)) is not None:
            start = m.end()
            end = start + int(m.group(1), 16)
            if end == start or end + 2 > n or data[end:end + 2] != b"\r\n":
                break
            out.append(data[start:end])
            pos = end + 2
        return pos

    def _on_line(self, line: bytes) -> None:
        if self._state == "size":
            size = line.split(b";", 1)[0].strip()
            if not size or size.strip(b"0123456789abcdefABCDEF") or len(size) > 16:
                raise HTTPError("bad chunk size")  # int(x, 16) alone would take "0x1", "+1", "1_0"
            self._chunk_left = int(size, 16)
            self._state = "data" if self._chunk_left else "trailer"
        elif self._state == "data_end":
            if line:
                raise HTTPError("chunk data longer than its size")
            self._state = "size"
        elif not line:  # trailer section: an empty line ends the message
            self.done = True
