"""What a client sees at the API's edges: x-ratelimit-* on a limited key's answers across a minute of
requests (the runtime's clock driven, no sleeping), `models.retrieve`, x-request-id on every answer,
opt-in CORS, and the log line of a request whose model was never resolved."""

from __future__ import annotations

import http.client
from collections.abc import Callable, Iterator
from typing import Any

import openai
import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests.chat_scripts import completion, text_stream
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer
from tests.integration.test_inbound_http import connect, post_head, read_response
from tests.redis_server import RedisServer

PATH = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
# the gateway's up-front estimate: the body's bytes (the SDK's compact JSON) / 4, rounded up, + max_tokens
RESERVED = -(-len(orjson.dumps({"messages": HI, "model": "m", "max_tokens": 100})) // 4) + 100
USED = 18  # what completion() reports: prompt 11 + completion 7, settled after each answer
T0 = 60.0 * 29_000_000 + 15.0  # 15 s into a minute


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def config(url: str, redis_url: str | None = None, **server: Any) -> Any:
    return parse_config({
        "server": server,
        "auth": {"keys": [{"name": "team-a", "key": "key-a", "rpm": 3, "tpm": 10_000},
                          {"name": "open", "key": "key-open", "models": ["m"]}]},
        "state": ({"backend": "redis", "redis_url": redis_url, "timeout_ms": 1000} if redis_url
                  else {"backend": "memory"}),
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x"}]},
                   {"name": "hidden", "deployments": [{"provider": "up", "model": "y"}]}],
    }, env={})


def sdk(gw: GatewayServer, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0, timeout=20)


def limits_at(gw: GatewayServer, now: float) -> tuple[int, dict[str, str]]:
    assert gw.app is not None
    gw.app.runtime.clock = lambda: now
    try:
        raw = sdk(gw).chat.completions.with_raw_response.create(model="m", messages=HI, max_tokens=100)
        status, headers = raw.status_code, raw.headers
    except openai.APIStatusError as exc:
        status, headers = exc.status_code, exc.response.headers
    return status, {k: v for k, v in headers.items() if k.startswith("x-ratelimit-")}


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_ratelimit_headers_across_a_minute(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
                                           request: pytest.FixtureRequest, backend: str) -> None:
    redis_url = request.getfixturevalue("redis").url if backend == "redis" else None
    gw = make_gateway(config(upstream.base_url, redis_url))
    upstream.defaults[PATH] = completion("ok")
    # (seconds after T0, status, remaining requests, reset requests, remaining tokens)
    # sliding window: at 45 s a new minute starts and the last one weighs 1.0, then less and less
    expected = [
        (0, 200, 2, "1m45s", 10_000 - RESERVED),
        (10, 200, 1, "1m35s", 10_000 - USED - RESERVED),
        (20, 200, 0, "1m25s", 10_000 - 2 * USED - RESERVED),
        (30, 429, 0, "1m15s", 10_000 - 3 * USED),
        (45, 429, 0, "1m0s", 10_000 - 3 * USED),  # next minute, previous weighs 1.0: still full
        (75, 200, 0, "1m30s", 10_000 - int(3 * USED * 0.5 + RESERVED + 0.999)),  # 3 * 0.5 + 1 = 2.5
        (135, 200, 1, "1m30s", 10_000 - int(USED * 0.5 + RESERVED + 0.999)),  # 1 * 0.5 + 1 = 1.5
        (240, 200, 2, "1m45s", 10_000 - RESERVED),  # two quiet minutes: the window is empty again
    ]
    for offset, status, remaining, reset, tokens in expected:
        got_status, got = limits_at(gw, T0 + offset)
        assert (got_status, got) == (status, {
            "x-ratelimit-limit-requests": "3", "x-ratelimit-remaining-requests": str(remaining),
            "x-ratelimit-reset-requests": reset, "x-ratelimit-limit-tokens": "10000",
            "x-ratelimit-remaining-tokens": str(tokens), "x-ratelimit-reset-tokens": reset,
        }), f"at +{offset}s"


def test_an_unlimited_key_gets_no_ratelimit_headers(upstream: FakeUpstream,
                                                    make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, completion("ok"))
    raw = sdk(gw, "key-open").chat.completions.with_raw_response.create(model="m", messages=HI)
    assert not [k for k in raw.headers if k.startswith("x-ratelimit-")]


def test_models_retrieve(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    model = sdk(gw).models.retrieve("m")
    assert (model.id, model.object) == ("m", "model")
    with pytest.raises(openai.NotFoundError) as err:
        sdk(gw, "key-open").models.retrieve("hidden")  # exists, but not for this key: not disclosed
    assert err.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        sdk(gw).models.retrieve("nope")
    with pytest.raises(openai.AuthenticationError):
        sdk(gw, "wrong").models.retrieve("m")


def raw_request(gw: GatewayServer, method: str, path: str, headers: dict[str, str] | None = None,
                body: bytes | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/healthz", None), ("GET", "/readyz", None), ("GET", "/v1/models", None),
    ("GET", "/v1/models/m", None), ("GET", "/nowhere", None), ("DELETE", "/v1/models", None),
    ("POST", PATH, b"{not json"), ("POST", PATH, b'{"model": "nope", "messages": []}'),
    ("POST", PATH, b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'),
])
def test_every_answer_carries_a_request_id(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
                                           method: str, path: str, body: bytes | None) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, completion("ok"))
    resp = raw_request(gw, method, path, {"Authorization": "Bearer key-a", "Content-Type": "application/json"}, body)
    assert len(resp.headers.get("x-request-id", "")) >= 16
    given = raw_request(gw, method, path, {"Authorization": "Bearer key-a", "x-request-id": "mine-1"}, body)
    assert given.headers["x-request-id"] == "mine-1"


