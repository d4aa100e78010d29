"""Egress through an HTTP proxy, sans I/O: which hosts bypass it (`NO_PROXY`), the CONNECT request that
opens a tunnel for a TLS upstream (RFC 9110 §9.3.6), and a bounded reader of the proxy's reply head.

A plain-HTTP upstream goes through the proxy with the absolute-form request target (RFC 9112 §3.2.2);
a TLS one through a CONNECT tunnel, TLS to the upstream inside it, so the proxy never sees the provider
key. Proxy credentials come from the proxy URL's userinfo and travel as `Proxy-Authorization: Basic`.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from dataclasses import dataclass, field

MAX_REPLY_HEAD = 8 * 1024  # a CONNECT reply is a status line and a few fields; more is not a proxy we trust
_STATUS = re.compile(rb"^HTTP/1\.[01] ([1-5][0-9]{2})(?: [^\r\n]*)?$")


class ProxyError(ValueError):
    """The proxy refused the tunnel or answered bytes that are not an HTTP/1.1 reply head."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Proxy:
    """An http:// proxy. `authorization` (the Proxy-Authorization value) is a secret: never in a repr."""

    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        """What tells pooled connections through different proxies (or credentials) apart."""
        return f"{self.host}:{self.port}#{hash(self.authorization) if self.authorization else ''}"


def basic_authorization(user: str, password: str) -> str:
    """RFC 7617: `Basic base64(user:password)`, UTF-8 (what curl and requests send)."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def parse_no_proxy(value: str) -> tuple[str, ...]:
    """`NO_PROXY`: comma- or space-separated hosts, `.domain`s, `host:port`s, IPs, CIDRs, or `*`."""
    return tuple(e.strip().lower() for e in re.split(r"[,\s]+", value) if e.strip())


def bypasses(host: str, port: int, no_proxy: tuple[str, ...]) -> bool:
    """Whether `host:port` is reached directly (curl's rules: `example.com` and `.example.com` both match
    the domain and its subdomains; an IP entry or CIDR matches addresses; `*` matches everything)."""
    host = host.lower().strip("[]").rstrip(".")
    address = _ip(host)
    for entry in no_proxy:
        if entry == "*":
            return True
        name, entry_port = _split_port(entry)
        if entry_port is not None and entry_port != port:
            continue
        if address is not None and "/" in name:
            try:
                if address in ipaddress.ip_network(name, strict=False):
                    return True
            except ValueError:
                continue
            continue
        name = name.lstrip(".").rstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _split_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [::1]:8080 or [::1]
        inner, _, rest = entry[1:].partition("]")
        return inner, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        if port.isdigit():
            return name, int(port)
    return entry, None


def authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def connect_request(host: str, port: int, proxy: Proxy) -> bytes:
    """The CONNECT request for a tunnel to `host:port` (authority-form target, RFC 9112 §3.2.3)."""
    target = authority(host, port)
    if any(c in target for c in "\r\n ") or (proxy.authorization and any(c in proxy.authorization for c in "\r\n")):
        raise ProxyError("a CONNECT target or credential holds a line break")
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    if proxy.authorization:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class ConnectReply:
    """Reads the proxy's reply to CONNECT, a read at a time, up to MAX_REPLY_HEAD bytes. `feed` returns
    True once a 2xx head is complete; raises ProxyError for any other status, an oversized or broken
    head, or bytes after the head (nothing may come before our TLS ClientHello)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.status = 0

    def feed(self, data: bytes) -> bool:
        self._buf += data
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_REPLY_HEAD:
                raise ProxyError("the proxy's reply head is too large")
            return False
        if end + 4 > MAX_REPLY_HEAD:
            raise ProxyError("the proxy's reply head is too large")
        status_line = bytes(self._buf[: self._buf.find(b"\r\n")])
        m = _STATUS.match(status_line)
        if m is None:
            raise ProxyError("the proxy did not answer HTTP/1.1")
        self.status = int(m.group(1))
        if not 200 <= self.status < 300:
            raise ProxyError(f"the proxy refused the tunnel (HTTP {self.status})", self.status)
        if len(self._buf) > end + 4:
            raise ProxyError("the proxy sent bytes after its reply head")
        return True
