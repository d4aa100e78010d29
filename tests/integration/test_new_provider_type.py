"""Acceptance 1 of issue #64, end to end: a newcomer's provider type (`tests/quirky_provider.py`, cells
written as "Adding a provider type" says, added by `registry.register` instead of a registry line) is
served through every client API by the real gateway, with the official SDKs, its quirks honoured.
`tests/unit/test_house.py` shows the same cells added as files get every other line they need named."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anthropic
import openai
import pytest

from gateway.providers.registry import register, unregister
from tests import quirky_provider
from tests.chat_scripts import completion, text_stream
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer

CHAT = "/v1/chat/completions"


@pytest.fixture
def quirky(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> Iterator[GatewayServer]:
    register("quirky", quirky_provider.KIND, quirky_provider.CELLS)
    try:
        yield make_gateway(
            providers={"q": {"type": "quirky", "base_url": f"{upstream.base_url}/v1", "api_key": "quirk-SECRET"}},
            models=[{"name": "m", "deployments": [{"provider": "q", "model": "up-model"}]}])
    finally:
        unregister("quirky")


def test_chat_reaches_it_with_its_quirks(quirky: GatewayServer, upstream: FakeUpstream) -> None:
    upstream.enqueue(CHAT, text_stream(["Hel", "lo"]))
    client = openai.OpenAI(base_url=quirky.base_url, api_key="client-key", max_retries=0, timeout=20)
    chunks = list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                 stream=True, max_completion_tokens=5))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello"
    sent = upstream.received[-1]
    assert sent.headers.get("x-quirk-key") == "quirk-SECRET" and "authorization" not in sent.headers
    assert sent.body["max_tokens"] == 5 and "max_completion_tokens" not in sent.body
    assert sent.body["model"] == "up-model"


def test_responses_and_messages_reach_it_through_the_bridges(quirky: GatewayServer, upstream: FakeUpstream) -> None:
    upstream.enqueue(CHAT, completion("Hello there"), completion("Hi back"))
    oa = openai.OpenAI(base_url=quirky.base_url, api_key="client-key", max_retries=0, timeout=20)
    assert oa.responses.create(model="m", input="hi", store=False).output_text == "Hello there"
    an = anthropic.Anthropic(base_url=quirky.base_url.removesuffix("/v1"), api_key="client-key", max_retries=0,
                             timeout=20)
    message = an.messages.create(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert [b.text for b in message.content if b.type == "text"] == ["Hi back"]
    assert [r.headers.get("x-quirk-key") for r in upstream.received] == ["quirk-SECRET", "quirk-SECRET"]


def test_it_is_gone_when_unregistered(quirky: GatewayServer) -> None:
    """The test's type does not leak into the others: the config refuses it once it is unregistered."""
    from gateway.config import ConfigError, parse_config

    unregister("quirky")
    try:
        with pytest.raises(ConfigError, match="quirky"):
            parse_config({"providers": {"q": {"type": "quirky", "base_url": "http://127.0.0.1:9"}},
                          "models": [{"name": "m", "deployments": [{"provider": "q", "model": "x"}]}]}, env={})
    finally:
        register("quirky", quirky_provider.KIND, quirky_provider.CELLS)
