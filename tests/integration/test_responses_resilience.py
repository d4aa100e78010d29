"""Responses failures through the real gateway with the openai SDK: before the first token an in-band
`error` or `response.failed` falls back invisibly (one clean lifecycle from the second deployment);
after it the SDK raises and the partial text stands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from tests.fake_upstream import Close, FakeUpstream, Pause, json_script
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.responses_scripts import Answer, failed, number, rate_limit_error, stream_script

FIRST, SECOND = "/v1/responses", "/second/v1/responses"
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}


def two_deployments(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
                    **server: Any) -> GatewayServer:
    providers = {name: {"type": "openai", "base_url": f"{upstream.base_url}{prefix}/v1", "api_key": "sk-up",
                        "timeouts": TIMEOUTS} for name, prefix in (("up", ""), ("second", "/second"))}
    models = [{"name": "m", "deployments": [{"provider": "up", "model": "up-model"},
                                            {"provider": "second", "model": "second-model"}],
               "retry": {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1}}]
    return make_gateway(providers=providers, models=models,
                        server={"keepalive_after_s": 30, **server})


def client(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="k", max_retries=0, timeout=20)


def preamble_then(failure: dict[str, Any]) -> list[dict[str, Any]]:
    """A first attempt that gets as far as an empty message part, then fails in-band."""
    events = Answer(rid="resp_first").message(["never sent"]).stream_events()[:4]
    return number([*events, failure])


FAILURES = {
    "nested_error": rate_limit_error(0, nested=True),
    "flat_error": rate_limit_error(0, nested=False),
    "response_failed": failed(0, rid="resp_first"),
}


@pytest.mark.parametrize("kind", sorted(FAILURES))
def test_inband_failure_before_first_token_falls_back_invisibly(upstream: FakeUpstream,
                                                                make_gateway: Callable[..., GatewayServer],
                                                                kind: str) -> None:
    gw = two_deployments(upstream, make_gateway)
    good = Answer(rid="resp_second").message(["Hello ", "from ", "the second"]).stream_events()
    upstream.enqueue(FIRST, stream_script(preamble_then(FAILURES[kind])))
    upstream.enqueue(SECOND, stream_script(good))
    with client(gw).responses.with_streaming_response.create(model="m", input="x", stream=True) as raw:
        assert raw.headers["x-gateway-deployment"] == "second/second-model"
        assert raw.headers["x-gateway-attempts"] == "2"
        got = list(raw.parse())
    assert [e.type for e in got] == [e["type"] for e in good], "one lifecycle, nothing of the first attempt"
    assert [e.sequence_number for e in got] == list(range(len(good)))
    assert {e.response.id for e in got if hasattr(e, "response")} == {"resp_second"}
    assert "".join(e.delta for e in got if e.type == "response.output_text.delta") == "Hello from the second"
    assert gw.sample("llm_gateway_upstream_attempts_total", model="m", deployment="up/up-model",
                     outcome="inband_error") == 1
    upstream.enqueue(FIRST, stream_script(preamble_then(FAILURES[kind])))
    upstream.enqueue(SECOND, stream_script(good))
    with client(gw).responses.stream(model="m", input="x") as stream:  # the helper after a fallback
        assert stream.get_final_response().output_text == "Hello from the second"


def test_quota_error_in_band_moves_on_and_client_error_passes_through(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = two_deployments(upstream, make_gateway)
    quota = {"type": "error", "error": {"type": "insufficient_quota", "code": "insufficient_quota",
                                        "message": "You exceeded your current quota", "param": None}}
    upstream.enqueue(FIRST, stream_script(preamble_then(quota)))
    upstream.enqueue(SECOND, stream_script(Answer().message(["ok"]).stream_events()))
    events = list(client(gw).responses.create(model="m", input="x", stream=True))
    assert events[-1].type == "response.completed"
    assert gw.sample("llm_gateway_upstream_attempts_total", model="m", deployment="up/up-model",
                     outcome="quota") == 1
    upstream.enqueue(FIRST, stream_script(preamble_then(failed(0, code="invalid_prompt"))))
    with pytest.raises(openai.BadRequestError) as info:
        client(gw).responses.create(model="m", input="x", stream=True)
    assert info.value.code == "invalid_prompt"
    assert len(upstream.bodies(SECOND)) == 1, "a client error is neither retried nor sent elsewhere"


def partial_then(failure: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Two deltas reach the client, then the upstream fails (or just stops)."""
    events = Answer().message(["Partial ", "text"]).stream_events()[:6]
    return number(events + ([failure] if failure else []))


