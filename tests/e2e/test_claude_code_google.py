"""Claude Code itself, headless and offline (as in `test_claude_code.py`), through the gateway to Claude on
Vertex AI and to Gemini on the Gemini API, both scripted (`tests/fake_google.py`: the bearer token must be
one the scripted token endpoint issued for the service account's signed assertion). A first Vertex
deployment that reports `overloaded_error` inside its stream before any text is never seen by Claude
Code: it gets the fallback's answer, and no error."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests import google_scripts as g
from tests.e2e.test_claude_code import GW_KEY, MODEL, TIMEOUTS, claude
from tests.fake_google import API_KEY, LOCATION, PROJECT, FakeGoogle, gemini_path, sse_script, vertex_path
from tests.harness import GatewayServer, LoopThread

SONNET, HAIKU = "claude-sonnet-4-5@20250929", "claude-haiku-4-5@20251001"


@pytest.fixture
def google(servers: LoopThread) -> Iterator[FakeGoogle]:
    fake = FakeGoogle()
    servers.run(fake.start())
    yield fake
    servers.run(fake.stop())


def gateway(make_gateway: Callable[..., GatewayServer], google: FakeGoogle, sa: Path,
            deployments: list[tuple[str, str]]) -> GatewayServer:
    return make_gateway(parse_config({
        "auth": {"keys": [{"name": "claude-code", "key": GW_KEY}]},
        "providers": {
            "vx": {"type": "vertex", "project": PROJECT, "location": LOCATION, "base_url": google.base_url,
                   "credentials_file": str(sa), "timeouts": TIMEOUTS},
            "gem": {"type": "gemini", "base_url": google.base_url, "api_key": API_KEY, "timeouts": TIMEOUTS},
        },
        "models": [{"name": MODEL, "deployments": [{"provider": p, "model": m} for p, m in deployments],
                    "retry": {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1,
                              "max_backoff_ms": 5}}],
    }, env={}))


def test_claude_code_to_claude_on_vertex_with_an_overloaded_first_deployment(
        google: FakeGoogle, tmp_path: Path, make_gateway: Callable[..., GatewayServer]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    gw = gateway(make_gateway, google, google.service_account_file(tmp_path), [("vx", SONNET), ("vx", HAIKU)])
    first, fallback = vertex_path(SONNET, True), vertex_path(HAIKU, True)
    google.enqueue(first, a.stream([a.message_start("msg_overloaded"), a.ping(), a.text_block(0, [])[0],
                                    a.error_event("overloaded_error")]))
    google.defaults[first] = a.text_stream(["Hello from ", "Claude on Vertex."])
    google.defaults[fallback] = a.text_stream(["The fallback ", "answers."], mid="msg_fallback")
    result = claude(gw, "Say hello", home)
    assert result["is_error"] is False and result["result"] == "The fallback answers."
    got = [r for r in google.received if r.path in (first, fallback)]
    assert [r.path for r in got[:2]] == [first, fallback]
    body = got[0].body
    assert "model" not in body and body["anthropic_version"] == "vertex-2023-10-16" and body["stream"] is True
    assert {"system", "tools", "metadata"} <= set(body), "Claude Code's fields pass through untouched"
    assert "claude-code-20250219" in got[0].headers["anthropic-beta"]
    assert all(r.headers["Authorization"].removeprefix("Bearer ") in google.issued for r in got)
    assert GW_KEY not in str(got[0].headers)


def test_claude_code_to_gemini(google: FakeGoogle, tmp_path: Path,
                               make_gateway: Callable[..., GatewayServer]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    gw = gateway(make_gateway, google, google.service_account_file(tmp_path), [("gem", "gemini-2.5-pro")])
    path = gemini_path("gemini-2.5-pro", True)
    google.defaults[path] = sse_script(g.text_stream(["Hello from ", "Gemini."]))
    result = claude(gw, "Say hello", home)
    assert result["is_error"] is False and result["result"] == "Hello from Gemini."
    body = google.bodies(path)[0]
    assert body["systemInstruction"]["parts"] and body["contents"][-1]["role"] == "user"
    assert body["tools"][0]["functionDeclarations"], "Claude Code's tools reach Gemini as declarations"
