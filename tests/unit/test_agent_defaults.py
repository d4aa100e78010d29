"""docs/agents.md's config serves the pinned agents with their own default model names (README: "Claude Code
and Codex run with their own default model names"): each name the pinned versions send with no model
setting (tests/e2e/node/agent-defaults.json, next to the pins) reaches a model of the page's config
through its aliases, and the list names the versions package.json pins. tests/e2e/test_agent_defaults.py
runs the agents themselves to check the list is what they send."""

from __future__ import annotations

import pytest
import yaml

from gateway.config import parse_config
from tests.agent_defaults import DOCS_ENV, ROOT, docs_agent_config, pinned_defaults, pins

EXAMPLE = ROOT / "deploy" / "config" / "real-providers.example.yaml"
EXAMPLE_ENV = {k: f"test-{k.lower()}" for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_OPENAI_KEY",
                                                  "TEAM_A_KEY", "TEAM_B_KEY")}


def test_the_default_names_are_listed_for_the_pinned_versions() -> None:
    defaults, pinned = pinned_defaults(), pins()
    agents = {name for name in pinned if name != "openai"}
    assert set(defaults) == agents
    for package, entry in defaults.items():
        assert entry["version"] == pinned[package], f"{package}: re-measure its default models for the new pin"
        assert entry["default_models"], package


@pytest.mark.parametrize("example", ["docs/agents.md", "deploy/config/real-providers.example.yaml"])
def test_the_example_configs_reach_a_model_for_every_default_name(example: str) -> None:
    if example == "docs/agents.md":
        config = parse_config(docs_agent_config(), env=DOCS_ENV)
    else:
        config = parse_config(yaml.safe_load(EXAMPLE.read_text()), env=EXAMPLE_ENV)
    for package, entry in pinned_defaults().items():
        for name in entry["default_models"]:
            model = config.resolve_model(name)
            assert model is not None, f"{package}'s default {name!r} reaches no model of {example}"
    assert config.resolve_model("gpt-6.2-sol").name == "codex"  # type: ignore[union-attr]
    assert config.resolve_model("claude-opus-5-5").name == "sonnet"  # type: ignore[union-attr]
