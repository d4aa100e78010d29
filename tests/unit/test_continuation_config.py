"""Config of mid-stream continuation (CONTRACT §2, §4.9): `models[].continuation: on|off` (off by
default), `deployments[].prefill` (true by default on an anthropic provider only)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gateway.config import ConfigError, parse_config

DOC = """
auth: {allow_unauthenticated: true}
providers:
  o: {type: openai, base_url: "https://o.example/v1", api_key: k}
  c: {type: anthropic, base_url: "https://c.example", api_key: k}
models:
  - name: m
    continuation: %s
    deployments:
      - {provider: o, model: a}
      - {provider: o, model: b, prefill: true}
      - {provider: c, model: c}
      - {provider: c, model: d, prefill: false}
"""


@pytest.mark.parametrize(("value", "on"), [("on", True), ("off", False), ('"on"', True), ('"off"', False),
                                           ("true", True), ("false", False)])
def test_continuation_is_on_or_off(value: str, on: bool) -> None:
    config = parse_config(yaml.safe_load(DOC % value), env={})
    assert config.models["m"].continuation is on


def test_continuation_is_off_and_prefill_is_anthropics_by_default() -> None:
    raw: dict[str, Any] = yaml.safe_load(DOC % "on")
    del raw["models"][0]["continuation"]
    model = parse_config(raw, env={}).models["m"]
    assert model.continuation is False
    assert [d.prefill for d in model.deployments] == [False, True, True, False]


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("continuation", "sometimes", 'models[0].continuation: must be one of on, off, got "sometimes"'),
    ("continuation", 1, "models[0].continuation: must be str or bool, got int"),
])
def test_a_bad_value_names_its_key(key: str, value: Any, expected: str) -> None:
    raw: dict[str, Any] = yaml.safe_load(DOC % "on")
    raw["models"][0][key] = value
    with pytest.raises(ConfigError) as info:
        parse_config(raw, env={})
    assert expected in info.value.errors


def test_a_bad_prefill_names_its_key() -> None:
    raw: dict[str, Any] = yaml.safe_load(DOC % "on")
    raw["models"][0]["deployments"][0]["prefill"] = "yes please"
    with pytest.raises(ConfigError) as info:
        parse_config(raw, env={})
    assert "models[0].deployments[0].prefill: must be bool, got str" in info.value.errors
