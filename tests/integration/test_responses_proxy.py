"""The Responses API through the real gateway, driven by the official `openai` SDK, against a scripted
upstream on 127.0.0.1: streams, helpers, non-stream bodies, and the same answer read both ways."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from tests import anthropic_scripts as a
from tests.fake_upstream import FakeUpstream, Hang, json_script
from tests.harness import GatewayServer, LoopThread, wait_until
from tests.responses_scripts import MODEL, Answer, body_script, number, stream_script

PATH = "/v1/responses"


def client(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="client-key-123", max_retries=0, timeout=20)


def rich_answer() -> Answer:
    return (Answer().reasoning(["Thinking ", "about it."]).message(["Hel", "lo, ", "world!"])
            .function_call("weather", "call_1", ['{"city":', '"Oslo"}']))


def test_stream_events_pass_through_with_one_gapless_lifecycle(upstream: FakeUpstream,
                                                               gateway: GatewayServer) -> None:
    events = rich_answer().stream_events()
    upstream.enqueue(PATH, stream_script(events))
    with client(gateway).responses.with_streaming_response.create(
            model="m", input="Say hello", stream=True, extra_body={"custom_field": {"x": 1}}) as raw:
        assert raw.headers["x-gateway-deployment"] == "up/up-model"
        assert raw.headers["x-gateway-attempts"] == "1"
        got = list(raw.parse())
    assert [e.type for e in got] == [e["type"] for e in events]
    assert [e.sequence_number for e in got] == list(range(len(events)))
    text = "".join(e.delta for e in got if e.type == "response.output_text.delta")
    assert text == "Hello, world!"
    summary = "".join(e.delta for e in got if e.type == "response.reasoning_summary_text.delta")
    assert summary == "Thinking about it."
    args = "".join(e.delta for e in got if e.type == "response.function_call_arguments.delta")
    assert args == '{"city":"Oslo"}'
    assert got[-1].type == "response.completed" and got[-1].response.model == MODEL
    sent = upstream.bodies(PATH)[0]
    assert sent["model"] == "up-model" and sent["stream"] is True
    assert sent["custom_field"] == {"x": 1}, "unknown fields pass through untouched"
    headers = upstream.received[0].headers
    assert headers["Authorization"] == "Bearer sk-upstream-SECRET"
    assert "client-key-123" not in str(headers)


def test_stream_helper_final_response_equals_the_non_stream_body(upstream: FakeUpstream,
                                                                 gateway: GatewayServer) -> None:
    answer = rich_answer()
    upstream.enqueue(PATH, stream_script(answer.stream_events()), body_script(answer))
    with client(gateway).responses.stream(model="m", input="Say hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    body = client(gateway).responses.create(model="m", input="Say hello")
    assert "".join(deltas) == "Hello, world!"
    assert final.output_text == body.output_text == "Hello, world!"
    # the helper's Parsed* types add `parsed`/`parsed_arguments` (None here); everything else is equal
    assert final.model_dump(exclude_none=True) == body.model_dump(exclude_none=True)
    call = final.output[2]
    assert call.type == "function_call" and call.call_id == "call_1" and call.arguments == '{"city":"Oslo"}'
    assert final.usage is not None and final.usage.input_tokens == 11
    assert "stream" not in upstream.bodies(PATH)[1], "a non-stream call asks for a body"


def test_refusal_streams_and_completes(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    answer = Answer().message(["I'm sorry, ", "I can't help with that."], refusal=True)
    upstream.enqueue(PATH, stream_script(answer.stream_events()))
    with client(gateway).responses.stream(model="m", input="bad idea") as stream:
        refusal = "".join(e.delta for e in stream if e.type == "response.refusal.delta")
        final = stream.get_final_response()
    assert refusal == "I'm sorry, I can't help with that."
    part = final.output[0].content[0]  # type: ignore[union-attr]
    assert part.type == "refusal" and part.refusal == refusal


def test_async_client_stream_and_body(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    answer = Answer().message(["as", "ync"])
    upstream.enqueue(PATH, stream_script(answer.stream_events(), split=7), body_script(answer))

    async def run() -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=20) as c:
            stream = await c.responses.create(model="m", input="x", stream=True)
            text = "".join([e.delta async for e in stream if e.type == "response.output_text.delta"])
            body = await c.responses.create(model="m", input="x")
            return text, body.output_text

    assert asyncio.run(run()) == ("async", "async")


def test_events_without_sse_names_and_unknown_types_are_forwarded(upstream: FakeUpstream,
                                                                  gateway: GatewayServer) -> None:
    events = Answer().message(["ok"]).stream_events()
    events.insert(2, {"type": "response.future_thing.happened", "detail": {"a": 1}})
    events = number(events)
    upstream.enqueue(PATH, stream_script(events, named=False, tail=[b"data: [DONE]\n\n"]))
    got = list(client(gateway).responses.create(model="m", input="x", stream=True))
    assert [e.type for e in got] == [e["type"] for e in events]
    assert getattr(got[2], "detail", None) == {"a": 1}


def test_upstream_400_passes_through_and_body_status_failed_is_retried(upstream: FakeUpstream,
                                                                        gateway: GatewayServer) -> None:
    upstream.enqueue(PATH, json_script({"error": {"message": "Invalid 'input'", "type": "invalid_request_error",
                                                  "param": "input", "code": "invalid_value"}}, 400))
    with pytest.raises(openai.BadRequestError) as info:
        client(gateway).responses.create(model="m", input="x", stream=True)
    assert info.value.code == "invalid_value" and len(upstream.received) == 1
    failed_body: dict[str, Any] = {**Answer().body("failed"), "output": [],
                                   "error": {"code": "server_error", "message": "boom"}}
    upstream.enqueue(PATH, json_script(failed_body), body_script(Answer().message(["fine"])))
    assert client(gateway).responses.create(model="m", input="x").output_text == "fine"
    assert len(upstream.received) == 3


def test_a_deployment_without_a_responses_api_is_served_by_the_bridge(upstream: FakeUpstream,
                                                                     make_gateway: Any) -> None:
    """Issue #31: an Anthropic deployment answers `/v1/responses` through the bridge (the bridge's own tests:
    tests/integration/test_responses_bridge.py); it used to be a 400 naming `model`."""
    gw = make_gateway(providers={"claude": {"type": "anthropic", "base_url": upstream.base_url}},
                      models=[{"name": "m", "deployments": [{"provider": "claude", "model": "c"}]}])
    upstream.enqueue("/v1/messages", a.message_body([{"type": "text", "text": "Bridged."}]))
    assert client(gw).responses.create(model="m", input="x").output_text == "Bridged."
    assert upstream.bodies(PATH) == []


def test_input_must_be_text_or_items(gateway: GatewayServer) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(gateway).responses.create(model="m", input=42)  # type: ignore[arg-type]
    assert info.value.body["param"] == "input"  # type: ignore[index]


def test_client_disconnect_closes_the_upstream(servers: LoopThread, upstream: FakeUpstream,
                                               gateway: GatewayServer) -> None:
    events = Answer().message(["one", "two"]).stream_events()
    upstream.enqueue(PATH, stream_script(events[:5], tail=[Hang()]))
    stream = client(gateway).responses.create(model="m", input="x", stream=True)
    for event in stream:
        if event.type == "response.output_text.delta":
            break
    stream.close()  # the client goes away mid-stream
    servers.run(asyncio.wait_for(upstream.closed.wait(), 1.0))
    servers.run(wait_until(lambda: gateway.sample("llm_gateway_inflight_requests", api="responses") == 0))
    assert gateway.sample("llm_gateway_requests_total", api="responses", model="m", stream="true",
                          outcome="cancelled") == 1


def test_a_body_answering_a_stream_request_is_replayed_as_a_stream(upstream: FakeUpstream,
                                                                   gateway: GatewayServer) -> None:
    answer = rich_answer()
    upstream.enqueue(PATH, body_script(answer), body_script(answer))
    with client(gateway).responses.stream(model="m", input="x") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello, world!"
    assert final.model_dump(exclude_none=True) == client(gateway).responses.create(
        model="m", input="x").model_dump(exclude_none=True)


def test_an_upstream_that_rejects_stream_is_asked_for_a_body_from_then_on(upstream: FakeUpstream,
                                                                         gateway: GatewayServer) -> None:
    rejected = json_script({"error": {"message": "'stream' is not supported", "type": "invalid_request_error",
                                      "param": "stream", "code": "unsupported_value"}}, 400)
    answer = Answer().message(["buffered"])
    upstream.enqueue(PATH, rejected, body_script(answer), body_script(answer))
    for _ in range(2):
        events = list(client(gateway).responses.create(model="m", input="x", stream=True))
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "buffered"
    assert [b.get("stream") for b in upstream.bodies(PATH)] == [True, None, None]


def test_azure_deployment_gets_its_path_version_and_key_header(upstream: FakeUpstream, make_gateway: Any) -> None:
    gw = make_gateway(providers={"az": {"type": "azure", "base_url": upstream.base_url, "api_key": "az-SECRET",
                                        "api_version": "2025-04-01-preview"}},
                      models=[{"name": "m", "deployments": [{"provider": "az", "model": "my-deployment"}]}])
    upstream.enqueue("/openai/responses", stream_script(Answer().message(["from azure"]).stream_events()))
    events = list(client(gw).responses.create(model="m", input="x", stream=True))
    assert events[-1].type == "response.completed"
    [got] = upstream.received
    assert got.query == {"api-version": "2025-04-01-preview"} and got.body["model"] == "my-deployment"
    assert got.headers["api-key"] == "az-SECRET" and "Authorization" not in got.headers


def test_no_first_token_in_time_falls_back_to_the_next_deployment(upstream: FakeUpstream,
                                                                   make_gateway: Any) -> None:
    slow = {"connect_s": 2, "first_token_s": 0.3, "idle_s": 10, "total_s": 60}
    gw = make_gateway(providers={"up": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "timeouts": slow},
                                 "second": {"type": "openai", "base_url": f"{upstream.base_url}/second/v1"}},
                      models=[{"name": "m", "deployments": [{"provider": "up", "model": "a"},
                                                            {"provider": "second", "model": "b"}]}])
    preamble = Answer(rid="resp_slow").message(["late"]).stream_events()[:4]
    upstream.enqueue(PATH, stream_script(preamble, tail=[Hang()]))  # preamble events are not tokens
    upstream.enqueue("/second/v1/responses", stream_script(Answer(rid="resp_b").message(["quick"]).stream_events()))
    events = list(client(gw).responses.create(model="m", input="x", stream=True))
    assert {e.response.id for e in events if hasattr(e, "response")} == {"resp_b"}
    assert gw.sample("llm_gateway_upstream_attempts_total", model="m", deployment="up/a",
                     outcome="first_token_timeout") == 1


def test_input_redaction_masks_the_prompt_before_it_leaves(upstream: FakeUpstream, make_gateway: Any) -> None:
    gw = make_gateway(redaction={"profiles": {"p": {"rules": ["secrets"], "inputs": True}}},
                      models=[{"name": "m", "deployments": [{"provider": "up", "model": "up-model"}],
                               "redaction": "p"}])
    key = "sk-proj-Zq8vN3xT5bW1kR7mY2cP9dL4fH6jS0gA1eU3iO5"
    upstream.enqueue(PATH, body_script(Answer().message(["ok"])))
    client(gw).responses.create(model="m", instructions=f"use {key}",
                                input=[{"role": "user", "content": [{"type": "input_text", "text": f"key {key}"}]}])
    sent = upstream.bodies(PATH)[0]
    assert key not in str(sent) and sent["instructions"] == "use [REDACTED:openai_key]"


def test_input_redaction_masks_tool_results_too(upstream: FakeUpstream, make_gateway: Any) -> None:
    """A tool's result is where a secret is most likely (a file read, an env dump): a `function_call_output`
    is masked as a chat `tool` message and a Messages `tool_result` are, as a string or as text parts."""
    gw = make_gateway(redaction={"profiles": {"p": {"rules": ["secrets"], "inputs": True}}},
                      models=[{"name": "m", "deployments": [{"provider": "up", "model": "up-model"}],
                               "redaction": "p"}])
    key = "sk-proj-Zq8vN3xT5bW1kR7mY2cP9dL4fH6jS0gA1eU3iO5"
    upstream.enqueue(PATH, body_script(Answer().message(["ok"])))
    client(gw).responses.create(model="m", input=[
        {"role": "user", "content": "read .env"},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": f"OPENAI_API_KEY={key}"},
        {"type": "function_call", "call_id": "c2", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": f"key {key}"}]}])
    sent = upstream.bodies(PATH)[0]
    assert key not in str(sent)
    assert sent["input"][2]["output"] == "OPENAI_API_KEY=[REDACTED:openai_key]"
    assert sent["input"][4]["output"] == [{"type": "input_text", "text": "key [REDACTED:openai_key]"}]


def test_an_incomplete_answer_is_an_answer(upstream: FakeUpstream, gateway: GatewayServer) -> None:
    events = Answer().message(["cut sh"]).stream_events(end="incomplete")
    events[-1]["response"]["incomplete_details"] = {"reason": "max_output_tokens"}
    upstream.enqueue(PATH, stream_script(events))
    got = list(client(gateway).responses.create(model="m", input="x", stream=True, max_output_tokens=2))
    assert got[-1].type == "response.incomplete"
    assert got[-1].response.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]
    assert gateway.sample("llm_gateway_tokens_total", model="m", provider="up", type="output") == 7
