"""The pinned coding agents' default model names (tests/e2e/node/agent-defaults.json, next to the pins in
package.json) and the gateway config docs/agents.md shows for them, read from the page itself."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "tests" / "e2e" / "node"
AGENTS_PAGE = ROOT / "docs" / "agents.md"
CLAUDE_CODE, CODEX = "@anthropic-ai/claude-code", "@openai/codex"


def pinned_defaults() -> dict[str, Any]:
    """Package -> {"version", "default_models"}."""
    data: dict[str, Any] = orjson.loads((NODE / "agent-defaults.json").read_bytes())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def pins() -> dict[str, str]:
    deps: dict[str, str] = orjson.loads((NODE / "package.json").read_bytes())["dependencies"]
    return deps


def docs_agent_config() -> dict[str, Any]:
    """The first YAML block of docs/agents.md (its "Gateway config"), as written."""
    block = re.search(r"```yaml\n(.*?)```", AGENTS_PAGE.read_text(), re.S)
    assert block is not None, "docs/agents.md has no yaml block"
    config: dict[str, Any] = yaml.safe_load(block.group(1))
    return config


DOCS_ENV = {"ANTHROPIC_API_KEY": "sk-ant-docs", "OPENAI_API_KEY": "sk-oai-docs", "ENG_KEY": "gw-docs-key-0001"}
