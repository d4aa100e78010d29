"""What the HTTP server refuses before any route runs (413, 414, 431, 408, a bad framing) and what a
WebSocket handshake is refused with, answered as the route answers its own errors: Anthropic's shape on
`/v1/messages` (docs/messages.md, Errors), OpenAI's elsewhere, with the client's `x-request-id` when the
head was read far enough to carry it (docs/reference.md, Response headers). Driven by the official
`anthropic` SDK and by raw sockets on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import orjson
import pytest

from tests.harness import GatewayServer
from tests.integration.test_inbound_http import connect, post_head, read_response

ANTHROPIC_HEAD = "anthropic-version: 2023-06-01\r\nX-Request-Id: claude-req-1\r\n"
BIG = [{"role": "user", "content": "x" * 5000}]


@pytest.fixture
def small(make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(server={"max_body_bytes": 1000})


def refusal(gw: GatewayServer, raw: bytes) -> tuple[bytes, dict[str, str], Any]:
    with connect(gw) as sock:
        sock.sendall(raw)
        status, headers, body = read_response(sock, bytearray())
    return status, headers, orjson.loads(body)


@pytest.mark.parametrize("beta", [False, True], ids=["messages", "beta-messages"])
def test_a_messages_body_over_the_limit_is_anthropics_request_too_large_for_the_sdk(small: GatewayServer,
                                                                                    beta: bool) -> None:
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{small.port}", api_key="x", max_retries=0, timeout=20)
    messages: Any = client.beta.messages if beta else client.messages  # beta: `/v1/messages?beta=true`
    with pytest.raises(anthropic.APIStatusError) as caught:
        messages.create(model="m", max_tokens=5, messages=BIG, extra_headers={"x-request-id": "claude-req-7"})
    err = caught.value
    assert err.status_code == 413 and err.response.headers["x-request-id"] == "claude-req-7"
    assert err.body == {"type": "error", "error": {"type": "request_too_large",
                                                   "message": "request body is larger than 1000 bytes"}}


CHUNKED = (b"POST /v1/messages HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n"
           + ANTHROPIC_HEAD.encode() + b"\r\n" + b"7d0\r\n" + b"x" * 2000 + b"\r\n")


@pytest.mark.parametrize("raw", [post_head("/v1/messages", 5000, ANTHROPIC_HEAD), CHUNKED],
                         ids=["content-length", "chunked"])
def test_a_413_on_messages_echoes_the_clients_request_id(small: GatewayServer, raw: bytes) -> None:
    status, headers, body = refusal(small, raw)
    assert status == b"HTTP/1.1 413 Content Too Large" and headers["connection"] == "close"
    assert headers["x-request-id"] == "claude-req-1"
    assert body == {"type": "error", "error": {"type": "request_too_large",
                                               "message": "request body is larger than 1000 bytes"}}


def test_a_413_on_chat_stays_openai_shaped_and_echoes_the_request_id(small: GatewayServer) -> None:
    status, headers, body = refusal(small, post_head("/v1/chat/completions", 5000, "X-Request-Id: chat-1\r\n"))
    assert status == b"HTTP/1.1 413 Content Too Large" and headers["x-request-id"] == "chat-1"
    assert body["error"]["code"] == "request_too_large" and body["error"]["type"] == "invalid_request_error"


MANY_FIELDS = "".join(f"X-F{i}: v\r\n" for i in range(101))
HEADS = {
    "431": (post_head("/v1/messages", 2, ANTHROPIC_HEAD + MANY_FIELDS), b"431 Request Header Fields Too Large"),
    "414": (b"POST /v1/messages?beta=" + b"a" * 9000 + b" HTTP/1.1\r\nHost: gw\r\n\r\n", b"414 URI Too Long"),
    "414-no-line-end": (b"POST /v1/messages?beta=" + b"a" * 9000, b"414 URI Too Long"),
    "400": (post_head("/v1/messages", 2, ANTHROPIC_HEAD + "Transfer-Encoding: chunked\r\n"), b"400 Bad Request"),
}


@pytest.mark.parametrize("case", list(HEADS))
def test_a_head_refused_on_messages_gets_anthropics_shape(gateway: GatewayServer, case: str) -> None:
    raw, status_text = HEADS[case]
    status, headers, body = refusal(gateway, raw)
    assert status == b"HTTP/1.1 " + status_text and headers["connection"] == "close"
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error" and set(body["error"]) == {"type", "message"}
    # the client's id when its field was read before the refusal; else one the gateway drew
    rid = headers["x-request-id"]
    assert rid == "claude-req-1" if case in ("431", "400") else len(rid) == 32 and int(rid, 16) >= 0


def test_a_slow_messages_head_gets_a_408_in_anthropics_shape(make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(server={"request_head_timeout_s": 0.2})
    # llhttp reports a field when the next one begins: the id is read, the field after it is not
    status, headers, body = refusal(gw, b"POST /v1/messages HTTP/1.1\r\nX-Request-Id: slow-1\r\nHost: gw\r\nConte")
    assert status == b"HTTP/1.1 408 Request Timeout" and headers["x-request-id"] == "slow-1"
    assert body == {"type": "error", "error": {"type": "invalid_request_error",
                                               "message": "the request head took too long"}}


UPGRADE = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
WS_REFUSALS = {
    "426-messages": (f"GET /v1/messages HTTP/1.1\r\nHost: gw\r\n{UPGRADE}Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
                     f"\r\nX-Request-Id: ws-1\r\n\r\n", b"426 Upgrade Required"),
    "400-bad-key": (f"GET /v1/responses HTTP/1.1\r\nHost: gw\r\n{UPGRADE}Sec-WebSocket-Key: short\r\n"
                    f"X-Request-Id: ws-1\r\n\r\n", b"400 Bad Request"),
}


@pytest.mark.parametrize("case", list(WS_REFUSALS))
def test_a_refused_websocket_handshake_echoes_the_clients_request_id(gateway: GatewayServer, case: str) -> None:
    raw, status_text = WS_REFUSALS[case]
    status, headers, body = refusal(gateway, raw.encode())
    assert status == b"HTTP/1.1 " + status_text and headers["x-request-id"] == "ws-1"
    if case == "426-messages":  # the route's shape: Anthropic's on /v1/messages
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    else:
        assert body["error"]["code"] == "invalid_request"
