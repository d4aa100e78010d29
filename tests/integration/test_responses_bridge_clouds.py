"""`POST /v1/responses` to the cloud providers, which have no Responses API (CONTRACT §9, §10): through the
bridge over their chat cells, driven by the official `openai` SDK, against scripted Google endpoints
(`tests/fake_google.py`). Every provider type has a Responses cell."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from gateway.config import parse_config
from gateway.providers.convert.responses_chat_bridge import ResponsesViaChat
from gateway.providers.registry import CELLS, PROVIDER_TYPES
from tests import google_scripts as g
from tests.fake_google import API_KEY, FakeGoogle, gemini_path, sse_script
from tests.harness import GatewayServer, LoopThread

FLASH = "gemini-2.5-flash"
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}
WEATHER: Any = {"type": "function", "name": "weather", "description": "w", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_every_provider_type_serves_the_responses_api() -> None:
    assert all(("responses", ptype) in CELLS for ptype in PROVIDER_TYPES)
    for ptype in ("anthropic", "bedrock", "gemini", "vertex"):
        assert issubclass(CELLS[("responses", ptype)], ResponsesViaChat)  # type: ignore[arg-type]


@pytest.fixture
def google(servers: LoopThread) -> Iterator[FakeGoogle]:
    fake = FakeGoogle()
    servers.run(fake.start())
    yield fake
    servers.run(fake.stop())


@pytest.fixture
def gw(google: FakeGoogle, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"gem": {"type": "gemini", "base_url": google.base_url, "api_key": API_KEY,
                              "timeouts": TIMEOUTS}},
        "models": [{"name": "gemini", "deployments": [{"provider": "gem", "model": FLASH}]}],
    }, env={}))


def test_gemini_streams_thoughts_text_and_a_call_as_responses_events(google: FakeGoogle, gw: GatewayServer) -> None:
    answer = [g.response([g.text("The user wants weather.", thought=True)], usage=g.usage()),
              g.response([g.text("Checking.")], usage=g.usage()),
              g.response([g.call("weather", {"city": "Oslo"}, "call_g1")], "STOP", g.usage(thoughts=3))]
    google.enqueue(gemini_path(FLASH, True), sse_script(answer, split=7))
    client = openai.OpenAI(base_url=gw.base_url, api_key="any", max_retries=0, timeout=20)
    with client.responses.stream(model="gemini", input="Weather in Oslo?", tools=[WEATHER],
                                 reasoning={"effort": "low"}) as s:
        final = s.get_final_response()
    assert [o.type for o in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[0].content[0].text == "The user wants weather."  # type: ignore[union-attr,index]
    assert final.output_text == "Checking."
    call = final.output[2]
    assert (call.name, call.arguments) == ("weather", '{"city":"Oslo"}')  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.output_tokens_details.reasoning_tokens == 3
    sent = google.received[0].body
    assert sent["contents"] == [{"role": "user", "parts": [{"text": "Weather in Oslo?"}]}]
    assert sent["tools"][0]["functionDeclarations"][0]["name"] == "weather"
