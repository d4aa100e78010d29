"""An upstream error that quotes the prompt or the model's output (a provider's 400 echoing part of the
request, an in-stream error quoting generated text), on a model whose redaction profile masks what it
quotes (an e-mail address by `pii`, a codename by a custom rule): through every path where an upstream
text reaches a client — an error status on a stream and on a body, an error inside a 200 body, an in-band
error before and after the first token, for chat, Responses and Messages, and WebSocket mode's events —
the client and the log lines get it masked as the profile masks an answer, never in clear. A model
without a profile gets the upstream's text as it came but for our secrets (the `secrets` rules only)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import upstream_errors
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.integration.test_responses_websocket import KEY, raw_socket, turn
from tests.upstream_errors import PATHS, ROUTES, Quoting

EMAIL, CODENAME = "jane.quiet@example.org", "Project Nightingale"
ECHO = f"your message to {EMAIL} about {CODENAME} was refused"
LEAKS = (EMAIL, "jane.quiet", CODENAME, "Nightingale")
MASKS = ("[REDACTED:email]", "[REDACTED:codename]")
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}


def config(url: str) -> Any:
    one = {"retry": {"max_attempts": 1}}
    return parse_config({
        "server": {"keepalive_after_s": 30},
        "auth": {"keys": [{"name": "k", "key": KEY}]},
        "providers": {"oa": {"type": "openai", "base_url": f"{url}/v1", "api_key": "sk-up", "timeouts": TIMEOUTS},
                      "an": {"type": "anthropic", "base_url": url, "api_key": "sk-up", "timeouts": TIMEOUTS}},
        "redaction": {"profiles": {"strict": {"rules": ["secrets", "pii"],
                                              "custom": [{"name": "codename", "pattern": "Project\\s+Nightingale"}]}}},
        "models": [{"name": "m", "deployments": [{"provider": "oa", "model": "up-model"}], "redaction": "strict",
                    **one},
                   {"name": "c", "deployments": [{"provider": "an", "model": "claude-dep"}], "redaction": "strict",
                    **one},
                   {"name": "plain", "deployments": [{"provider": "oa", "model": "up-model"}], **one}],
    }, env={})


@pytest.fixture
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    with capture_logs() as captured:
        yield captured


def assert_masked(text: str) -> None:
    for leak in LEAKS:
        assert leak not in text, f"{leak!r} reached the client in clear: {text[:2000]}"


# ---- what the upstream answers, per API and path (`tests.upstream_errors`): its error quotes the prompt

QUOTE = Quoting(ECHO, code=f"bad {CODENAME}", param=EMAIL)


def ask(gw: GatewayServer, api: str, path: str, model: str) -> str:
    return upstream_errors.ask(gw, api, path, model, KEY)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("api", sorted(ROUTES))
def test_an_upstream_error_quoting_what_the_profile_masks_reaches_no_client_byte_or_log_line_in_clear(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        logs: list[MutableMapping[str, Any]], api: str, path: str) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(ROUTES[api], QUOTE.script(api, path))

    got = ask(gw, api, path, "c" if api == "messages" else "m")

    assert len(upstream.received) == 1
    if api == "chat" and path == "after":  # chat ends with an error of its own: no upstream text
        assert "after the first token" in got
    else:
        assert any(m in got for m in MASKS), f"the upstream's reason reached the client, masked: {got[:2000]}"
    assert_masked(got)
    servers.run(wait_until(lambda: any(e["event"] == "request" for e in logs), 5.0))
    assert_masked(repr(logs))


def test_a_model_without_a_profile_gets_the_upstream_text_as_it_came(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue("/v1/chat/completions", QUOTE.script("chat", "status_body"))
    got = ask(gw, "chat", "status_body", "plain")
    assert got.startswith("400 ") and ECHO in got, "only our secrets are scrubbed there, not the profile's texts"


@pytest.mark.parametrize("path", ["status_stream", "inband_before", "after"])
def test_websocket_mode_events_get_the_error_masked(upstream: FakeUpstream,
                                                    make_gateway: Callable[..., GatewayServer], path: str) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue("/v1/responses", QUOTE.script("responses", path))
    with raw_socket(gw) as ws:
        events = turn(ws, {"model": "m", "input": "hi"})
    got = orjson.dumps(events).decode()
    assert events[-1]["type"] == "error", events
    assert all(m in got for m in MASKS), got
    assert_masked(got)