@pytest.mark.parametrize("kind", sorted(FAILURES))
def test_failure_after_first_token_raises_and_the_partial_text_stands(servers: LoopThread, upstream: FakeUpstream,
                                                                      make_gateway: Callable[..., GatewayServer],
                                                                      kind: str) -> None:
    gw = two_deployments(upstream, make_gateway)
    upstream.enqueue(FIRST, stream_script(partial_then(FAILURES[kind])))
    seen: list[Any] = []
    with pytest.raises(openai.APIError) as info:
        for event in client(gw).responses.create(model="m", input="x", stream=True):
            seen.append(event)
    assert "".join(e.delta for e in seen if e.type == "response.output_text.delta") == "Partial text"
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    if kind == "response_failed":
        assert seen[-1].type == "response.failed", "the upstream's failure event is forwarded"
    assert info.value.code == ("server_error" if kind == "response_failed" else "rate_limit_exceeded")
    assert upstream.bodies(SECOND) == [], "nothing is retried after the first token"
    assert gw.sample("llm_gateway_stream_failures_total", model="m", deployment="up/up-model",
                     reason="inband_error") == 1
    # the request is counted when its handler returns, which may be just after the client saw the end
    servers.run(wait_until(lambda: gw.sample("llm_gateway_requests_total", api="responses", model="m",
                                             stream="true", outcome="upstream_error") == 1))


def test_stream_helper_raises_after_the_first_token(upstream: FakeUpstream,
                                                    make_gateway: Callable[..., GatewayServer]) -> None:
    gw = two_deployments(upstream, make_gateway)
    upstream.enqueue(FIRST, stream_script(partial_then(failed(0))))
    text: list[str] = []
    with pytest.raises(openai.APIError), client(gw).responses.stream(model="m", input="x") as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                text.append(event.delta)
    assert "".join(text) == "Partial text"


@pytest.mark.parametrize("ending", ["eof", "close"])
def test_upstream_that_stops_after_the_first_token_ends_with_an_error(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], ending: str) -> None:
    gw = two_deployments(upstream, make_gateway)
    upstream.enqueue(FIRST, stream_script(partial_then(None), tail=[Close()] if ending == "close" else []))
    seen: list[Any] = []
    with pytest.raises(openai.APIError) as info:
        for event in client(gw).responses.create(model="m", input="x", stream=True):
            seen.append(event)
    assert "".join(e.delta for e in seen if e.type == "response.output_text.delta") == "Partial text"
    assert info.value.code == "upstream_error"
    assert "127.0.0.1" not in info.value.message


def test_every_attempt_failing_before_the_first_token_is_an_http_error(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = two_deployments(upstream, make_gateway)
    upstream.enqueue(FIRST, stream_script(preamble_then(rate_limit_error(0))))
    upstream.enqueue(SECOND, json_script({"error": {"message": "busy", "type": "server_error", "code": None}}, 503))
    with pytest.raises(openai.APIStatusError) as info:
        client(gw).responses.create(model="m", input="x", stream=True)
    assert info.value.status_code == 502 and info.value.body["code"] == "upstream_error"  # type: ignore[index]


def test_keepalive_while_waiting_then_one_error_event(upstream: FakeUpstream,
                                                      make_gateway: Callable[..., GatewayServer]) -> None:
    gw = two_deployments(upstream, make_gateway, keepalive_after_s=0.05)
    slow = preamble_then(rate_limit_error(0))
    upstream.enqueue(FIRST, stream_script(slow[:2], tail=[Pause(0.3), *stream_script(slow[2:]).parts]))
    upstream.enqueue(SECOND, json_script({"error": {"message": "busy", "type": "server_error", "code": None}}, 503))
    with client(gw).responses.with_streaming_response.create(model="m", input="x", stream=True) as raw:
        body = raw.read()
    assert body.startswith(b": keepalive"), "headers went out early, with a comment"
    assert body.count(b"event: ") == 1 and b'"sequence_number":0' in body
    with pytest.raises(openai.APIError):  # and the SDK raises on that one event
        upstream.enqueue(FIRST, stream_script(slow[:2], tail=[Pause(0.3), *stream_script(slow[2:]).parts]))
        upstream.enqueue(SECOND, json_script({"error": {"message": "busy", "type": "server_error"}}, 503))
        list(client(gw).responses.create(model="m", input="x", stream=True))
