"""The docs' own commands, run as a reader runs them (tests/docs_blocks.py): docs/keys-teams-spend.md's day
one (config, serve, a team and a key by the CLI and by curl, the SDK with that key, spend) and
docs/agents.md's config with the names the pinned Claude Code and Codex send. The README's `make run`
path and the cloud page with its extras missing need the runtime-only venv: tests/deploy/test_make_run.py."""

from __future__ import annotations

import json
import re
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chat_scripts import completion
from tests.control_plane import GatewayProcess
from tests.docs_blocks import DOCS, ROOT, Terminal, at_port, block, blocks, reader_env
from tests.fake_upstream import FakeUpstream
from tests.harness import LoopThread
from tests.ports import free_port

DAY_ONE = "docs/keys-teams-spend.md"
AGENTS = "docs/agents.md"
VENV_BIN = Path(sys.executable).parent
# What the versions tests/e2e pins (tests/e2e/node/package-lock.json) send with no model setting: Claude
# Code's names of its model families, Codex's default model. A new pin must say its names here.
PINNED_DEFAULTS = {
    ("@anthropic-ai/claude-code", "2.1.328"): ("claude-opus-4-8", "claude-sonnet-4-6", "claude-haiku-4-5-20251001"),
    ("@openai/codex", "0.171.0"): ("gpt-6.2-sol",),
}


def test_every_marked_block_is_one_a_test_runs() -> None:
    """A marker a test does not know would be a block nobody runs: the names are the tests' contract."""
    known = {"readme-run", "readme-first-token", "day-one-config", "day-one-serve", "day-one-cli",
             "day-one-curl", "day-one-client", "day-one-spend", "agents-config", "agents-codex-config",
             "cloud-bedrock", "cloud-google", "chart-template"}
    found = {name for doc in DOCS for name in blocks(doc)}
    assert found == known
    other = [p for p in (ROOT / "docs").glob("*.md") if str(p.relative_to(ROOT)) not in DOCS]
    assert not [p for p in other if "docs-test:" in p.read_text()]


@pytest.fixture
def openai_upstream() -> Iterator[FakeUpstream]:
    loop = LoopThread()
    up = FakeUpstream()
    loop.run(up.start())
    up.defaults["/v1/chat/completions"] = completion("Hello from the docs' upstream")
    try:
        yield up
    finally:
        loop.run(up.stop())
        loop.stop()


def _day_one_config(tmp: Path, port: int, metrics_port: int, upstream: str) -> None:
    text = at_port(block(DAY_ONE, "day-one-config").text, port, metrics_port)
    text = text.replace("https://api.openai.com/v1", f"{upstream}/v1")
    text = text.replace("sqlite:///var/lib/llm-gateway/gateway.db", f"sqlite:///{tmp}/gateway.db")
    assert text.startswith("# gateway.yaml\n")
    (tmp / "gateway.yaml").write_text(text)


def _admin(port: int, method: str, path: str, key: str) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/admin/v1/{path}", method=method,
                                 headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_day_one_as_the_keys_page_tells_it(tmp_path: Path, openai_upstream: FakeUpstream) -> None:
    port, metrics_port = free_port(), free_port()
    _day_one_config(tmp_path, port, metrics_port, openai_upstream.base_url)
    term = Terminal(tmp_path, reader_env(VENV_BIN, tmp_path))
    try:
        served = term.run(at_port(block(DAY_ONE, "day-one-serve").text, port))
        assert "gateway.yaml: valid" in served
        term.wait_ready(port)
        made = term.run(at_port(block(DAY_ONE, "day-one-cli").text, port))
        secrets = re.findall(r"^key: (sk-gw-\S+)$", made, re.M)
        assert len(secrets) == 1 and "(shown once" in made, made
        assert re.search(r"^team\s+search$", made, re.M), made
        # the curl block creates the same team and key: the CLI's pair goes first, so both can be shown
        admin_key = term.env["ADMIN_KEY"]
        assert _admin(port, "DELETE", "keys/alice", admin_key) == 200
        assert _admin(port, "DELETE", "teams/search", admin_key) == 200
        answers = [json.loads(x) for x in term.run(at_port(block(DAY_ONE, "day-one-curl").text, port))
                   .replace("}{", "}\n{").splitlines() if x.strip()]
        assert [a.get("object") for a in answers] == ["gateway.team", "gateway.key"], answers
        assert answers[1]["metadata"] == {"owner": "alice@example.com"} and answers[1]["team"] == "search"
        client = block(DAY_ONE, "day-one-client")
        script = at_port(client.text, port).replace('"sk-gw-..."', json.dumps(answers[1]["key"]))
        (tmp_path / "client.py").write_text(script)
        assert term.run(f"{sys.executable} client.py").strip() == "Hello from the docs' upstream"
        _check_spend(term, port)
    finally:
        term.close()