def test_a_request_refused_before_any_handler_carries_a_request_id(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    import socket

    gw = make_gateway(config(upstream.base_url))
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")  # HTTP/1.1 without Host: refused by the reader
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := s.recv(65536)):
            answer += chunk
    head = answer.split(b"\r\n\r\n")[0].decode().lower()
    assert head.startswith("http/1.1 400") and "\r\nx-request-id: " in head


def test_cors_is_off_unless_configured(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    resp = raw_request(gw, "GET", "/v1/models", {"Origin": "https://app.example.com", "Authorization": "Bearer key-a"})
    assert "access-control-allow-origin" not in resp.headers


def test_cors_preflight_and_answers(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, cors={"allow_origins": ["https://app.example.com"]}))
    pre = raw_request(gw, "OPTIONS", PATH, {"Origin": "https://app.example.com",
                                             "Access-Control-Request-Method": "POST",
                                             "Access-Control-Request-Headers": "authorization, x-stainless-os"})
    assert pre.status == 204
    assert pre.headers["access-control-allow-origin"] == "https://app.example.com"
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert pre.headers["access-control-allow-headers"] == "authorization, x-stainless-os"
    assert pre.headers["access-control-max-age"] == "600" and "content-length" not in pre.headers
    upstream.enqueue(PATH, completion("ok"))
    answer = raw_request(gw, "POST", PATH, {"Origin": "https://app.example.com", "Authorization": "Bearer key-a"},
                         b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
    assert answer.status == 200 and answer.headers["access-control-allow-origin"] == "https://app.example.com"
    assert "x-ratelimit-remaining-requests" in answer.headers["access-control-expose-headers"]
    other = raw_request(gw, "OPTIONS", PATH, {"Origin": "https://evil.example",
                                               "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in other.headers


@pytest.mark.parametrize(("origin", "allowed"), [("https://app.example.com", True), ("https://evil.example", False)])
def test_a_request_the_server_refuses_carries_cors_fields_for_an_allowed_origin(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], origin: str, allowed: bool) -> None:
    """A body over max_body_bytes from a browser page: the 413 lacked Access-Control-Allow-Origin, so the
    page saw a network error instead of `request_too_large` (docs/reference.md, `server.cors`)."""
    gw = make_gateway(config(upstream.base_url, max_body_bytes=1000, cors={"allow_origins": ["https://app.example.com"]}))
    with connect(gw) as sock:
        sock.sendall(post_head(PATH, 5000, f"Origin: {origin}\r\nAuthorization: Bearer key-a\r\n"))
        status, headers, body = read_response(sock, bytearray())
    assert status == b"HTTP/1.1 413 Content Too Large" and orjson.loads(body)["error"]["code"] == "request_too_large"
    assert headers["vary"] == "Origin"
    if allowed:
        assert headers["access-control-allow-origin"] == origin
        assert "x-request-id" in headers["access-control-expose-headers"]
    else:
        assert "access-control-allow-origin" not in headers


def test_an_unresolved_model_is_logged_with_a_marker_and_the_reason(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    with capture_logs() as logs:
        with pytest.raises(openai.NotFoundError):
            sdk(gw).chat.completions.create(model="no-such-model-\n-secret", messages=HI)
        with pytest.raises(openai.AuthenticationError):
            sdk(gw, "wrong").chat.completions.create(model="m", messages=HI)
    lines = [e for e in logs if e["event"] == "request"]
    assert [(e["model"], e["model_unresolved"]) for e in lines] == [
        ("(unresolved)", "model_not_found"), ("(unresolved)", "invalid_api_key")]
    # the name as sent is logged (CONTRACT §7), cut; never a label; an unauthenticated body is not read
    assert [e["requested_model"] for e in lines] == ["no-such-model-\n-secret", None]
    assert gw.sample("llm_gateway_requests_total", api="chat", model="unknown", stream="false",
                     outcome="client_error", key="team-a") == 1  # the valid key, on a 4xx too


def test_a_streamed_answer_carries_the_ratelimit_headers(upstream: FakeUpstream,
                                                         make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, text_stream(["a", "b"]))
    with sdk(gw).chat.completions.with_streaming_response.create(model="m", messages=HI, stream=True) as resp:
        assert resp.headers["x-ratelimit-remaining-requests"] == "2"
        assert resp.headers["x-request-id"]
        assert "".join(resp.iter_lines())
