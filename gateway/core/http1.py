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


def request_bytes(method: str, target: str, host: str, headers: dict[str, str], body: bytes) -> bytes:
    """One request, head and body in one buffer. Header names and values must not carry line breaks
    (they would inject lines): they come from config and translators, and are checked here anyway."""
    fields = [f"{name}: {value}" for name, value in headers.items() if name.lower() not in _FRAMING]
    if fields:
        joined = "\r\n".join(fields)
        # one scan for all fields: the joints are the only line breaks a well-formed block holds
        if joined.count("\n") >= len(fields) or joined.count("\r") >= len(fields):
            raise HTTPError("a header name or value holds a line break")
        return (f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n{joined}\r\n\r\n"
                .encode("latin-1") + body)
    return f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n".encode("latin-1") + body


# the fields that frame the request: ours alone (RFC 9112 §6.1, §6.3, §9.6)
_FRAMING = frozenset(("host", "content-length", "transfer-encoding", "connection"))
