"""Claude Code itself (npm `@anthropic-ai/claude-code`, installed by scripts/e2e-deps.sh) through the gateway,
headless (`claude -p`), offline: `ANTHROPIC_BASE_URL` at the gateway, the gateway key as `ANTHROPIC_API_KEY`,
a temporary HOME, autoupdate, telemetry and every nonessential call off. Against a scripted upstream of
each type; and a first deployment that reports `overloaded_error` inside its stream before any text,
which Claude Code never sees: it gets the fallback's answer, and no error."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests import anthropic_scripts as a
from tests.chat_scripts import text_stream
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer

CLAUDE = Path(__file__).parent / "node" / "node_modules" / ".bin" / "claude"
GW_KEY = "gw-claude-code-key-0001"
UP_KEY = "sk-ant-upstream-SECRET"
MODEL = "cc-model"  # the gateway's model; Claude Code is told to use it for every role
OPENAI_PATH = "/v1/chat/completions"
TIMEOUTS = {"connect_s": 2, "first_token_s": 20, "idle_s": 20, "total_s": 60}
RUN_TIMEOUT_S = 120


def gateway(make_gateway: Callable[..., GatewayServer], up: FakeUpstream, deployments: list[str]) -> GatewayServer:
    return make_gateway(parse_config({
        "auth": {"keys": [{"name": "claude-code", "key": GW_KEY}]},
        "providers": {
            "claude": {"type": "anthropic", "base_url": up.base_url, "api_key": UP_KEY, "timeouts": TIMEOUTS},
            "claude-b": {"type": "anthropic", "base_url": up.base_url, "api_key": UP_KEY, "timeouts": TIMEOUTS},
            "oai": {"type": "openai", "base_url": f"{up.base_url}/v1", "api_key": "sk-oai-upstream-SECRET",
                    "timeouts": TIMEOUTS},
        },
        "models": [{"name": MODEL, "deployments": [{"provider": p, "model": f"{p}-dep"} for p in deployments],
                    "retry": {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 1,
                              "max_backoff_ms": 5}}],
    }, env={}))


PINNED = {"ANTHROPIC_MODEL": MODEL, "ANTHROPIC_SMALL_FAST_MODEL": MODEL, "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
          "ANTHROPIC_DEFAULT_SONNET_MODEL": MODEL, "ANTHROPIC_DEFAULT_OPUS_MODEL": MODEL}


def claude(gw: GatewayServer, prompt: str, home: Path, *, pinned: bool = True,
           args: tuple[str, ...] = ()) -> dict[str, Any]:
    """One headless run, bounded; its JSON result. `pinned`: every model role set to the gateway's `MODEL`;
    else Claude Code sends its own default model names. `args`: more of its options (`--resume <id>`)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{gw.port}",
           "ANTHROPIC_API_KEY": GW_KEY, **(PINNED if pinned else {}), "DISABLE_AUTOUPDATER": "1",
           "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_RETRIES": "0"}
    assert CLAUDE.exists(), "run `make e2e-deps` (scripts/e2e-deps.sh installs Claude Code)"
    done = subprocess.run([str(CLAUDE), "-p", prompt, "--output-format", "json", *args], env=env, cwd=home,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, f"claude failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = orjson.loads(done.stdout)
    return result


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path


def test_claude_code_through_an_anthropic_deployment(upstream: FakeUpstream, home: Path,
                                                     make_gateway: Callable[..., GatewayServer]) -> None:
    gw = gateway(make_gateway, upstream, ["claude"])
    upstream.defaults[a.PATH] = a.text_stream(["Hello from ", "the Anthropic upstream."])
    result = claude(gw, "Say hello", home)
    assert result["is_error"] is False and result["result"] == "Hello from the Anthropic upstream."
    got = [r for r in upstream.received if r.path == a.PATH]
    assert got, "Claude Code's request reached the upstream"
    first = got[0]
    assert first.body["model"] == "claude-dep" and first.body["stream"] is True
    assert "claude-code-20250219" in first.headers["anthropic-beta"]
    assert first.headers["x-api-key"] == UP_KEY and GW_KEY not in str(first.headers)
    assert {"system", "tools", "metadata"} <= set(first.body), "Claude Code's fields pass through untouched"
    assert gw.sample("llm_gateway_requests_total", api="messages", model=MODEL, stream="true", outcome="ok") >= 1


def test_claude_code_through_an_openai_deployment(upstream: FakeUpstream, home: Path,
                                                  make_gateway: Callable[..., GatewayServer]) -> None:
    gw = gateway(make_gateway, upstream, ["oai"])
    upstream.defaults[OPENAI_PATH] = text_stream(["Hello from ", "the OpenAI upstream."])
    result = claude(gw, "Say hello", home)
    assert result["is_error"] is False and result["result"] == "Hello from the OpenAI upstream."
    sent = upstream.bodies(OPENAI_PATH)[0]
    assert sent["model"] == "oai-dep" and sent["stream"] is True and sent["messages"][0]["role"] == "system"


def test_overloaded_before_any_text_shows_claude_code_the_fallbacks_answer(
        upstream: FakeUpstream, home: Path, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = gateway(make_gateway, upstream, ["claude", "claude-b"])
    upstream.enqueue(a.PATH, a.stream([a.message_start("msg_overloaded"), a.ping(), a.text_block(0, [])[0],
                                       a.error_event("overloaded_error")]))
    upstream.defaults[a.PATH] = a.text_stream(["The fallback ", "answers."], mid="msg_fallback")
    result = claude(gw, "Say hello", home)
    assert result["is_error"] is False and result["result"] == "The fallback answers."
    models = [r.body["model"] for r in upstream.received if r.path == a.PATH]
    assert models[:2] == ["claude-dep", "claude-b-dep"]
    assert gw.sample("llm_gateway_upstream_attempts_total", model=MODEL, deployment="claude/claude-dep",
                     outcome="inband_error") == 1


def test_claude_code_without_a_model_setting_reaches_models_by_their_aliases(
        upstream: FakeUpstream, home: Path, make_gateway: Callable[..., GatewayServer]) -> None:
    """No `--model`, no ANTHROPIC_*_MODEL: Claude Code sends its own model names (its main model's and
    its small fast model's), which reach the configured models through their globs (issue #31)."""
    gw = make_gateway(parse_config({
        "auth": {"keys": [{"name": "claude-code", "key": GW_KEY}]},
        "providers": {"claude": {"type": "anthropic", "base_url": upstream.base_url, "api_key": UP_KEY,
                                 "timeouts": TIMEOUTS}},
        "models": [{"name": "main", "aliases": ["claude-opus-*", "claude-sonnet-*"],
                    "deployments": [{"provider": "claude", "model": "main-dep"}]},
                   {"name": "fast", "aliases": ["claude-haiku-*", "claude-3-5-haiku-*"],
                    "deployments": [{"provider": "claude", "model": "fast-dep"}]}],
    }, env={}))
    upstream.defaults[a.PATH] = a.text_stream(["Hello through ", "an alias."])
    with capture_logs() as logs:
        result = claude(gw, "Say hello", home, pinned=False)
    assert result["is_error"] is False and result["result"] == "Hello through an alias."
    lines = [e for e in logs if e["event"] == "request" and e["api"] == "messages"]
    assert lines and all(e["status"] == 200 for e in lines), lines
    assert {e["model"] for e in lines} <= {"main", "fast"} and "main" in {e["model"] for e in lines}
    assert all(e["requested_model"].startswith("claude-") for e in lines)  # Claude Code's own names
    assert {r.body["model"] for r in upstream.received if r.path == a.PATH} <= {"main-dep", "fast-dep"}
