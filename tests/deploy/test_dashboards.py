"""The Grafana dashboards: generated, not hand-edited; built only from contract metrics; documented."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.contract_metrics import METRICS, SERIES
from tests.deploy.promql_lint import parse, problems

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "grafana"
UIDS = {"llm-gateway-ttft.json": "llm-gateway-ttft", "llm-gateway-overview.json": "llm-gateway-overview",
        "llm-gateway-operations.json": "llm-gateway-operations"}


def _load_generator() -> ModuleType:
    # generate.py imports its sibling panels.py the way it does when run as a script.
    sys.path.insert(0, str(GRAFANA))
    try:
        spec = importlib.util.spec_from_file_location("grafana_generate", GRAFANA / "generate.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(GRAFANA))


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    return _load_generator()


def _committed() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted((GRAFANA / "dashboards").glob("*.json"))}


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def _exprs(board: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in _panels(board) for t in p["targets"]]


def test_committed_json_is_exactly_what_the_generator_writes(generator: ModuleType) -> None:
    built = generator.build()
    assert sorted(built) == sorted(_committed()), "dashboards/ holds a file the generator does not make"
    for name, model in built.items():
        on_disk = (GRAFANA / "dashboards" / name).read_text(encoding="utf-8")
        assert on_disk == generator.render(model), f"{name} is stale: run python grafana/generate.py"


def test_generator_check_mode_agrees() -> None:
    done = subprocess.run([sys.executable, str(GRAFANA / "generate.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_uids_are_stable() -> None:
    assert {name: board["uid"] for name, board in _committed().items()} == UIDS


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_panel_is_described_and_placed_without_overlap(name: str) -> None:
    board = _committed()[name]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    taken: set[tuple[int, int]] = set()
    for p in board["panels"]:
        if p["type"] != "row":
            assert len(p.get("description", "")) >= 40, f"panel {p['title']!r} needs a real description"
            assert p["targets"], f"panel {p['title']!r} has no query"
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"panel {p['title']!r} overlaps another"
        taken |= cells


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_query_uses_only_contract_metrics_and_labels(name: str) -> None:
    board = _committed()[name]
    found = [f"{title}: {issue}" for title, expr in _exprs(board) for issue in problems(expr)]
    assert found == []


@pytest.mark.parametrize("name", sorted(UIDS))
def test_template_variables_and_datasource(name: str) -> None:
    board = _committed()[name]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert set(variables) >= {"datasource", "job", "instance", "model", "provider", "key", "team"}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for var in ("model", "provider", "key", "team"):
        query = variables[var]["query"]["query"]
        m = re.fullmatch(r"label_values\((\w+)(\{.*\})?, (\w+)\)", query)
        assert m and m.group(1) in SERIES and m.group(3) == var, query
        assert var in SERIES[m.group(1)].labels_of(m.group(1))
    for var in ("job", "instance"):  # target labels: any contract metric carries them
        query = variables[var]["query"]["query"]
        m = re.fullmatch(r"label_values\((\w+)(\{.*\})?, (\w+)\)", query)
        assert m and m.group(1) in SERIES and m.group(3) == var, query
    used = {v for _, expr in _exprs(board) for v in re.findall(r"\$\{?(\w+)", expr)}
    assert used - {"__rate_interval", "__range", "__interval"} <= set(variables), "undefined variable"
    for p in _panels(board):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(t["datasource"] == p["datasource"] for t in p["targets"])


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_query_is_narrowed_to_the_selected_jobs_and_instances_and_draws_no_phantom_zero(name: str) -> None:
    for title, expr in _exprs(_committed()[name]):
        assert "vector(" not in expr, title  # a label-less 0 that no gateway reported
        for sel in parse(expr).selectors:
            got = {(m.label, m.op, m.value) for m in sel.matchers}
            assert {("job", "=~", "$job"), ("instance", "=~", "$instance")} <= got, (title, sel.name)


@pytest.mark.parametrize("name", sorted(UIDS))
@pytest.mark.parametrize("label", ["key", "team"])
def test_key_and_team_narrow_every_panel_whose_metrics_have_them(name: str, label: str) -> None:
    """Every query whose metrics all carry `key` (`team`), by the contract's labels, has `key=~"$key"`
    (`team=~"$team"`) in each selector: picking a key or a team changes every panel that can show it.
    A query that also reads a metric without the label (attempts per request) stays whole."""
    narrowed = 0
    for title, expr in _exprs(_committed()[name]):
        selectors = parse(expr).selectors
        if not selectors or not all(label in SERIES[s.name].labels_of(s.name) for s in selectors):
            continue
        for sel in selectors:
            assert (label, "=~", f"${label}") in {(m.label, m.op, m.value) for m in sel.matchers}, (title, sel.name)
        narrowed += 1
    if name == "llm-gateway-overview.json":  # what each variable must reach at least: the per-key/team rows
        assert narrowed >= {"key": 10, "team": 3}[label]


def test_the_overview_slices_requests_tokens_and_cost_by_key() -> None:
    exprs = [expr for _, expr in _exprs(_committed()["llm-gateway-overview.json"])]
    for metric in ("llm_gateway_requests_total", "llm_gateway_tokens_total", "llm_gateway_cost_usd_total"):
        assert any(metric in e and "sum by (key" in e and 'key=~"$key"' in e for e in exprs), metric


def test_dashboards_together_cover_every_contract_metric() -> None:
    used = {s.name for board in _committed().values() for _, expr in _exprs(board)
            for s in parse(expr).selectors}
    missing = [m.name for m in METRICS.values() if not set(m.series_names) & used]
    assert missing == []


def test_ttft_dashboard_has_the_panels_the_issue_asks_for() -> None:
    board = _committed()["llm-gateway-ttft.json"]
    exprs = [expr for _, expr in _exprs(board)]
    for metric in ("llm_gateway_time_to_first_token_seconds", "llm_gateway_upstream_time_to_first_token_seconds"):
        for q in ("0.5", "0.9", "0.99"):
            assert any(f"histogram_quantile({q}," in e and f"{metric}_bucket" in e and "model, provider" in e
                       for e in exprs), (metric, q)
    heatmaps = [p for p in _panels(board) if p["type"] == "heatmap"]
    assert heatmaps and all(t["format"] == "heatmap" for p in heatmaps for t in p["targets"])
    for needed in ("llm_gateway_time_per_output_token_seconds_bucket", "llm_gateway_text_delay_seconds_bucket",
                   "llm_gateway_upstream_attempts_total"):
        assert any(needed in e for e in exprs), needed


def test_operations_dashboard_has_the_panels_issue_62_asks_for() -> None:
    exprs = [expr for _, expr in _exprs(_committed()["llm-gateway-operations.json"])]
    for q in ("0.5", "0.99"):
        assert any(f"histogram_quantile({q}," in e and "llm_gateway_overhead_seconds_bucket" in e for e in exprs), q
    for metric in ("llm_gateway_continuations_total", "llm_gateway_affinity_total", "llm_gateway_store_up",
                   "llm_gateway_ledger_pending_rows", "llm_gateway_state_degraded{",
                   "llm_gateway_websocket_connections"):
        assert any(metric in e for e in exprs), metric


def test_overview_separates_inband_errors_from_other_attempts() -> None:
    exprs = [expr for _, expr in _exprs(_committed()["llm-gateway-overview.json"])]
    assert any('outcome!="inband_error"' in e for e in exprs)
    assert any('outcome="inband_error"' in e for e in exprs)


def test_provisioning_points_grafana_at_the_dashboards_and_prometheus() -> None:
    providers = yaml.safe_load((GRAFANA / "provisioning/dashboards/llm-gateway.yaml").read_text())
    assert [p["options"]["path"] for p in providers["providers"]] == ["/var/lib/grafana/dashboards"]
    sources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yaml").read_text())
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http://prometheus:")


def test_one_overview_panel_shows_routing_choices_and_the_learned_ttft() -> None:
    """Issue #59: a panel with both routing metrics, so a canary's share and why latency moved are read
    together."""
    panels = [[t["expr"] for t in p["targets"]] for p in _panels(_committed()["llm-gateway-overview.json"])]
    assert any(any("llm_gateway_routing_decisions_total" in e for e in exprs)
               and any("llm_gateway_deployment_ttft_seconds" in e for e in exprs) for exprs in panels)
