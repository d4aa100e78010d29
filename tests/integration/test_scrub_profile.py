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

import anthropic
import openai
import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import anthropic_scripts as an
from tests.chat_scripts import chunk, error_script
from tests.fake_upstream import FakeUpstream, Script, json_script, sse
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.integration.test_responses_websocket import KEY, raw_socket, turn
from tests.responses_scripts import Answer, number, stream_script

EMAIL, CODENAME = "jane.quiet@example.org", "Project Nightingale"
ECHO = f"your message to {EMAIL} about {CODENAME} was refused"
LEAKS = (EMAIL, "jane.quiet", CODENAME, "Nightingale")
MASKS = ("[REDACTED:email]", "[REDACTED:codename]")
USER = [{"role": "user", "content": "hi"}]
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


# ---- what the upstream answers, per API and path: its error quotes the prompt

OPENAI_ERROR = {"message": ECHO, "type": "invalid_request_error", "param": EMAIL, "code": f"bad {CODENAME}"}


def chat_script(path: str) -> Script:
    if path in ("status_stream", "status_body"):
        return error_script(400, f"bad {CODENAME}", ECHO, param=EMAIL)
    if path == "inband_body":
        return json_script({"error": OPENAI_ERROR})
    if path == "inband_before":
        return Script([sse(chunk({"role": "assistant", "content": ""})), sse({"error": OPENAI_ERROR})])
    return Script([sse(chunk({"role": "assistant", "content": ""})), sse(chunk({"content": "Partial "})),
                   sse(chunk({"content": "text"})), sse({"error": OPENAI_ERROR}), b"data: [DONE]\n\n"])


def responses_script(path: str) -> Script:
    if path in ("status_stream", "status_body"):
        return error_script(400, f"bad {CODENAME}", ECHO, param=EMAIL)
    if path == "inband_body":
        return json_script({"id": "resp_up", "object": "response", "status": "failed", "output": [],
                            "error": {"code": f"bad {CODENAME}", "message": ECHO}})
    events = Answer(rid="resp_up").message(["Partial ", "text", " never"]).stream_events()
    failure = {"type": "error", "error": OPENAI_ERROR}
    cut = 2 if path == "inband_before" else 6  # after response.in_progress, or after two text deltas
    return stream_script(number([*events[:cut], failure]))


def messages_script(path: str) -> Script:
    if path in ("status_stream", "status_body"):
        return an.error_body(400, "invalid_request_error", ECHO)
    failure = {"type": "error", "error": {"type": "invalid_request_error", "message": ECHO}}
    if path == "inband_body":
        return json_script(failure)
    start = [an.message_start(), an.ping()]
    if path == "inband_before":
        return an.stream([*start, failure])
    return an.stream([*start, *an.text_block(0, ["Partial ", "text"])[:3], failure])


def read(call: Callable[[], Any]) -> str:
    try:
        with call() as raw:
            return f"{raw.status_code} " + b"".join(raw.iter_bytes()).decode()
    except (openai.APIStatusError, anthropic.APIStatusError) as err:
        return f"{err.status_code} {err.response.text}"


def ask(gw: GatewayServer, api: str, path: str, model: str) -> str:
    stream = path not in ("status_body", "inband_body")
    if api == "messages":
        a = anthropic.Anthropic(base_url=gw.base_url.removesuffix("/v1"), api_key=KEY, max_retries=0, timeout=20)
        return read(lambda: a.messages.with_streaming_response.create(
            model=model, max_tokens=64, messages=USER, stream=stream))  # type: ignore[arg-type]
    o = openai.OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0, timeout=20)
    if api == "chat":
        return read(lambda: o.chat.completions.with_streaming_response.create(
            model=model, messages=USER, stream=stream))  # type: ignore[arg-type]
    return read(lambda: o.responses.with_streaming_response.create(model=model, input="hi", stream=stream))


ROUTES = {"chat": ("/v1/chat/completions", chat_script), "responses": ("/v1/responses", responses_script),
          "messages": ("/v1/messages", messages_script)}
PATHS = ["status_stream", "status_body", "inband_body", "inband_before", "after"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("api", sorted(ROUTES))
def test_an_upstream_error_quoting_what_the_profile_masks_reaches_no_client_byte_or_log_line_in_clear(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
        logs: list[MutableMapping[str, Any]], api: str, path: str) -> None:
    gw = make_gateway(config(upstream.base_url))
    route, script = ROUTES[api]
    upstream.enqueue(route, script(path))

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
    upstream.enqueue("/v1/chat/completions", chat_script("status_body"))
    got = ask(gw, "chat", "status_body", "plain")
    assert got.startswith("400 ") and ECHO in got, "only our secrets are scrubbed there, not the profile's texts"


@pytest.mark.parametrize("path", ["status_stream", "inband_before", "after"])
def test_websocket_mode_events_get_the_error_masked(upstream: FakeUpstream,
                                                    make_gateway: Callable[..., GatewayServer], path: str) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue("/v1/responses", responses_script(path))
    with raw_socket(gw) as ws:
        events = turn(ws, {"model": "m", "input": "hi"})
    got = orjson.dumps(events).decode()
    assert events[-1]["type"] == "error", events
    assert all(m in got for m in MASKS), got
    assert_masked(got)
