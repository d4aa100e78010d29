"""The pure egress-proxy core: NO_PROXY matching, the CONNECT request, the bounded reply reader fed at
every split."""

from __future__ import annotations

import pytest

from gateway.core.proxy import (
    MAX_REPLY_HEAD,
    ConnectReply,
    Proxy,
    ProxyError,
    basic_authorization,
    bypasses,
    connect_request,
    parse_no_proxy,
)
from tests.unit.reads import splits


@pytest.mark.parametrize(("host", "port", "no_proxy", "direct"), [
    ("api.openai.com", 443, "openai.com", True),
    ("api.openai.com", 443, ".openai.com", True),
    ("openai.com", 443, ".openai.com", True),
    ("notopenai.com", 443, "openai.com", False),
    ("api.openai.com", 443, "*", True),
    ("10.1.2.3", 443, "10.0.0.0/8", True),
    ("11.1.2.3", 443, "10.0.0.0/8", False),
    ("127.0.0.1", 8080, "127.0.0.1:9090", False),
    ("127.0.0.1", 9090, "127.0.0.1:9090", True),
    ("::1", 443, "[::1]", True),
    ("API.Example.COM", 443, "example.com", True),
    ("example.com", 443, "", False),
])
def test_no_proxy(host: str, port: int, no_proxy: str, direct: bool) -> None:
    assert bypasses(host, port, parse_no_proxy(no_proxy)) is direct


def test_connect_request_carries_the_credentials_and_no_line_break() -> None:
    p = Proxy("proxy", 3128, basic_authorization("u", "p@ss"))
    assert connect_request("api.openai.com", 443, p) == (
        b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n"
        b"Proxy-Authorization: Basic dTpwQHNz\r\n\r\n")
    assert connect_request("::1", 443, Proxy("p", 1)).startswith(b"CONNECT [::1]:443 HTTP/1.1\r\n")
    with pytest.raises(ProxyError):
        connect_request("evil\r\nX: y", 443, p)
    assert "dTpwQHNz" not in repr(p), "credentials never in a repr"


REPLY = b"HTTP/1.1 200 Connection established\r\nProxy-Agent: test\r\n\r\n"


@pytest.mark.parametrize("reads", [[REPLY], *splits(REPLY)])
def test_a_2xx_reply_opens_the_tunnel_at_any_split(reads: list[bytes]) -> None:
    r = ConnectReply()
    results = [r.feed(d) for d in reads]
    assert results[-1] is True and not any(results[:-1]) and r.status == 200


@pytest.mark.parametrize(("reply", "status"), [
    (b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n", 407),
    (b"HTTP/1.1 502 Bad Gateway\r\n\r\n", 502),
    (b"SSH-2.0-OpenSSH\r\n\r\n", None),
    (REPLY + b"\x16\x03", None),  # bytes before our ClientHello
])
def test_a_refusal_or_a_broken_reply_is_a_proxy_error(reply: bytes, status: int | None) -> None:
    for reads in [[reply], *splits(reply)]:
        r = ConnectReply()
        with pytest.raises(ProxyError) as err:
            for d in reads:
                r.feed(d)
        assert err.value.status == status


def test_the_reply_head_is_bounded() -> None:
    r = ConnectReply()
    r.feed(b"HTTP/1.1 200 OK\r\n")
    with pytest.raises(ProxyError, match="too large"):
        for _ in range(MAX_REPLY_HEAD):
            r.feed(b"X-Pad: 1\r\n")
