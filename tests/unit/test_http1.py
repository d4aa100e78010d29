"""A request's bytes (RFC 9112 §3). The response side is read by llhttp under our policy:
tests/unit/test_upstream_framing.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.http1 import HTTPError, request_bytes


def test_request_bytes_and_header_injection() -> None:
    raw = request_bytes("POST", "/v1/chat/completions?a=1", "api.example.com", {"Authorization": "Bearer k",
                        "content-length": "999"}, b"{}")
    assert raw == (b"POST /v1/chat/completions?a=1 HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 2\r\n"
                   b"Authorization: Bearer k\r\n\r\n{}")
    with pytest.raises(HTTPError):
        request_bytes("POST", "/", "h", {"X-Evil": "a\r\nInjected: 1"}, b"")


@pytest.mark.parametrize("name", ["Host", "Transfer-Encoding", "Connection", "CONTENT-LENGTH"])
def test_framing_headers_are_ours(name: str) -> None:
    """The caller cannot frame the request differently from its body (RFC 9112 §6.1, §6.3)."""
    raw = request_bytes("POST", "/", "h", {name: "evil"}, b"abc")
    assert raw == b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"


_TEXT = st.text(alphabet="ab:\r\n ", max_size=6)


@given(st.dictionaries(st.text(alphabet="xyz\r\n", min_size=1, max_size=4), _TEXT, max_size=5))
def test_any_line_break_in_any_field_is_refused(headers: dict[str, str]) -> None:
    """Whichever field carries a CR or an LF, alone or in a pair, in its name or its value, the request
    is refused; a request without one carries each field as one line."""
    broken = any("\r" in n + v or "\n" in n + v for n, v in headers.items())
    try:
        raw = request_bytes("POST", "/", "h", headers, b"")
    except HTTPError:
        assert broken
        return
    assert not broken
    lines = raw.split(b"\r\n")
    assert all(f"{n}: {v}".encode() in lines for n, v in headers.items())
