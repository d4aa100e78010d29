"""Routing's config (docs/reference.md, `models[].routing`, `deployments[].tier` and `.weight`): parsed,
defaulted and validated once at load, with errors that name the key path."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import parse_config
from gateway.config.reader import ConfigError


def raw(routing: str, *deployments: dict[str, Any]) -> dict[str, Any]:
    return {"auth": {"allow_unauthenticated": True}, "providers": {"p": {"type": "mock"}},
            "models": [{"name": "m", "routing": routing,
                        "deployments": [{"provider": "p", **d} for d in deployments]}]}


def errors(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config(doc, env={})
    return exc.value.errors


def test_tier_and_weight_default_to_0_and_1_and_the_table_groups_tiers_lowest_first() -> None:
    model = parse_config(raw("weighted", {"model": "a", "tier": 1}, {"model": "b", "weight": 5},
                             {"model": "c", "tier": 1, "weight": 0}), env={}).models["m"]
    assert [(d.tier, d.weight) for d in model.deployments] == [(1, 1.0), (0, 5.0), (1, 0.0)]
    assert model.routing == "weighted"
    assert model.table.tiers == ((1,), (0, 2))


@pytest.mark.parametrize("routing", ["ordered", "balanced", "weighted", "latency", "cost"])
def test_every_policy_is_accepted(routing: str) -> None:
    model = parse_config(raw(routing, {"model": "a", "price": {"input": 1, "output": 2}}), env={}).models["m"]
    assert model.routing == routing


def test_every_weight_0_is_an_error_and_so_are_negative_values() -> None:
    assert errors(raw("weighted", {"model": "a", "weight": 0}, {"model": "b", "weight": 0})) == [
        "models[0].deployments: every weight is 0: at least one deployment needs a weight above 0"]
    assert errors(raw("ordered", {"model": "a", "weight": -1, "tier": -2})) == [
        "models[0].deployments[0].tier: must be >= 0", "models[0].deployments[0].weight: must be >= 0"]
    assert errors(raw("ordered", {"model": "a", "tier": 0.5})) == [
        "models[0].deployments[0].tier: must be int, got float"]


def test_cost_needs_a_price_on_every_deployment() -> None:
    assert errors(raw("cost", {"model": "a", "price": {"input": 1}}, {"model": "b"})) == [
        "models[0].deployments[1].price: required with routing: cost"]
    parse_config(raw("latency", {"model": "a"}), env={})  # only cost needs one


def test_a_weight_or_price_that_is_no_finite_number_is_an_error_at_load() -> None:
    """YAML reads `.nan` and `.inf` (and `1e400`) as floats. NaN passed every `>= 0` check: a NaN weight made
    its deployment a fallback only, every weight NaN passed the "every weight is 0" check with no
    weighted split at all, and a NaN price made every cost NaN (budgets never reached, `cost` unordered);
    an infinite weight always won, and two of them went by config order, never split."""
    nan, inf = float("nan"), float("inf")
    assert errors(raw("weighted", {"model": "a", "weight": nan}, {"model": "b", "weight": nan})) == [
        "models[0].deployments[0].weight: must be a finite number",
        "models[0].deployments[1].weight: must be a finite number"]
    assert errors(raw("weighted", {"model": "a", "weight": inf}, {"model": "b"})) == [
        "models[0].deployments[0].weight: must be a finite number"]
    assert errors(raw("cost", {"model": "a", "price": {"input": nan, "output": inf}})) == [
        "models[0].deployments[0].price.input: must be a finite number",
        "models[0].deployments[0].price.output: must be a finite number"]
    doc = raw("ordered", {"model": "a"})
    doc["models"][0]["hedge_after_ms"] = nan  # NaN > 0 is False: silently no hedging
    assert errors(doc) == ["models[0].hedge_after_ms: must be a number, got NaN"]
