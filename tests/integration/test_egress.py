"""Egress through a real proxy on loopback (tests/connect_proxy.py): HTTPS_PROXY tunnels a TLS upstream
with CONNECT (trustme certificate, checked against the upstream's name inside the tunnel), NO_PROXY and
`proxy: false` bypass it, a provider's own `proxy` takes plain HTTP in absolute form; and the client
headers a provider's `forward_headers` allows reach the upstream, never the client's key."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import trustme

from gateway.config import ConfigError, parse_config
from tests.chat_scripts import text_stream
from tests.connect_proxy import ConnectProxy
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread

PATH = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]
AUTH = "Basic " + base64.b64encode(b"user:p@ss").decode()


@pytest.fixture
def proxy(servers: LoopThread) -> Iterator[ConnectProxy]:
    p = ConnectProxy()
    servers.run(p.start())
    yield p
    servers.run(p.stop())


@pytest.fixture
def tls_upstream(servers: LoopThread, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeUpstream]:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # OpenSSL's own trust-store variable
    up = FakeUpstream()
    up.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(up.tls)
    servers.run(up.start())
    yield up
    servers.run(up.stop())


def config(base_url: str, env: dict[str, str], **provider: Any) -> Any:
    return parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": f"{base_url}/v1", "api_key": "sk-upstream-SECRET",
                             "timeouts": {"connect_s": 5, "first_token_s": 10, "idle_s": 10}, **provider}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "up-model"}]}],
    }, env=env)


def start(servers: LoopThread, cfg: Any) -> GatewayServer:
    gw = GatewayServer(cfg)
    servers.run(gw.start())
    return gw


def ask(gw: GatewayServer, **headers: str) -> str:
    c = openai.OpenAI(base_url=gw.base_url, api_key="gw-client-key", max_retries=0, timeout=20,
                      default_headers=headers or None)
    return "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model="m", messages=MESSAGES, stream=True) if ch.choices)


def test_https_proxy_tunnels_a_tls_upstream_with_connect(servers: LoopThread, proxy: ConnectProxy,
                                                          tls_upstream: FakeUpstream) -> None:
    proxy.require = AUTH
    env = {"HTTPS_PROXY": f"http://user:p%40ss@127.0.0.1:{proxy.port}", "NO_PROXY": "example.com,.internal"}
    gw = start(servers, config(tls_upstream.base_url, env))
    try:
        for _ in range(2):
            tls_upstream.enqueue(PATH, text_stream(["through ", "the proxy"]))
            assert ask(gw) == "through the proxy"
        assert [(a.method, a.target, a.authorization) for a in proxy.asked] == [
            ("CONNECT", f"127.0.0.1:{tls_upstream.port}", AUTH)], "one tunnel, kept alive for both requests"
        assert len(tls_upstream.received) == 2
        for r in tls_upstream.received:
            assert "Proxy-Authorization" not in r.headers, "proxy credentials stay with the proxy"
    finally:
        servers.run(gw.stop())


def test_no_proxy_bypasses_the_proxy(servers: LoopThread, proxy: ConnectProxy, tls_upstream: FakeUpstream) -> None:
    env = {"HTTPS_PROXY": proxy.url, "NO_PROXY": "localhost, 127.0.0.1"}
    gw = start(servers, config(tls_upstream.base_url, env))
    try:
        tls_upstream.enqueue(PATH, text_stream(["direct"]))
        assert ask(gw) == "direct"
        assert proxy.asked == [] and len(tls_upstream.received) == 1
    finally:
        servers.run(gw.stop())


def test_proxy_false_on_a_provider_ignores_the_environment(servers: LoopThread, proxy: ConnectProxy,
                                                            tls_upstream: FakeUpstream) -> None:
    gw = start(servers, config(tls_upstream.base_url, {"HTTPS_PROXY": proxy.url}, proxy=False))
    try:
        tls_upstream.enqueue(PATH, text_stream(["direct"]))
        assert ask(gw) == "direct"
        assert proxy.asked == []
    finally:
        servers.run(gw.stop())


def test_a_providers_own_proxy_carries_plain_http_in_absolute_form(servers: LoopThread, proxy: ConnectProxy,
                                                                   upstream: FakeUpstream) -> None:
    gw = start(servers, config(upstream.base_url, {}, proxy=f"http://user:p%40ss@127.0.0.1:{proxy.port}"))
    try:
        upstream.enqueue(PATH, text_stream(["plain"]))
        assert ask(gw) == "plain"
        assert [(a.method, a.target, a.authorization) for a in proxy.asked] == [
            ("POST", f"http://127.0.0.1:{upstream.port}/v1/chat/completions", AUTH)]
    finally:
        servers.run(gw.stop())


def test_a_proxy_that_refuses_the_tunnel_is_a_502_naming_no_address(servers: LoopThread, proxy: ConnectProxy,
                                                                     tls_upstream: FakeUpstream) -> None:
    proxy.require = "Basic nobody-has-this"
    gw = start(servers, config(tls_upstream.base_url, {"HTTPS_PROXY": f"http://user:p%40ss@127.0.0.1:{proxy.port}"}))
    try:
        with pytest.raises(openai.APIStatusError) as err:
            ask(gw)
        assert err.value.status_code == 502
        text = str(err.value.body)
        assert str(proxy.port) not in text and "p@ss" not in text and "user" not in text
        assert tls_upstream.received == []
    finally:
        servers.run(gw.stop())


def test_allowlisted_client_headers_reach_the_upstream_and_the_key_never(servers: LoopThread,
                                                                         upstream: FakeUpstream) -> None:
    gw = start(servers, config(upstream.base_url, {}))
    try:
        upstream.enqueue(PATH, text_stream(["ok"]))
        assert ask(gw, **{"OpenAI-Organization": "org-1", "OpenAI-Project": "proj-1", "x-request-id": "req-abc",
                          "x-not-allowed": "no", "anthropic-beta": "not-for-openai"}) == "ok"
        got = {k.lower(): v for k, v in upstream.received[-1].headers.items()}
        # the client does not pick which of the provider key's organisations and projects is billed
        assert "openai-organization" not in got and "openai-project" not in got
        assert got["x-request-id"] == "req-abc"
        assert "x-not-allowed" not in got and "anthropic-beta" not in got
        assert got["authorization"] == "Bearer sk-upstream-SECRET", "the provider key, not the client's"
        assert "gw-client-key" not in str(got)
    finally:
        servers.run(gw.stop())


def test_forward_headers_replaces_the_defaults_and_refuses_credentials(servers: LoopThread,
                                                                       upstream: FakeUpstream) -> None:
    gw = start(servers, config(upstream.base_url, {}, forward_headers=["X-Tenant"]))
    try:
        upstream.enqueue(PATH, text_stream(["ok"]))
        assert ask(gw, **{"x-tenant": "t1", "OpenAI-Organization": "org-1"}) == "ok"
        got = {k.lower(): v for k, v in upstream.received[-1].headers.items()}
        assert got["x-tenant"] == "t1" and "openai-organization" not in got
    finally:
        servers.run(gw.stop())
    # an operator who lets its clients choose the organisation and project lists them
    gw = start(servers, config(upstream.base_url, {}, forward_headers=["OpenAI-Organization", "OpenAI-Project"]))
    try:
        upstream.enqueue(PATH, text_stream(["ok"]))
        assert ask(gw, **{"OpenAI-Organization": "org-1", "OpenAI-Project": "proj-1"}) == "ok"
        got = {k.lower(): v for k, v in upstream.received[-1].headers.items()}
        assert got["openai-organization"] == "org-1" and got["openai-project"] == "proj-1"
    finally:
        servers.run(gw.stop())
    with pytest.raises(ConfigError, match=r'forward_headers\[0\]: "authorization" is never forwarded'):
        config(upstream.base_url, {}, forward_headers=["Authorization"])
