"""`bedrock` deployments end to end: the official openai and anthropic SDKs against the gateway, the gateway
against a scripted Bedrock Runtime on loopback that verifies every request's SigV4 signature and answers
real event-stream frames. Claude through InvokeModel (native for Messages clients), another model
through Converse; an in-stream throttlingException before any text falls back invisibly; one after the
text ends the stream with an error; a bad signature moves to the next deployment; credentials refreshed
during a stream sign the next request."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.config import parse_config
from gateway.upstream.aws import SigV4Signer
from tests import anthropic_scripts as a
from tests.eventstream_frames import chunk, event, exception
from tests.fake_aws import EVENTSTREAM, FakeBedrock, FakeContainerCredentials, KeyPair
from tests.fake_upstream import Gate, Script, json_script
from tests.harness import GatewayServer, LoopThread

GW_KEY = "gw-key-bedrock-0001"
KEY_ID, SECRET = "AKIAGATEWAYTEST", "bedrock-secret-key-do-not-leak"
CLAUDE, CLAUDE2 = "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"
NOVA = "amazon.nova-pro-v1:0"
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
FAST_RETRY = {"max_attempts": 4, "per_deployment": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5}
TOOLS_OPENAI = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
TOOLS_ANTHROPIC = [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}}]


def stream_path(model: str) -> str:
    return f"/model/{model}/invoke-with-response-stream"


@pytest.fixture
def bedrock(servers: LoopThread) -> Iterator[FakeBedrock]:
    fake = FakeBedrock({KEY_ID: KeyPair(SECRET)})
    servers.run(fake.start())
    yield fake
    servers.run(fake.stop())


def provider(fake: FakeBedrock, **extra: Any) -> dict[str, Any]:
    return {"type": "bedrock", "region": "us-east-1", "base_url": fake.base_url, "timeouts": TIMEOUTS,
            "aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET, **extra}


def config(fake: FakeBedrock, **providers: Any) -> Any:
    return parse_config({
        "server": {"keepalive_after_s": 30},
        "auth": {"keys": [{"name": "team-a", "key": GW_KEY}]},
        "providers": {"bedrock-a": provider(fake), "bedrock-b": provider(fake),
                      "bedrock-bad": provider(fake, aws_secret_access_key="wrong-secret"), **providers},
        "models": [
            {"name": "claude", "retry": FAST_RETRY, "deployments": [{"provider": "bedrock-a", "model": CLAUDE}]},
            {"name": "nova", "retry": FAST_RETRY, "deployments": [{"provider": "bedrock-a", "model": NOVA}]},
            {"name": "claude-pair", "retry": FAST_RETRY, "deployments": [{"provider": "bedrock-a", "model": CLAUDE},
                                                                         {"provider": "bedrock-b", "model": CLAUDE2}]},
            {"name": "claude-badkey", "retry": FAST_RETRY,
             "deployments": [{"provider": "bedrock-bad", "model": CLAUDE}, {"provider": "bedrock-a", "model": CLAUDE}]},
        ],
    }, env={})


@pytest.fixture
def gw(bedrock: FakeBedrock, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(config(bedrock))


def oai(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=GW_KEY, max_retries=0, timeout=20)


def claude_client(gw: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key=GW_KEY, max_retries=0, timeout=20)


def claude_answer() -> list[dict[str, Any]]:
    return [a.message_start(usage={"input_tokens": 20, "cache_read_input_tokens": 100,
                                   "cache_creation_input_tokens": 5, "output_tokens": 1}),
            *a.thinking_block(0, ["Let me ", "think."]), *a.text_block(1, ["Hel", "lo ", "there"]),
            *a.tool_block(2, "toolu_01", "get_weather", ['{"city":', ' "Paris"}']),
            a.message_delta("tool_use", {"output_tokens": 42}),
            {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 20}}]


def frames(events: list[dict[str, Any]], split: int = 7) -> Script:
    return Script([b"".join(chunk(e) for e in events)], headers=EVENTSTREAM, split=split)


def converse_answer() -> Script:
    evs = [("messageStart", {"role": "assistant"}),
           ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Bonjour"}}),
           ("contentBlockStop", {"contentBlockIndex": 0}),
           ("contentBlockStart", {"contentBlockIndex": 1,
                                  "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather"}}}),
           ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"city": "Paris"}'}}}),
           ("contentBlockStop", {"contentBlockIndex": 1}),
           ("messageStop", {"stopReason": "tool_use"}),
           ("metadata", {"usage": {"inputTokens": 11, "outputTokens": 6, "totalTokens": 17}, "metrics": {}})]
    return Script([b"".join(event(n, p) for n, p in evs)], headers=EVENTSTREAM, split=5)


def test_openai_chat_stream_with_tools_and_usage_to_claude(bedrock: FakeBedrock, gw: GatewayServer) -> None:
    bedrock.enqueue(stream_path(CLAUDE), frames(claude_answer()))
    chunks = list(oai(gw).chat.completions.create(
        model="claude", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS_OPENAI,  # type: ignore[list-item]
        stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    args = "".join(tc.function.arguments or "" for tc in calls if tc.function)
    assert text == "Hello there" and args == '{"city": "Paris"}'
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    usage = chunks[-1].usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (125, 42)
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 100
    sent = bedrock.received[-1]
    assert sent.body["anthropic_version"] == "bedrock-2023-05-31" and "model" not in sent.body
    assert sent.body["tools"][0]["name"] == "get_weather"
    assert bedrock.key_ids == [KEY_ID] and bedrock.rejected == []
    assert SECRET not in str(sent.headers)


def test_openai_chat_to_converse_model_stream_and_body(bedrock: FakeBedrock, gw: GatewayServer) -> None:
    bedrock.enqueue(f"/model/{NOVA}/converse-stream", converse_answer())
    chunks = list(oai(gw).chat.completions.create(
        model="nova", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS_OPENAI,  # type: ignore[list-item]
        stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Bonjour"
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert calls[0].id == "tooluse_1" and calls[0].function is not None and calls[0].function.name == "get_weather"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 17
    assert bedrock.received[-1].body["toolConfig"]["tools"][0]["toolSpec"]["name"] == "get_weather"

    bedrock.enqueue(f"/model/{NOVA}/converse", json_script({
        "output": {"message": {"role": "assistant", "content": [{"text": "Salut"}]}}, "stopReason": "end_turn",
        "usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}}))
    done = oai(gw).chat.completions.create(model="nova", messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content == "Salut" and done.usage is not None and done.usage.total_tokens == 4


def test_anthropic_messages_stream_native_with_thinking_tools_and_betas(bedrock: FakeBedrock,
                                                                         gw: GatewayServer) -> None:
    bedrock.enqueue(stream_path(CLAUDE), frames(claude_answer(), split=3))
    with claude_client(gw).messages.stream(
            model="claude", max_tokens=2048, messages=[{"role": "user", "content": "weather?"}],
            tools=TOOLS_ANTHROPIC, thinking={"type": "enabled", "budget_tokens": 1024},  # type: ignore[arg-type]
            extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"}) as s:
        types = [e.type for e in s]
        msg = s.get_final_message()
    assert "content_block_delta" in types and types[-1] == "message_stop"
    assert [b.type for b in msg.content] == ["thinking", "text", "tool_use"]
    assert msg.content[0].thinking == "Let me think."  # type: ignore[union-attr]
    assert msg.content[1].text == "Hello there"  # type: ignore[union-attr]
    assert msg.content[2].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert msg.usage.cache_read_input_tokens == 100 and msg.usage.output_tokens == 42
    sent = bedrock.received[-1].body
    assert sent["anthropic_beta"] == ["interleaved-thinking-2025-05-14"]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024} and "stream" not in sent


def test_anthropic_messages_body(bedrock: FakeBedrock, gw: GatewayServer) -> None:
    bedrock.enqueue(f"/model/{CLAUDE}/invoke", json_script({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": [
            {"type": "text", "text": "Hi!"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 2}}))
    msg = claude_client(gw).messages.create(model="claude", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].text == "Hi!" and msg.stop_reason == "end_turn"  # type: ignore[union-attr]
    assert bedrock.received[-1].body["anthropic_version"] == "bedrock-2023-05-31"


def test_throttling_before_any_text_falls_back_invisibly(bedrock: FakeBedrock, gw: GatewayServer) -> None:
    bedrock.enqueue(stream_path(CLAUDE), Script([chunk(a.message_start()) + exception("throttlingException",
                                                                                       "Too many tokens")],
                                                headers=EVENTSTREAM))
    bedrock.enqueue(stream_path(CLAUDE2), frames(claude_answer()))
    raw = claude_client(gw).messages.with_raw_response.create(
        model="claude-pair", max_tokens=64, messages=[{"role": "user", "content": "hi"}], stream=True)
    events = list(raw.parse())
    assert raw.headers["x-gateway-deployment"] == f"bedrock-b/{CLAUDE2}"
    assert [e.type for e in events].count("message_start") == 1 and events[-1].type == "message_stop"
    assert [r.path for r in bedrock.received] == [stream_path(CLAUDE), stream_path(CLAUDE2)]


def test_exception_after_text_ends_the_stream_with_an_error(bedrock: FakeBedrock, gw: GatewayServer) -> None:
    bedrock.enqueue(stream_path(CLAUDE), Script([b"".join(chunk(e) for e in [a.message_start(),
                                                                               *a.text_block(0, ["Hel"])[:2]])
                                                 + exception("modelStreamErrorException", "broke")],
                                                headers=EVENTSTREAM))
    got: list[str] = []
    with pytest.raises(openai.APIError):
        for c in oai(gw).chat.completions.create(model="claude", messages=[{"role": "user", "content": "hi"}],
                                                 stream=True):
            got.append(c.choices[0].delta.content or "" if c.choices else "")
    assert "".join(got) == "Hel"
    assert len(bedrock.received) == 1  # after the first token: never retried


def test_bad_signature_moves_to_the_next_deployment(bedrock: FakeBedrock, gw: GatewayServer) -> None:
    bedrock.enqueue(stream_path(CLAUDE), frames(claude_answer()))
    out = oai(gw).chat.completions.create(model="claude-badkey", messages=[{"role": "user", "content": "hi"}],
                                          stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in out if c.choices) == "Hello there"
    assert bedrock.rejected == ["InvalidSignatureException"] and bedrock.key_ids == [KEY_ID]


def test_credentials_refreshed_during_a_stream(servers: LoopThread, aws_env: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               make_gateway: Callable[..., GatewayServer]) -> None:
    ctr = FakeContainerCredentials(lifetime_s=120)  # inside botocore's refresh window: every pass renews
    servers.run(ctr.start())
    fake = FakeBedrock(ctr.issuer.issued)  # accepts every key the endpoint issued, checked by signature
    servers.run(fake.start())
    try:
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{ctr.url}/creds")
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-token")
        cfg = parse_config({
            "auth": {"keys": [{"name": "team-a", "key": GW_KEY}]},
            "providers": {"chain": {"type": "bedrock", "region": "us-east-1", "base_url": fake.base_url,
                                    "timeouts": TIMEOUTS}},
            "models": [{"name": "claude", "deployments": [{"provider": "chain", "model": CLAUDE}]}]}, env={})
        gw = make_gateway(cfg)
        assert gw.app is not None
        signer = gw.app.upstream.signers["chain"]
        assert isinstance(signer, SigV4Signer)
        gate = Gate()
        answer = b"".join(chunk(e) for e in claude_answer())
        cut = answer.index(chunk(claude_answer()[4]))  # after the thinking block: the stream has begun
        fake.enqueue(stream_path(CLAUDE), Script([answer[:cut], gate, answer[cut:]], headers=EVENTSTREAM))
        fake.enqueue(stream_path(CLAUDE), frames(claude_answer()))
        stream = oai(gw).chat.completions.create(model="claude", messages=[{"role": "user", "content": "hi"}],
                                                 stream=True)
        first = next(iter(stream))
        assert first.choices
        before = signer.access_key_id
        servers.run(signer.refresh())  # the refresh pass, on the gateway's loop, while the stream is open
        after = signer.access_key_id
        assert after is not None and after != before
        gate.opened.set()
        rest = list(stream)
        assert rest[-1].choices[0].finish_reason == "tool_calls"
        again = oai(gw).chat.completions.create(model="claude", messages=[{"role": "user", "content": "hi"}],
                                                stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in again if c.choices) == "Hello there"
        assert fake.key_ids == [before, after] and fake.rejected == []
    finally:
        servers.run(fake.stop())
        servers.run(ctr.stop())


def test_no_credentials_moves_to_the_next_deployment(servers: LoopThread, aws_env: Path,
                                                     bedrock: FakeBedrock,
                                                     make_gateway: Callable[..., GatewayServer]) -> None:
    """A provider whose chain found nothing still starts; its deployments fail as an authentication
    failure of ours, and the next deployment serves."""
    cfg = parse_config({
        "auth": {"keys": [{"name": "team-a", "key": GW_KEY}]},
        "providers": {"nokeys": {"type": "bedrock", "region": "us-east-1", "base_url": bedrock.base_url,
                                 "timeouts": TIMEOUTS},
                      "bedrock-a": provider(bedrock)},
        "models": [{"name": "claude", "retry": FAST_RETRY,
                    "deployments": [{"provider": "nokeys", "model": CLAUDE2},
                                    {"provider": "bedrock-a", "model": CLAUDE}]}],
    }, env={})
    gw = make_gateway(cfg)
    bedrock.enqueue(stream_path(CLAUDE), frames(claude_answer()))
    out = oai(gw).chat.completions.create(model="claude", messages=[{"role": "user", "content": "hi"}], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in out if c.choices) == "Hello there"
    assert [r.path for r in bedrock.received] == [stream_path(CLAUDE)]  # nothing unsigned was sent


def test_count_tokens_through_count_tokens_and_estimated_elsewhere(bedrock: FakeBedrock, gw: GatewayServer) -> None:
    bedrock.enqueue("/model/anthropic.claude-sonnet-4-5-20250929-v1:0/count-tokens", json_script({"inputTokens": 42}))
    counted = claude_client(gw).messages.count_tokens(model="claude", messages=[{"role": "user", "content": "hi"}])
    assert counted.input_tokens == 42
    assert bedrock.key_ids == [KEY_ID]
    raw = claude_client(gw).messages.with_raw_response.count_tokens(
        model="nova", messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-gateway-token-count"] == "estimate" and raw.parse().input_tokens > 0
    assert len(bedrock.received) == 1  # the Converse model was estimated, not sent


def test_the_responses_api_reaches_claude_and_converse_through_the_bridge(bedrock: FakeBedrock,
                                                                           gw: GatewayServer) -> None:
    """`/v1/responses` (Codex) to Bedrock, which has no Responses API: the bridge over the chat cell, signed
    requests, Bedrock's frames read into Responses events in their order (CONTRACT §9, §10)."""
    bedrock.enqueue(stream_path(CLAUDE), frames(claude_answer()))
    tool: Any = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    with oai(gw).responses.stream(model="claude", input="weather?", tools=[tool]) as s:
        final = s.get_final_response()
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]
    assert final.output_text == "Hello there"
    call = final.output[2]
    assert (call.name, call.arguments) == ("get_weather", '{"city": "Paris"}')  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.output_tokens == 42
    assert bedrock.received[-1].body["anthropic_version"] == "bedrock-2023-05-31"
    bedrock.enqueue(f"/model/{NOVA}/converse-stream", converse_answer())
    with oai(gw).responses.stream(model="nova", input="weather?", tools=[tool]) as s:
        final = s.get_final_response()
    assert final.output_text == "Bonjour" and final.output[-1].type == "function_call"
    assert bedrock.rejected == [], "every request was signed"