def _check_spend(term: Terminal, port: int) -> None:
    spend = block(DAY_ONE, "day-one-spend")
    out = term.run(at_port(spend.text, port))
    table, _, curl = out.partition("{")
    answer = json.loads("{" + curl)
    # a team's spend is its id's (a team created again under a deleted one's name starts at zero)
    assert table.split()[:3] == ["TEAM", "TEAM_ID", "MODEL"] or table.strip() == "(none)", table
    day_from, day_to = answer["from"], answer["to"]
    if day_from <= datetime.now(UTC).strftime("%Y-%m-%d") <= day_to:  # the docs' month is this one
        assert [(r["team"], r["model"], r["requests"]) for r in answer["data"]] == [("search", "gpt-4o-mini", 1)]
        assert table.split()[3:6] == ["REQUESTS", "INPUT_TOKENS", "OUTPUT_TOKENS"]


def _pinned(package: str) -> tuple[str, ...]:
    lock = json.loads((ROOT / "tests/e2e/node/package-lock.json").read_text())
    version = lock["packages"][f"node_modules/{package}"]["version"]
    assert (package, version) in PINNED_DEFAULTS, f"{package} {version} is pinned: add its default names"
    return PINNED_DEFAULTS[(package, version)]


def _agents_config(closed: str) -> dict[str, Any]:
    """docs/agents.md's config with every provider's base URL moved to a closed loopback port: nothing
    answers there, so a name the config resolves is a 502 and a name it does not is a 404."""
    raw: dict[str, Any] = yaml.safe_load(block(AGENTS, "agents-config").text)
    for provider in raw["providers"].values():
        provider["base_url"] = closed + ("/v1" if provider["type"] == "openai" else "")
    raw["server"] = {"host": "127.0.0.1"}
    return raw


def _status(port: int, path: str, body: dict[str, Any], key: str) -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"x-api-key": key, "Authorization": f"Bearer {key}",
                                          "anthropic-version": "2023-06-01", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return int(resp.status), ""
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")


@pytest.fixture
def agents_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GatewayProcess]:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.setenv(name, "sk-docs-test")
    monkeypatch.setenv("ENG_KEY", "sk-eng-docs-test")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDDOCSTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "docs-test-secret")
    gw = GatewayProcess(tmp_path, _agents_config(f"http://127.0.0.1:{free_port()}"))
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def _reaches_a_model(gw: GatewayProcess, path: str, model: str) -> bool:
    body: dict[str, Any] = {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    if path == "/v1/responses":
        body = {"model": model, "input": "hi"}
    status, text = _status(gw.port, path, body, "sk-eng-docs-test")
    assert status in (404, 502), (model, status, text)  # nothing listens upstream: resolved means 502
    return status == 502


def test_the_agents_config_serves_claude_codes_default_names(agents_gateway: GatewayProcess) -> None:
    for name in _pinned("@anthropic-ai/claude-code"):
        assert _reaches_a_model(agents_gateway, "/v1/messages", name), f"{name}: not a name of docs/agents.md's models"


def test_the_agents_config_serves_the_codex_config_toml_model(agents_gateway: GatewayProcess) -> None:
    codex = tomllib.loads(block(AGENTS, "agents-codex-config").text)
    assert codex["model_providers"][codex["model_provider"]]["base_url"] == "http://gateway:8080/v1"
    assert _reaches_a_model(agents_gateway, "/v1/responses", codex["model"])


def test_the_agents_config_serves_codexs_default_name(agents_gateway: GatewayProcess) -> None:
    for name in _pinned("@openai/codex"):
        assert _reaches_a_model(agents_gateway, "/v1/responses", name), f"{name}: not a name of docs/agents.md's models"
