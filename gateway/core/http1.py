"""HTTP/1.1 client side, sans I/O: a request's bytes, and the types its response is read into.

A response's framing (RFC 9112 §4, §6.3, §7.1) is read by llhttp under our policy in
`gateway/upstream/framing.py`: the pure core may not import a C extension, so only the shared types live
here.
"""

from __future__ import annotations

from dataclasses import dataclass


class HTTPError(ValueError):
    """The upstream's bytes are not HTTP/1.1 this reader can trust."""


@dataclass(slots=True)
class ResponseHead:
    status: int
    headers: dict[str, str]  # lower-case names; repeated fields joined with ", " (RFC 9110 §5.3)
    keep_alive: bool

    def __init__(self, status: int, headers: dict[str, str], keep_alive: bool) -> None:  # docs/compiled.md
        self.status, self.headers, self.keep_alive = status, headers, keep_alive


def request_bytes(method: str, target: str, host: str, headers: dict[str, str], body: bytes) -> bytes:
    """One request, head and body in one buffer (see `request_head`)."""
    return request_head(method, target, host, headers, len(body)) + body


def request_head(method: str, target: str, host: str, headers: dict[str, str], content_length: int) -> bytes:
    """A request's head, up to its blank line. Header names and values must not carry line breaks
    (they would inject lines): they come from config and translators, and are checked here anyway."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"Content-Length: {content_length}"]
    for name, value in headers.items():
        if name.lower() in ("host", "content-length", "transfer-encoding", "connection"):
            continue
        line = f"{name}: {value}"
        if "\n" in line or "\r" in line:
            raise HTTPError("a header name or value holds a line break")
        lines.append(line)
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n"
