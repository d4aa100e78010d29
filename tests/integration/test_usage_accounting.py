"""What a key is charged for a stream that did not end with the provider's usage (docs/extensions.md, "A
stream without usage"): a client that went away mid-stream, a Messages client on a translated upstream
that reports no usage, an Anthropic stream cut after `message_start` (which counts the input only), end
to end with the official SDKs against a scripted upstream. The charge is read back where budgets read it
(`GET /v1/gateway/spend`) and on the request's log line."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.chat_scripts import chunk, text_stream
from tests.fake_upstream import Close, FakeUpstream, Hang, Script, sse
from tests.harness import GatewayServer, LoopThread, wait_until

KEY = "gw-key-usage"
CHAT = "/p/v1/chat/completions"
MESSAGES = "/c/v1/messages"
PROMPT = [{"role": "user", "content": "tell me a long story " * 20}]
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
PRICE = {"input": 1_000_000, "output": 1_000_000}  # a dollar a token: the spend is the tokens charged


def config(url: str) -> Any:
    return parse_config({
        "auth": {"keys": [{"name": "team", "key": KEY, "tpm": 1_000_000}]},
        "providers": {"p": {"type": "openai", "base_url": f"{url}/p/v1", "api_key": "kp", "timeouts": TIMEOUTS},
                      "c": {"type": "anthropic", "base_url": f"{url}/c", "api_key": "kc", "timeouts": TIMEOUTS}},
        "models": [{"name": "m", "deployments": [{"provider": "p", "model": "model-p", "price": PRICE}]},
                   {"name": "claude", "deployments": [{"provider": "c", "model": "claude-c", "price": PRICE}]}],
    }, env={})


def spent(gw: GatewayServer) -> float:
    req = urllib.request.Request(f"{gw.base_url}/gateway/spend", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return float(json.loads(resp.read())["spend_usd"])


def request_line(servers: LoopThread, logs: list[dict[str, Any]]) -> dict[str, Any]:
    servers.run(wait_until(lambda: any(e["event"] == "request" for e in logs), 5.0))
    return next(e for e in logs if e["event"] == "request")


def test_a_client_that_goes_away_mid_stream_is_charged_for_what_was_spent(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(CHAT, Script([sse(chunk({"role": "assistant", "content": ""})), sse(chunk({"content": "x" * 400})),
                                   Hang()]))
    sdk = openai.OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0, timeout=20)
    with capture_logs() as logs:
        stream = sdk.chat.completions.create(model="m", messages=PROMPT, stream=True)  # type: ignore[arg-type]
        next(iter(stream))
        stream.close()  # the client goes away: the upstream has read the prompt and written 100 tokens
        line = request_line(servers, logs)
    assert line["outcome"] == "cancelled" and line["estimated"] is True
    assert line["output_tokens"] == 100 and line["input_tokens"] > 100
    assert spent(gw) == line["input_tokens"] + line["output_tokens"] == line["cost_usd"]
    # the token metrics keep provider-reported counts only, and the upstream did not omit its usage
    assert gw.sample("llm_gateway_tokens_total", model="m", provider="p", key="team", type="output") == 0
    assert gw.sample("llm_gateway_usage_missing_total", model="m", provider="p") == 0


def claude(gw: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key=KEY, max_retries=0, timeout=20)


def test_a_messages_stream_from_a_chat_upstream_without_usage_is_charged_an_estimate(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """The translation's `message_start` and `message_delta` must carry counts; their zeros are none."""
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(CHAT, text_stream(["x" * 400], usage="none"))
    with capture_logs() as logs:
        with claude(gw).messages.stream(model="m", max_tokens=500, messages=PROMPT) as s:  # type: ignore[arg-type]
            assert s.get_final_text() == "x" * 400
        line = request_line(servers, logs)
    assert line["outcome"] == "ok" and line["estimated"] is True
    assert line["output_tokens"] == 100 and line["input_tokens"] > 100
    assert spent(gw) == line["input_tokens"] + line["output_tokens"]
    assert gw.sample("llm_gateway_usage_missing_total", model="m", provider="p") == 1


@pytest.mark.parametrize("cut", ["upstream", "client"])
def test_an_anthropic_stream_cut_after_message_start_is_charged_its_input_and_the_output_that_came(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], cut: str) -> None:
    """`message_start` counts the whole input and one output token; the 100 tokens' worth of text that came
    after it are charged as an estimate, the input as Anthropic counted it (cache reads included)."""
    gw = make_gateway(config(upstream.base_url))
    events = [a.message_start(), *a.text_block(0, ["x" * 400])[:2]]
    upstream.enqueue(MESSAGES, a.stream(events, tail=[Close() if cut == "upstream" else Hang()]))
    with capture_logs() as logs:
        with claude(gw).messages.stream(model="claude", max_tokens=500, messages=PROMPT) as s:  # type: ignore[arg-type]
            if cut == "client":
                next(e for e in s if e.type == "content_block_delta")
            else:
                with pytest.raises(anthropic.APIError):
                    s.get_final_text()
        line = request_line(servers, logs)
    assert line["estimated"] is True and line["outcome"] == ("cancelled" if cut == "client" else "upstream_error")
    assert (line["input_tokens"], line["cached_tokens"], line["output_tokens"]) == (30, 10, 100)
    assert spent(gw) == 130
    # the metrics keep what the provider reported: its input, and the one output token of message_start
    assert gw.sample("llm_gateway_tokens_total", model="claude", provider="c", key="team", type="input") == 30
    assert gw.sample("llm_gateway_tokens_total", model="claude", provider="c", key="team", type="output") == 1
