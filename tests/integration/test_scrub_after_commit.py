"""An upstream that fails in-band after the first token, echoing our provider key and a bearer token in its
error (CONTRACT §4.3, §5.3), against the real gateway on loopback with the official `openai` SDK: neither
reaches a client byte or a log line, the text already sent stands, and the stream ends with exactly one
error event. The attempt loop scrubs failures before the commit; these are the ones after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import openai
import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from gateway.core.sse import SSEDecoder
from tests.chat_scripts import chunk
from tests.fake_upstream import FakeUpstream, Script, sse
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.responses_scripts import Answer, number, stream_script

# no built-in `secrets` rule knows this shape: only the exact match on the configured key can mask it
PROVIDER_KEY = "PLAINupstreamKEYnotVendorShaped42"
BEARER = "tok.QuietlyEchoed-9f8e7d6c5b4a"
ECHO = f"Incorrect API key provided: {PROVIDER_KEY}. We saw Authorization: Bearer {BEARER}"
LEAKS = (PROVIDER_KEY, BEARER, "PLAINupstream", "QuietlyEchoed")


def config(url: str, *, hold: bool = False) -> Any:
    guard = [{"name": "terms", "type": "terms", "terms": ["forbidden"], "stage": "output", "mode": "hold"}]
    return parse_config({
        "server": {"keepalive_after_s": 30},
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1", "api_key": PROVIDER_KEY,
                             "timeouts": {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "up-model"}],
                    "guardrails": ["terms"] if hold else []}],
        "guardrails": guard if hold else [],
    }, env={})


def sdk(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)


@pytest.fixture
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    with capture_logs() as captured:
        yield captured


def logged(servers: LoopThread, logs: list[MutableMapping[str, Any]], n: int) -> str:
    """The captured log lines once `n` request lines are in: the request line is written just after
    the client has read the end of its stream, and nothing signals it."""
    servers.run(wait_until(lambda: sum(e["event"] == "request" for e in logs) >= n, 5.0))
    return repr(logs)


def assert_clean(text: str) -> None:
    for leak in LEAKS:
        assert leak not in text


def raw_stream(gw: GatewayServer, api: str, body: dict[str, Any]) -> tuple[str, bytes]:
    """The headers and every body byte the client got, read through the SDK's raw access."""
    c = sdk(gw)
    post = c.chat.completions if api == "chat" else c.responses
    with post.with_streaming_response.create(**body) as raw:
        assert raw.status_code == 200
        return str(raw.headers), b"".join(raw.iter_bytes())


# ---- /v1/chat/completions

CHAT_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
CHAT_ERROR = {"message": ECHO, "type": f"Bearer {BEARER}", "param": PROVIDER_KEY, "code": f"bad_{PROVIDER_KEY}"}
CHAT_FAILURES = {
    "error_object": sse({"error": CHAT_ERROR}),
    # OpenRouter's shape: a chunk with finish_reason "error" that carries the error beside its choices
    "finish_error": sse({**chunk({"content": ""}, "error"), "error": CHAT_ERROR}),
}


def chat_script(failure: bytes) -> Script:
    return Script([sse(chunk({"role": "assistant", "content": ""})), sse(chunk({"content": "Partial "})),
                   sse(chunk({"content": "text"})), failure, sse(chunk({"content": "never"})), b"data: [DONE]\n\n"])


@pytest.mark.parametrize("kind", sorted(CHAT_FAILURES))
def test_chat_error_after_the_first_token_never_shows_our_credentials(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        logs: list[MutableMapping[str, Any]], kind: str) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue("/v1/chat/completions", chat_script(CHAT_FAILURES[kind]), chat_script(CHAT_FAILURES[kind]))

    headers, got = raw_stream(gw, "chat", CHAT_BODY)
    events = [ev.data for ev in SSEDecoder().feed(got)]
    errors = [orjson.loads(d) for d in events if d.startswith(b'{"error"')]
    assert len(errors) == 1 and events[-1].startswith(b'{"error"'), "exactly one error event, and last"
    assert b"[DONE]" not in got and b"never" not in got
    assert_clean(headers + got.decode())

    text: list[str] = []
    with pytest.raises(openai.APIError) as err:
        for ch in sdk(gw).chat.completions.create(**CHAT_BODY):  # type: ignore[call-overload]
            text += [c.delta.content or "" for c in ch.choices]
    assert "".join(text) == "Partial text", "the text already sent stands"
    assert_clean(str(err.value) + repr(err.value.body))
    assert_clean(logged(servers, logs, 2))


