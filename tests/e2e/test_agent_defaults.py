"""The pinned agents themselves, with no model setting, against docs/agents.md's models (their names and
aliases as the page writes them; the deployments replaced by a scripted chat upstream): every name they
send is one tests/e2e/node/agent-defaults.json lists, and reaches a model. And the installed packages are
the pinned versions, whose files carry the listed names."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests.agent_defaults import CLAUDE_CODE, CODEX, NODE, docs_agent_config, pinned_defaults
from tests.chat_scripts import text_stream
from tests.e2e import test_claude_code, test_codex
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer

MODULES = NODE / "node_modules"


def docs_models_on(up: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    models = [{"name": m["name"], "aliases": m.get("aliases", []),
               "deployments": [{"provider": "up", "model": "up-dep"}]} for m in docs_agent_config()["models"]]
    return make_gateway(parse_config({
        "auth": {"keys": [{"name": "claude-code", "key": test_claude_code.GW_KEY},
                          {"name": "codex", "key": test_codex.GW_KEY}]},
        "providers": {"up": {"type": "openai", "base_url": f"{up.base_url}/v1", "responses": False,
                             "api_key": "sk-upstream-SECRET", "timeouts": test_codex.TIMEOUTS}},
        "models": models,
    }, env={}))


def sent_names(logs: list[dict[str, Any]]) -> list[tuple[str, Any, int]]:
    return [(e["requested_model"], e["model"], e["status"]) for e in logs if e["event"] == "request"]


def contains(root: Path, needle: bytes) -> bool:
    for f in root.rglob("*"):
        if f.is_file() and not f.is_symlink() and f.stat().st_size > 0:
            with f.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                if m.find(needle) >= 0:
                    return True
    return False


@pytest.mark.parametrize("package", [CLAUDE_CODE, CODEX])
def test_the_installed_agents_are_the_pinned_versions_and_carry_the_listed_names(package: str) -> None:
    entry = pinned_defaults()[package]
    installed = MODULES / package
    assert installed.is_dir(), "run `make e2e-deps` (scripts/e2e-deps.sh installs the agents)"
    assert orjson.loads((installed / "package.json").read_bytes())["version"] == entry["version"]
    # Codex's binary is in its platform package beside it (@openai/codex-linux-x64)
    roots = [installed, *installed.parent.glob(f"{installed.name}-*")]
    for name in entry["default_models"]:
        assert any(contains(root, name.encode()) for root in roots), f"{name} is not in {package}"


def test_claude_code_with_no_model_setting_sends_only_listed_names(
        upstream: FakeUpstream, tmp_path: Path, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = docs_models_on(upstream, make_gateway)
    upstream.defaults[test_claude_code.OPENAI_PATH] = text_stream(["Hello with the defaults."])
    with capture_logs() as logs:
        result = test_claude_code.claude(gw, "Say hello", tmp_path, pinned=False)
    assert result["is_error"] is False and result["result"] == "Hello with the defaults."
    sent = sent_names(logs)
    listed = pinned_defaults()[CLAUDE_CODE]["default_models"]
    assert sent and all(name in listed and model is not None and status == 200 for name, model, status in sent), sent


def test_codex_with_no_model_in_its_config_sends_a_listed_name(
        upstream: FakeUpstream, tmp_path: Path, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = docs_models_on(upstream, make_gateway)
    upstream.defaults[test_codex.CHAT_PATH] = text_stream(["Hello with the default."])
    home = tmp_path / "codex"
    test_codex.write_config(home, gw.base_url)
    config = home / "config.toml"
    config.write_text(config.read_text().replace(f'model = "{test_codex.MODEL}"\n', "", 1))
    with capture_logs() as logs:
        done = test_codex.codex(home, tmp_path, "Say hello")
    assert "Hello with the default." in done.stdout
    sent = sent_names(logs)
    assert sent and all((name, model, status) == (name, "codex", 200) for name, model, status in sent), sent
    assert {name for name, _, _ in sent} <= set(pinned_defaults()[CODEX]["default_models"]), sent
