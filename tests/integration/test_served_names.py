"""Names the gateway gave back (docs/agents.md): a request may name a model by a deployment's upstream model
name that an answer carried in its `model` (configured, or reported by the upstream and learned from an
answer), through the official SDKs on chat, Messages and Responses. It reaches the model that deployment
serves, for the keys allowed that model (others: the 404 of an unknown name), and is logged and counted
as that model; exact names and aliases win; two models on one upstream name: the first the key may use.
With replicas sharing Redis, a name one replica learned reaches the model on the others."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anthropic
import openai
import pytest
import redis
from structlog.testing import capture_logs

from gateway.config import parse_config
from gateway.state.keys import served_key
from tests import anthropic_scripts as a
from tests import responses_scripts as r
from tests.chat_scripts import MODEL as REPORTED
from tests.chat_scripts import completion, text_stream
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer
from tests.redis_server import RedisServer
from tests.scaleout_load import PATH, Make, poll, replicas, sdk

ALL, SONNET_ONLY, B_ONLY = "gw-key-served-all01", "gw-key-served-son01", "gw-key-served-bbb01"
CHAT, ANT, RESP = "/oai/v1/chat/completions", "/ant/v1/messages", "/oai/v1/responses"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    url = upstream.base_url
    return make_gateway(parse_config({
        "auth": {"keys": [{"name": "all", "key": ALL},
                          {"name": "sonnet-only", "key": SONNET_ONLY, "models": ["sonnet"]},
                          {"name": "b-only", "key": B_ONLY, "models": ["gpt-b"]}]},
        "providers": {"oai": {"type": "openai", "base_url": f"{url}/oai/v1", "api_key": "sk-oai-SECRET"},
                      "ant": {"type": "anthropic", "base_url": f"{url}/ant", "api_key": "sk-ant-SECRET"}},
        "models": [
            {"name": "sonnet", "aliases": ["claude-sonnet-*"],
             "deployments": [{"provider": "ant", "model": "us.anthropic.sonnet-dep-v1:0"}]},
            {"name": "gpt-a", "deployments": [{"provider": "oai", "model": "shared-dep"}]},
            {"name": "gpt-b", "aliases": ["taken-dep"],
             "deployments": [{"provider": "oai", "model": "shared-dep"}]},
            {"name": "gpt-c", "deployments": [{"provider": "oai", "model": "taken-dep"}]},
        ],
    }, env={}))


def claude(gw: GatewayServer, key: str = ALL) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base_url.removesuffix("/v1"), api_key=key, max_retries=0)


def oai(gw: GatewayServer, key: str = ALL) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


def request_lines(logs: list[dict[str, object]]) -> list[tuple[object, object, object]]:
    return [(e["model"], e["requested_model"], e["status"]) for e in logs if e["event"] == "request"]


def test_chat_a_configured_upstream_name_reaches_the_first_model_the_key_may_use(
        upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(CHAT, completion("a"), text_stream(["b"]))
    with capture_logs() as logs:
        assert oai(gw).chat.completions.create(model="shared-dep", messages=HI).choices[0].message.content == "a"  # type: ignore[call-overload]
        stream = oai(gw, B_ONLY).chat.completions.create(model="shared-dep", messages=HI, stream=True)  # type: ignore[call-overload]
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "b"
        with pytest.raises(openai.NotFoundError) as info:
            oai(gw, SONNET_ONLY).chat.completions.create(model="shared-dep", messages=HI)  # type: ignore[call-overload]
    assert info.value.status_code == 404 and info.value.code == "model_not_found"
    assert request_lines(logs) == [("gpt-a", "shared-dep", 200), ("gpt-b", "shared-dep", 200),
                                   ("(unresolved)", "shared-dep", 404)]
    assert [b["model"] for b in upstream.bodies(CHAT)] == ["shared-dep", "shared-dep"]
    assert gw.sample("llm_gateway_requests_total", api="chat", model="gpt-a", outcome="ok") == 1
    assert gw.sample("llm_gateway_requests_total", api="chat", model="gpt-b", outcome="ok") == 1


def test_chat_an_alias_wins_over_an_upstream_name(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(CHAT, completion("c"))
    with capture_logs() as logs:
        oai(gw).chat.completions.create(model="taken-dep", messages=HI)  # type: ignore[call-overload]
    assert request_lines(logs) == [("gpt-b", "taken-dep", 200)]


def test_messages_a_name_the_upstream_reported_is_learned_from_the_answer(
        upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(ANT, a.text_stream(["first"]), a.message_body([{"type": "text", "text": "resumed"}]),
                     a.text_stream(["configured"]))
    c = claude(gw, SONNET_ONLY)
    with pytest.raises(anthropic.NotFoundError):  # nothing has answered under that name yet
        c.messages.create(model=a.MODEL, max_tokens=5, messages=HI)  # type: ignore[arg-type]
    with capture_logs() as logs:
        with c.messages.stream(model="claude-sonnet-4-5", max_tokens=5, messages=HI) as s:
            first = s.get_final_message()
        assert first.model == a.MODEL  # what a resuming client sends back
        resumed = c.messages.create(model=first.model, max_tokens=5, messages=HI)
        with c.messages.stream(model="us.anthropic.sonnet-dep-v1:0", max_tokens=5, messages=HI) as s:
            assert s.get_final_text() == "configured"
    assert resumed.content[0].type == "text" and resumed.content[0].text == "resumed"
    assert request_lines(logs) == [("sonnet", "claude-sonnet-4-5", 200), ("sonnet", a.MODEL, 200),
                                   ("sonnet", "us.anthropic.sonnet-dep-v1:0", 200)]
    assert gw.sample("llm_gateway_requests_total", api="messages", model="sonnet", outcome="ok") == 3
    with pytest.raises(anthropic.NotFoundError) as info:  # a key not allowed the model: an unknown name
        claude(gw, B_ONLY).messages.create(model=a.MODEL, max_tokens=5, messages=HI)  # type: ignore[arg-type]
    assert info.value.status_code == 404 and a.MODEL in info.value.message
    assert len(upstream.bodies(ANT)) == 3


def test_responses_a_reported_name_learned_from_a_body_and_a_stream(upstream: FakeUpstream,
                                                                     gw: GatewayServer) -> None:
    answer = r.Answer().message(["ok"])
    upstream.enqueue(RESP, r.body_script(answer), r.stream_script(answer.stream_events()))
    c = oai(gw, B_ONLY)
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model=REPORTED, input="hi")
    with capture_logs() as logs:
        got = c.responses.create(model="gpt-b", input="hi")
        assert got.model == REPORTED
        with c.responses.stream(model=got.model, input="hi") as s:
            assert s.get_final_response().output_text == "ok"
    assert request_lines(logs) == [("gpt-b", "gpt-b", 200), ("gpt-b", REPORTED, 200)]
    # the key all may use gpt-a too; gpt-b's answer taught the name, so it still reaches gpt-b
    upstream.enqueue(RESP, r.body_script(answer))
    with capture_logs() as logs:
        oai(gw).responses.create(model=REPORTED, input="hi")
    assert request_lines(logs) == [("gpt-b", REPORTED, 200)]


def test_models_retrieve_answers_an_upstream_name_only_for_a_key_allowed_its_model(gw: GatewayServer) -> None:
    assert claude(gw, SONNET_ONLY).models.retrieve("us.anthropic.sonnet-dep-v1:0").id == "us.anthropic.sonnet-dep-v1:0"
    with pytest.raises(anthropic.NotFoundError):
        claude(gw, B_ONLY).models.retrieve("us.anthropic.sonnet-dep-v1:0")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def test_a_name_one_replica_learned_reaches_the_model_on_another(
        redis_server: RedisServer, upstream: FakeUpstream, make_gateway: Make) -> None:
    """Two replicas sharing Redis (docs/scale-out.md): replica A streams an answer under the dated name its
    upstream reported; replica B, which never saw that answer, resolves the name a client sends back
    (Claude Code's `--resume`, a retry sent elsewhere) to the same model. A name recorded for a model or a
    deployment B's config does not have reaches nothing; `models.retrieve` looks names up the same way."""
    a, b = replicas(make_gateway, upstream.base_url, {"redis_url": redis_server.url, "timeout_ms": 1000},
                    [{"name": "k", "key": "key-served"}])
    upstream.enqueue(PATH, text_stream(["first"]), completion("resumed"))
    with pytest.raises(openai.NotFoundError):  # nothing has answered under that name yet, anywhere
        sdk(b, "key-served").chat.completions.create(model=REPORTED, messages=HI)  # type: ignore[call-overload]
    stream = sdk(a, "key-served").chat.completions.create(model="m", messages=HI, stream=True)  # type: ignore[call-overload]
    assert {c.model for c in stream} == {REPORTED}  # what a resuming client sends back
    raw = redis.Redis.from_url(redis_server.url)
    poll(lambda: bool(raw.exists(served_key(REPORTED))), "replica A to record the name (in the background)")
    with capture_logs() as logs:
        resumed = sdk(b, "key-served").chat.completions.create(model=REPORTED, messages=HI)  # type: ignore[call-overload]
    assert resumed.choices[0].message.content == "resumed"
    assert request_lines(logs) == [("m", REPORTED, 200)]
    raw.sadd(served_key("up-model-2025-02-02"), b'["m", "not-x"]', b'["gone", "x"]')
    with pytest.raises(openai.NotFoundError) as info:
        sdk(b, "key-served").chat.completions.create(model="up-model-2025-02-02", messages=HI)  # type: ignore[call-overload]
    assert info.value.code == "model_not_found"
    raw.sadd(served_key("up-model-2025-03-03"), b'["m", "x"]')
    assert sdk(b, "key-served").models.retrieve("up-model-2025-03-03").id == "up-model-2025-03-03"
    raw.close()
    assert [body["model"] for body in upstream.bodies(PATH)] == ["x", "x"]
