"""Model aliases through the official SDKs (CONTRACT §10): Claude Code's and Codex's own model names reach
the configured model; the metric label and the log line's `model` are the configured name, the log's
`requested_model` the name as sent; a key's model list grants every name of its models and nothing else;
`GET /v1/models` lists configured names, and `models.retrieve` answers an alias under the name asked for."""

from __future__ import annotations

from collections.abc import Callable

import anthropic
import openai
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.chat_scripts import completion
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer

KEY, NARROW = "gw-key-alias-0001", "gw-key-narrow-001"
CHAT, ANT = "/oai/v1/chat/completions", "/ant/v1/messages"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    url = upstream.base_url
    return make_gateway(parse_config({
        "auth": {"keys": [{"name": "all", "key": KEY}, {"name": "narrow", "key": NARROW, "models": ["sonnet"]}]},
        "providers": {"oai": {"type": "openai", "base_url": f"{url}/oai/v1", "api_key": "sk-oai-SECRET"},
                      "ant": {"type": "anthropic", "base_url": f"{url}/ant", "api_key": "sk-ant-SECRET"}},
        "models": [
            {"name": "sonnet", "aliases": ["claude-sonnet-*", "claude-3-7-sonnet-20250219"],
             "deployments": [{"provider": "ant", "model": "claude-sonnet-dep"}]},
            {"name": "haiku", "aliases": ["claude-haiku-*", "claude-3-5-haiku-*"],
             "deployments": [{"provider": "ant", "model": "claude-haiku-dep"}]},
            {"name": "gpt", "aliases": ["gpt-5*", "o?-mini"], "deployments": [{"provider": "oai", "model": "gpt-dep"}]},
        ],
    }, env={}))


def claude(gw: GatewayServer, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base_url.removesuffix("/v1"), api_key=key, max_retries=0)


def test_claude_codes_model_names_reach_the_configured_models(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(ANT, a.text_stream(["main"]), a.text_stream(["background"]))
    c = claude(gw)
    with capture_logs() as logs:
        with c.messages.stream(model="claude-sonnet-4-5-20250929", max_tokens=5, messages=HI) as s:
            assert s.get_final_text() == "main"
        with c.messages.stream(model="claude-3-5-haiku-20241022", max_tokens=5, messages=HI) as s:
            assert s.get_final_text() == "background"
    assert [b["model"] for b in upstream.bodies(ANT)] == ["claude-sonnet-dep", "claude-haiku-dep"]
    lines = [e for e in logs if e["event"] == "request"]
    assert [(e["model"], e["requested_model"]) for e in lines] == [
        ("sonnet", "claude-sonnet-4-5-20250929"), ("haiku", "claude-3-5-haiku-20241022")]
    assert gw.sample("llm_gateway_requests_total", api="messages", model="sonnet", outcome="ok") == 1
    assert gw.sample("llm_gateway_requests_total", model="claude-sonnet-4-5-20250929") == 0


def test_codex_model_names_reach_the_configured_model_on_chat(upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(CHAT, completion("one"), completion("two"))
    c = openai.OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0)
    for name in ("gpt-5-codex", "o4-mini"):
        c.chat.completions.create(model=name, messages=HI)  # type: ignore[call-overload]
    assert [b["model"] for b in upstream.bodies(CHAT)] == ["gpt-dep", "gpt-dep"]
    assert gw.sample("llm_gateway_requests_total", api="chat", model="gpt", outcome="ok") == 2
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="o10-mini", messages=HI)  # type: ignore[call-overload]


def test_a_keys_list_grants_every_name_of_its_models_and_only_those(upstream: FakeUpstream,
                                                                     gw: GatewayServer) -> None:
    upstream.enqueue(ANT, a.message_body([{"type": "text", "text": "ok"}]))
    c = claude(gw, NARROW)
    assert c.messages.create(model="claude-3-7-sonnet-20250219", max_tokens=5, messages=HI).content
    with capture_logs() as logs, pytest.raises(anthropic.NotFoundError) as info:
        c.messages.create(model="claude-haiku-4-5", max_tokens=5, messages=HI)
    assert "claude-haiku-4-5" in info.value.message
    line = next(e for e in logs if e["event"] == "request")
    assert (line["status"], line["requested_model"], line["key"]) == (404, "claude-haiku-4-5", "narrow")
    assert len(upstream.received) == 1


def test_the_model_list_names_configured_models_and_retrieve_answers_an_alias(gw: GatewayServer) -> None:
    assert [m.id for m in claude(gw).models.list().data] == ["sonnet", "haiku", "gpt"]
    # as Claude Code asks with CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1: GET /v1/models?limit=1000
    assert [m.id for m in claude(gw).models.list(limit=1000).data] == ["sonnet", "haiku", "gpt"]
    assert [m.id for m in claude(gw, NARROW).models.list().data] == ["sonnet"]
    got = claude(gw, NARROW).models.retrieve("claude-sonnet-4-5")
    assert (got.type, got.id) == ("model", "claude-sonnet-4-5")
    with pytest.raises(anthropic.NotFoundError):
        claude(gw, NARROW).models.retrieve("claude-haiku-4-5")
    o = openai.OpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0)
    assert [m.id for m in o.models.list()] == ["sonnet", "haiku", "gpt"]
    assert o.models.retrieve("gpt-5.1").id == "gpt-5.1"
