"""A non-stream request whose upstream answers with a stream anyway (SSE to `stream: false`), carrying
an in-band rate-limit error: every attempt rate-limited is a 429, as on a streamed request (issue #55,
finding 7; docs/reference.md, Errors), on chat, Responses and Messages (Anthropic's shape), classified
from the error's structured fields. And the same kind of answer without an error is served as the body
the client asked for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests import responses_scripts as r
from tests.chat_scripts import completion
from tests.fake_upstream import FakeUpstream, Script, sse
from tests.harness import GatewayServer

KEY = "gw-key-team-0001"
CHAT, RESP, ANT = "/oai/v1/chat/completions", "/oai/v1/responses", "/ant/v1/messages"
HI = [{"role": "user", "content": "hi"}]
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 30}
RETRY = {"max_attempts": 2, "per_deployment": 2, "initial_backoff_ms": 1, "max_backoff_ms": 5}
SSE_HEADERS = {"Content-Type": "text/event-stream", "retry-after-ms": "1"}
CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "x"}


def config(url: str) -> Any:
    return parse_config({
        "auth": {"keys": [{"name": "team", "key": KEY}]},
        "providers": {
            "oai": {"type": "openai", "base_url": f"{url}/oai/v1", "api_key": "sk-oai-SECRET", "timeouts": TIMEOUTS},
            "claude": {"type": "anthropic", "base_url": f"{url}/ant", "api_key": "sk-ant-SECRET",
                       "timeouts": TIMEOUTS},
        },
        "models": [{"name": "m", "retry": RETRY, "deployments": [{"provider": "oai", "model": "x"}]},
                   {"name": "claude", "retry": RETRY, "deployments": [{"provider": "claude", "model": "c"}]}],
    }, env={})


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(config(upstream.base_url))


def oai(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=KEY, timeout=20)  # the SDK's default retries


def claude(gw: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key=KEY, timeout=20)


def chat_rate_limited() -> Script:
    error = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
    return Script([sse({**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}), sse(error)],
                  headers=SSE_HEADERS)


def responses_rate_limited() -> Script:
    answer = r.Answer()
    return Script([r.frame(e) for e in r.number(answer.events[:2])] + [r.frame(r.rate_limit_error(2))],
                  headers=SSE_HEADERS)


def messages_rate_limited() -> Script:
    script = a.stream([a.message_start(), a.error_event("rate_limit_error", "Number of requests too high")])
    script.headers = {**script.headers, "retry-after-ms": "1"}
    return script


def test_chat(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.defaults[CHAT] = chat_rate_limited()
    with pytest.raises(openai.RateLimitError) as info:
        oai(gw).chat.completions.create(model="m", messages=HI)  # type: ignore[arg-type]
    err = info.value
    assert (err.status_code, err.code, err.type) == (429, "rate_limit_exceeded", "rate_limit_error")
    assert err.response.headers["retry-after"] == "1"  # the upstream's 1 ms, in whole seconds
    assert err.response.headers["x-should-retry"] == "false"
    assert len(upstream.bodies(CHAT)) == 2, "the model's 2 attempts, no SDK retry"


def test_responses(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.defaults[RESP] = responses_rate_limited()
    with pytest.raises(openai.RateLimitError) as info:
        oai(gw).responses.create(model="m", input="hi")
    err = info.value
    assert (err.status_code, err.code, err.type) == (429, "rate_limit_exceeded", "rate_limit_error")
    assert err.response.headers["x-should-retry"] == "false"
    assert len(upstream.bodies(RESP)) == 2


def test_messages(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.defaults[ANT] = messages_rate_limited()
    with pytest.raises(anthropic.RateLimitError) as info:
        claude(gw).messages.create(model="claude", max_tokens=5, messages=HI)  # type: ignore[arg-type]
    assert info.value.status_code == 429
    body: Any = info.value.body
    assert (body["type"], body["error"]["type"]) == ("error", "rate_limit_error")  # Anthropic's shape
    assert info.value.response.headers["x-should-retry"] == "false"
    assert len(upstream.bodies(ANT)) == 2


def test_a_whole_stream_to_a_body_request_is_the_body(upstream: FakeUpstream, gw: GatewayServer) -> None:
    """Read through the API's stream core either way, so an answer without an error is the body."""
    upstream.enqueue(CHAT, Script([sse({**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                                      "content": "hel"}}]}),
                                   sse({**CHUNK, "choices": [{"index": 0, "delta": {"content": "lo"},
                                                              "finish_reason": "stop"}]}),
                                   b"data: [DONE]\n\n"]))
    answer = oai(gw).chat.completions.create(model="m", messages=HI)  # type: ignore[arg-type]
    assert (answer.choices[0].message.content, answer.choices[0].finish_reason) == ("hello", "stop")
    upstream.enqueue(ANT, a.text_stream(["hel", "lo"]))
    message = claude(gw).messages.create(model="claude", max_tokens=5, messages=HI)  # type: ignore[arg-type]
    assert [b.text for b in message.content if b.type == "text"] == ["hello"]


def test_a_stream_after_a_learned_body_is_read_as_a_stream(upstream: FakeUpstream, gw: GatewayServer) -> None:
    """A deployment that answered a stream request with a body is asked for bodies (learned); if it then
    streams with an in-band rate limit, that is a 429 too, not a malformed body."""
    upstream.enqueue(CHAT, completion("learned"))
    first = oai(gw).chat.completions.create(model="m", messages=HI, stream=True)  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in first if c.choices) == "learned"
    upstream.defaults[CHAT] = chat_rate_limited()
    with pytest.raises(openai.RateLimitError) as info:
        list(oai(gw).chat.completions.create(model="m", messages=HI, stream=True))  # type: ignore[arg-type]
    assert (info.value.status_code, info.value.code) == (429, "rate_limit_exceeded")
    assert [b.get("stream") for b in upstream.bodies(CHAT)] == [True, None, None], "asked for bodies, as learned"
