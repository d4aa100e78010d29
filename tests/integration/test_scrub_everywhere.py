"""A hostile upstream that echoes every configured secret (the provider key, a `providers.<name>.headers`
value, the proxy's credentials) in its error texts, through every path where an upstream text can reach
a client: an error status on a stream and on a body, an error inside a 200 body, an in-band error before
and after the first token,
after the first token under a `hold` guardrail, count_tokens, and a proxy's 407 — for each client API
(chat, Responses, Messages), with the official SDKs on loopback and the traffic through a real proxy.
No secret in any client byte or log line (CONTRACT §5.3), and the upstream's reason still shows, masked.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import anthropic
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import anthropic_scripts as an
from tests import upstream_errors
from tests.connect_proxy import ConnectProxy
from tests.fake_upstream import FakeUpstream, json_script
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.upstream_errors import ROUTES, USER, Quoting, read

# shapes no built-in `secrets` rule knows: only the exact masks of the configured values can catch them
KEY = "PLAINupstreamKEYnotVendorShaped42"
HEADER = "APIMsubscriptionVALUE0042"
PROXY_USER, PROXY_PASS = "proxyuser", "PROXYpassWORD77"
PROXY_B64 = base64.b64encode(f"{PROXY_USER}:{PROXY_PASS}".encode()).decode()
ECHO = (f"Incorrect API key provided: {KEY}; subscription {HEADER}; we saw Proxy-Authorization: Basic "
        f"{PROXY_B64} ({PROXY_USER}:{PROXY_PASS}) and Authorization: Bearer {KEY}")
LEAKS = (KEY, HEADER, PROXY_PASS, PROXY_B64, "PLAINupstream", "APIMsubscription", "PROXYpass")
MASKED = "[REDACTED:"


def config(url: str, proxy_port: int) -> Any:
    proxy = f"http://{PROXY_USER}:{PROXY_PASS}@127.0.0.1:{proxy_port}"
    provider = {"base_url": url, "api_key": KEY, "headers": {"Ocp-Apim-Subscription-Key": HEADER},
                "proxy": proxy, "timeouts": {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}}
    one = {"retry": {"max_attempts": 1}}
    return parse_config({
        "server": {"keepalive_after_s": 30},
        "auth": {"allow_unauthenticated": True},
        "providers": {"oa": {"type": "openai", **provider, "base_url": f"{url}/v1"},
                      "an": {"type": "anthropic", **provider}},
        "models": [{"name": "m", "deployments": [{"provider": "oa", "model": "up-model"}], **one},
                   {"name": "m-hold", "deployments": [{"provider": "oa", "model": "up-model"}],
                    "guardrails": ["hold"], **one},
                   {"name": "c", "deployments": [{"provider": "an", "model": "claude-dep"}], **one},
                   {"name": "c-hold", "deployments": [{"provider": "an", "model": "claude-dep"}],
                    "guardrails": ["hold"], **one}],
        "guardrails": [{"name": "hold", "type": "terms", "terms": ["forbidden"], "stage": "output", "mode": "hold"}],
    }, env={})


@pytest.fixture
def proxy(servers: LoopThread) -> Iterator[ConnectProxy]:
    p = ConnectProxy()
    servers.run(p.start())
    yield p
    servers.run(p.stop())


@pytest.fixture
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    with capture_logs() as captured:
        yield captured


def assert_clean(text: str) -> None:
    for leak in LEAKS:
        assert leak not in text


# ---- what the hostile upstream answers, per API and path (`tests.upstream_errors`); the Anthropic error's
# type is what the relay names in its own error under a hold guardrail

QUOTE = Quoting(ECHO, code=f"bad_{KEY}", param=HEADER, kind="server_error", event_type=f"overloaded_{KEY}",
                instructions=True)
PATHS = [*upstream_errors.PATHS, "after_hold"]  # after the first token, under a hold guardrail


def ask(gw: GatewayServer, api: str, path: str) -> str:
    model = ("c" if api == "messages" else "m") + ("-hold" if path == "after_hold" else "")
    return upstream_errors.ask(gw, api, path, model, "x")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("api", sorted(ROUTES))
def test_no_configured_secret_reaches_a_client_byte_or_a_log_line(
        servers: LoopThread, upstream: FakeUpstream, proxy: ConnectProxy,
        make_gateway: Callable[..., GatewayServer], logs: list[MutableMapping[str, Any]], api: str,
        path: str) -> None:
    gw = make_gateway(config(upstream.base_url, proxy.port))
    upstream.enqueue(ROUTES[api], QUOTE.script(api, path))

    got = ask(gw, api, path)

    assert len(upstream.received) == 1 and proxy.asked, "the request went through the proxy to the upstream"
    assert upstream.received[0].headers["Ocp-Apim-Subscription-Key"] == HEADER
    if api == "chat" and path.startswith("after"):  # chat ends with an error of its own: no upstream text
        assert "after the first token" in got
    else:
        assert MASKED in got, "the upstream's reason reached the client, masked: the echo went through the scrubber"
    if path == "after":
        assert "Partial " in got, "the text already sent stands"
    assert_clean(got)
    servers.run(wait_until(lambda: any(e["event"] == "request" for e in logs), 5.0))
    assert_clean(repr(logs))


def test_count_tokens_never_shows_a_configured_secret(
        servers: LoopThread, upstream: FakeUpstream, proxy: ConnectProxy,
        make_gateway: Callable[..., GatewayServer], logs: list[MutableMapping[str, Any]]) -> None:
    gw = make_gateway(config(upstream.base_url, proxy.port))
    upstream.enqueue("/v1/messages/count_tokens", an.error_body(400, "invalid_request_error", ECHO))
    a = anthropic.Anthropic(base_url=gw.base_url.removesuffix("/v1"), api_key="x", max_retries=0, timeout=20)
    got = read(lambda: a.messages.with_raw_response.count_tokens(model="c", messages=USER))  # type: ignore[arg-type]
    assert got.startswith("400 ") and MASKED in got and len(upstream.received) == 1
    assert_clean(got)
    assert_clean(repr(logs))


@pytest.mark.parametrize("api", sorted(ROUTES))
def test_a_proxy_407_that_quotes_our_credentials_is_a_502_without_them(
        servers: LoopThread, upstream: FakeUpstream, proxy: ConnectProxy,
        make_gateway: Callable[..., GatewayServer], logs: list[MutableMapping[str, Any]], api: str) -> None:
    proxy.require, proxy.echo = "Basic someone-else", True
    gw = make_gateway(config(upstream.base_url, proxy.port))
    got = ask(gw, api, "status_body")
    assert got.startswith("502 "), "our credentials failed: the next deployment, then 502 (CONTRACT §5.3)"
    assert "407" in got and proxy.asked and upstream.received == []
    assert_clean(got)
    servers.run(wait_until(lambda: any(e["event"] == "request" for e in logs), 5.0))
    assert_clean(repr(logs))


def test_a_secret_only_in_a_header_value_is_masked_in_a_passed_through_error(
        upstream: FakeUpstream, proxy: ConnectProxy, make_gateway: Callable[..., GatewayServer]) -> None:
    # the exact masks, not the rules, do this: the value has no known secret's shape
    gw = make_gateway(config(upstream.base_url, proxy.port))
    upstream.enqueue("/v1/chat/completions", json_script({"error": {"message": f"bad subscription {HEADER}",
                                                                     "type": "invalid_request_error"}}, 400))
    got = ask(gw, "chat", "status_body")
    assert "bad subscription [REDACTED:provider_key]" in got and HEADER not in got
