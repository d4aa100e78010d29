"""What an upstream sends before its first output token is bounded (CONTRACT §4.1, §5.3; issue #27 item 4).

The held preamble is replayed at the commit, so the gateway keeps it: past `PREAMBLE_MAX_EVENTS` held
events or `PREAMBLE_MAX_BYTES` read, the attempt fails as malformed and falls back to the next deployment,
as any failure before the first token. Pings in a row are held as one (a Messages client kept alive by one
is kept alive by many), so a long wait full of pings costs no memory. Real sockets, the official SDKs,
a scripted upstream. A hostile preamble is followed by `Hang` (no token ever): the bound, not the first-token
deadline (30 s here), must end the attempt, which the attempt's outcome (`inband_error`, not
`first_token_timeout`) shows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai

from gateway.config import parse_config
from gateway.pipeline.first_token import PREAMBLE_MAX_BYTES, PREAMBLE_MAX_EVENTS
from tests import anthropic_scripts as an
from tests.chat_scripts import chunk, text_stream
from tests.fake_upstream import FakeUpstream, Hang, Script, sse
from tests.harness import GatewayServer

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
ROLE = sse(chunk({"role": "assistant"}))


def config(url: str) -> Any:
    timeouts = {"connect_s": 2, "first_token_s": 30, "idle_s": 30, "total_s": 60}
    retry = {"max_attempts": 2, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 1}
    return parse_config({
        "server": {"keepalive_after_s": 30},
        "auth": {"allow_unauthenticated": True},
        "providers": {"oa": {"type": "openai", "base_url": f"{url}/v1", "api_key": "k", "timeouts": timeouts},
                      "an": {"type": "anthropic", "base_url": url, "api_key": "k", "timeouts": timeouts}},
        "models": [{"name": "m", "retry": retry, "deployments": [{"provider": "oa", "model": "first"},
                                                                  {"provider": "oa", "model": "second"}]},
                   {"name": "c", "retry": retry, "deployments": [{"provider": "an", "model": "first"},
                                                                  {"provider": "an", "model": "second"}]}],
    }, env={})


def chat(gw: GatewayServer) -> tuple[str, str]:
    """The streamed answer's text, and the deployment that served it."""
    c = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=30)
    with c.chat.completions.with_streaming_response.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True) as raw:
        served = raw.headers["x-gateway-deployment"]
        text = "".join(ch.choices[0].delta.content or "" for ch in raw.parse() if ch.choices)
    return text, served


def messages_raw(gw: GatewayServer) -> tuple[bytes, str]:
    a = anthropic.Anthropic(base_url=gw.base_url.removesuffix("/v1"), api_key="x", max_retries=0, timeout=30)
    with a.messages.with_streaming_response.create(model="c", max_tokens=16, stream=True,
                                                   messages=[{"role": "user", "content": "hi"}]) as raw:
        return b"".join(raw.iter_bytes()), raw.headers["x-gateway-deployment"]


def test_a_preamble_of_too_many_events_fails_the_attempt_and_falls_back(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    hostile = Script([ROLE * (PREAMBLE_MAX_EVENTS + 1), sse(chunk({"content": "never"})), b"data: [DONE]\n\n"])
    # the token in the same read as the events: the events are counted all the same
    upstream.enqueue(CHAT, hostile, text_stream(["fine"]))
    assert chat(gw) == ("fine", "oa/second")
    assert [r.body["model"] for r in upstream.received] == ["first", "second"]
    assert gw.sample("llm_gateway_upstream_attempts_total", deployment="oa/first", outcome="inband_error") == 1


def test_a_preamble_up_to_the_event_bound_is_held_and_served(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    # the role chunk and the token chunk are held too: the bound is on what is held before the token
    upstream.enqueue(CHAT, Script([ROLE * (PREAMBLE_MAX_EVENTS - 1), sse(chunk({"content": "kept"})),
                                   b"data: [DONE]\n\n"]))
    assert chat(gw) == ("kept", "oa/first")


def test_a_preamble_of_too_many_bytes_fails_the_attempt_and_falls_back(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    fat = sse(chunk({"role": "assistant"}, system_fingerprint="x" * 65_000))  # few events, many bytes
    n = PREAMBLE_MAX_BYTES // len(fat) + 1
    assert n < PREAMBLE_MAX_EVENTS
    upstream.enqueue(CHAT, Script([fat] * n + [Hang()]), text_stream(["fine"]))
    assert chat(gw) == ("fine", "oa/second")
    assert gw.sample("llm_gateway_upstream_attempts_total", deployment="oa/first", outcome="inband_error") == 1


def test_comments_count_against_the_byte_bound_though_never_held(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    comments = b": keep-alive " + b"." * 1000 + b"\n\n"
    n = PREAMBLE_MAX_BYTES // len(comments) + 1
    upstream.enqueue(CHAT, Script([ROLE, comments * n, Hang()]), text_stream(["fine"]))
    assert chat(gw) == ("fine", "oa/second")
    assert gw.sample("llm_gateway_upstream_attempts_total", deployment="oa/first", outcome="inband_error") == 1


def test_pings_in_a_row_are_held_as_one(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    pings = an.event(an.ping()) * (3 * PREAMBLE_MAX_EVENTS)  # many more pings than held events may be
    upstream.enqueue(MESSAGES, Script([an.event(an.message_start()), pings,
                                       *(an.event(e) for e in an.text_block(0, ["kept"])),
                                       an.event(an.message_delta()), an.event(an.message_stop())]))
    got, served = messages_raw(gw)
    assert served == "an/first"
    names = [line[7:] for line in got.split(b"\n") if line.startswith(b"event: ")]
    assert names[:3] == [b"message_start", b"ping", b"content_block_start"], "one ping replayed for them all"
    assert b'"kept"' in got and names[-1] == b"message_stop"


def test_pings_past_the_byte_bound_fail_the_attempt_and_fall_back(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    ping = an.event(an.ping())
    hostile = Script([an.event(an.message_start()), ping * (PREAMBLE_MAX_BYTES // len(ping) + 1), Hang()])
    upstream.enqueue(MESSAGES, hostile, an.text_stream(["fine"]))
    got, served = messages_raw(gw)
    assert served == "an/second" and b'"fine"' in got
    assert [r.body["model"] for r in upstream.received] == ["first", "second"]
    assert gw.sample("llm_gateway_upstream_attempts_total", deployment="an/first", outcome="inband_error") == 1