# ---- /v1/responses

RESP_ERROR = {"type": f"Bearer {BEARER}", "code": f"bad_{PROVIDER_KEY}", "message": ECHO, "param": PROVIDER_KEY}


def responses_failure(kind: str) -> dict[str, Any]:
    if kind == "nested_error":
        return {"type": "error", "error": RESP_ERROR}
    if kind == "flat_error":
        return {"type": "error", "code": f"bad_{PROVIDER_KEY}", "message": ECHO, "param": PROVIDER_KEY}
    failed = Answer(rid="resp_up").message(["Partial ", "text"]).body("failed")
    return {"type": "response.failed", "response": {**failed, "error": RESP_ERROR,
                                                    "instructions": f"echoed Bearer {BEARER}"}}


def responses_script(kind: str) -> Script:
    events = Answer(rid="resp_up").message(["Partial ", "text", " never"]).stream_events()
    if kind == "duplicate_member":
        # the echo in the first of two `message` members: a parser keeps the last, so the parsed event
        # looks clean while its bytes are not (why the relay re-encodes a failure event, never forwards it)
        bad = (b'event: error\ndata: {"type":"error","sequence_number":6,"error":{"message":' + orjson.dumps(ECHO)
               + b',"message":"Rate limit reached","type":"tokens","code":"rate_limit_exceeded","param":null}}\n\n')
        script = stream_script(number(events))
        script.parts = [*script.parts[:6], bad, *script.parts[6:]]
        return script
    if kind == "deep_nesting":
        # an error object nested as deep as a JSON parser goes, the echo at the bottom: scrubbing must
        # neither overflow nor let it through
        deep = b"[" * 1000 + orjson.dumps(ECHO) + b"]" * 1000
        bad = (b'event: error\ndata: {"type":"error","sequence_number":6,"error":{"message":' + orjson.dumps(ECHO)
               + b',"type":"tokens","code":"rate_limit_exceeded","param":null,"details":' + deep + b"}}\n\n")
        script = stream_script(number(events))
        script.parts = [*script.parts[:6], bad, *script.parts[6:]]
        return script
    return stream_script(number([*events[:6], responses_failure(kind), *events[6:]]))


@pytest.mark.parametrize("kind", ["nested_error", "flat_error", "response_failed", "duplicate_member",
                                  "deep_nesting"])
def test_responses_error_after_the_first_token_never_shows_our_credentials(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        logs: list[MutableMapping[str, Any]], kind: str) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue("/v1/responses", responses_script(kind), responses_script(kind))
    body = {"model": "m", "input": "hi", "stream": True}

    headers, got = raw_stream(gw, "responses", body)
    events = [orjson.loads(ev.data) for ev in SSEDecoder().feed(got)]
    types = [e["type"] for e in events]
    assert types.count("error") == 1 and types[-1] == "error", "exactly one error event, and last"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert "response.completed" not in types and b" never" not in got
    if kind == "response_failed":
        assert types[-2] == "response.failed", "the upstream's failure is forwarded, scrubbed"
        assert events[-2]["response"]["error"]["message"].startswith("Incorrect API key provided: [REDACTED:")
    assert_clean(headers + got.decode())

    seen: list[Any] = []
    with pytest.raises(openai.APIError) as err:
        for event in sdk(gw).responses.create(model="m", input="hi", stream=True):
            seen.append(event)
    assert "".join(e.delta for e in seen if e.type == "response.output_text.delta") == "Partial text"
    if kind != "duplicate_member":
        assert "Incorrect API key provided: [REDACTED:" in str(err.value), "the upstream's reason stays, masked"
    assert_clean(str(err.value) + repr(err.value.body) + repr(seen))
    assert_clean(logged(servers, logs, 2))


def test_responses_error_after_the_first_token_with_a_hold_guardrail_never_shows_our_credentials(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        logs: list[MutableMapping[str, Any]]) -> None:
    # with a hold guardrail the client has seen nothing of the lifecycle: only our own error, which
    # names the upstream's code
    gw = make_gateway(config(upstream.base_url, hold=True))
    upstream.enqueue("/v1/responses", responses_script("nested_error"))
    headers, got = raw_stream(gw, "responses", {"model": "m", "input": "hi", "stream": True})
    events = [orjson.loads(ev.data) for ev in SSEDecoder().feed(got)]
    assert [e["type"] for e in events] == ["error"]
    assert "bad_[REDACTED:" in events[0]["message"]
    assert_clean(headers + got.decode())
    assert_clean(logged(servers, logs, 1))
