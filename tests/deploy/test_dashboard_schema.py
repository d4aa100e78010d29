"""Every dashboard against Grafana's own schema (`@grafana/schema`'s dashboard kind and panel plugin types,
checked by the TypeScript compiler; tests/deploy/grafana_schema.py says how and why), and the checker
itself against dashboards broken on purpose, so a checker that passes everything cannot pass here."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import grafana_schema

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "grafana" / "dashboards"
Board = dict[str, Any]


def _committed() -> dict[str, Board]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(DASHBOARDS.glob("*.json"))}


@pytest.fixture(scope="module")
def installed() -> None:
    pinned = json.loads((grafana_schema.NODE / "package.json").read_text())["devDependencies"]
    assert grafana_schema.installed_versions() == {name: pinned[name] for name in grafana_schema.PINNED}, \
        "run `make e2e-deps` (scripts/e2e-deps.sh installs tests/e2e/node's pinned packages)"


def test_the_pinned_schema_ships_the_panel_types_the_dashboards_use(installed: None) -> None:
    used = {p["type"] for board in _committed().values() for p in board["panels"] if p["type"] != "row"}
    plugins = grafana_schema.panel_plugins()
    assert used <= set(plugins), used - set(plugins)
    assert plugins["timeseries"].field_config and plugins["heatmap"].field_config
    assert not plugins["stat"].field_config  # stat has no custom field options: custom must stay empty


def test_every_dashboard_passes_grafanas_schema(installed: None) -> None:
    boards = _committed()
    assert len(boards) >= 3  # ttft, overview, operations
    assert grafana_schema.problems(boards) == []


def _first(board: Board, kind: str) -> Board:
    panel: Board = next(p for p in board["panels"] if p["type"] == kind)
    return panel


def _set(path: str, value: Any, kind: str | None = None) -> Callable[[Board], None]:
    """A mutation: `path` (dots) in the first panel of `kind`, or in the dashboard when kind is None."""
    def mutate(board: Board) -> None:
        node = _first(board, kind) if kind else board
        *parents, last = path.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
    return mutate


def _drop(path: str, kind: str) -> Callable[[Board], None]:
    def mutate(board: Board) -> None:
        node = _first(board, kind)
        *parents, last = path.split(".")
        for key in parents:
            node = node[key]
        del node[last]
    return mutate


def _variable_type(board: Board) -> None:
    board["templating"]["list"][1]["type"] = "querry"


def _target_without_ref(board: Board) -> None:
    del _first(board, "timeseries")["targets"][0]["refId"]


# (name, mutation of the operations dashboard, the first panel of which type it breaks (None: the
# dashboard itself), words of the compiler's message)
BROKEN: list[tuple[str, Callable[[Board], None], str | None, str]] = [
    ("gridpos-string", _set("gridPos", "0,0,12,8", "timeseries"), "timeseries", "gridPos"),
    ("unknown-panel-field", _set("gridpos", {"h": 8}, "timeseries"), "timeseries", '"gridpos"'),
    ("unknown-dashboard-field", _set("refresh_rate", "30s"), None, '"refresh_rate"'),
    ("graph-tooltip-out-of-enum", _set("graphTooltip", 7), None, "graphTooltip"),
    ("variable-type", _variable_type, None, '"querry"'),
    ("row-without-collapsed", _drop("collapsed", "row"), "row", "collapsed"),
    ("tooltip-mode-not-grafanas", _set("options.tooltip.mode", "several", "timeseries"), "timeseries", '"several"'),
    ("draw-style-not-grafanas", _set("fieldConfig.defaults.custom.drawStyle", "curvy", "timeseries"),
     "timeseries", '"curvy"'),
    ("stat-option-missing", _drop("options.wideLayout", "stat"), "stat", "wideLayout"),
    ("stat-custom-field-config", _set("fieldConfig.defaults.custom", {"drawStyle": "line"}, "stat"),
     "stat", "drawStyle"),
    ("heatmap-option-type", _set("options.cellGap", "1px", "heatmap"), "heatmap", "number"),
    ("heatmap-required-option", _drop("options.exemplars", "heatmap"), "heatmap", "exemplars"),
    ("target-without-refid", _target_without_ref, "timeseries", "refId"),
    ("panel-type-grafana-lacks", _set("type", "timeseriez", "timeseries"), "timeseries", "timeseriez"),
]
BASE = "llm-gateway-operations.json"  # it has rows, time series, stats and a heatmap


@pytest.fixture(scope="module")
def broken_reports(installed: None) -> dict[str, list[str]]:
    """One compiler run over every broken dashboard: file name -> its problems."""
    base = _committed()[BASE]
    boards = {}
    for name, mutate, _, _ in BROKEN:
        board = copy.deepcopy(base)
        mutate(board)
        boards[f"{name}.json"] = board
    found = grafana_schema.problems(boards)
    return {name: [p for p in found if p.startswith(f"{name}.json:")] for name, *_ in BROKEN}


@pytest.mark.parametrize(("name", "kind", "words"), [(n, k, w) for n, _, k, w in BROKEN], ids=[b[0] for b in BROKEN])
def test_a_dashboard_broken_on_purpose_fails_with_the_place_named(
        broken_reports: dict[str, list[str]], name: str, kind: str | None, words: str) -> None:
    report = broken_reports[name]
    assert report, f"{name}: the checker let it through"
    where = "dashboard:" if kind is None else f'panel {_first(_committed()[BASE], kind)["id"]} "'
    # the one change is the only problem, and the report says where it is
    assert all(where in line for line in report), report
    assert any(words in line for line in report), report
