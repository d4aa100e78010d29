"""Small builders for Grafana dashboard JSON (schema 39, Grafana 10 and later), used by generate.py and
operations.py.

Only what the gateway's dashboards need: time series, stats, heatmaps, rows, and the datasource, job,
instance, model, provider, key and team template variables. Layout is computed, so panels are listed in
reading order. Every field is one Grafana's own schema (`@grafana/schema`) knows, and the fields it
requires are all written, with Grafana's defaults where we have no preference (docs/extensions.md,
"Process metrics and dashboards": tests/deploy/test_dashboard_schema.py checks them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

DS: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
# The selectors every query starts from: the chosen Prometheus jobs and instances (several gateways,
# one line each), then the chosen models
RI = "$__rate_interval"
J = 'job=~"$job", instance=~"$instance"'
M = f'{J}, model=~"$model"'
GRID_WIDTH = 24
TAGS = ["llm-gateway"]
JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False
    fmt: str = "time_series"


@dataclass(frozen=True, slots=True)
class Row:
    title: str


@dataclass(frozen=True, slots=True)
class Panel:
    kind: str
    title: str
    description: str
    queries: tuple[Query, ...]
    width: int = 12
    height: int = 8
    field_defaults: JSON = field(default_factory=dict)
    options: JSON = field(default_factory=dict)


def quantiles(metric: str, sel: str, by: str, legend: str,
              levels: tuple[str, ...] = ("0.5", "0.9", "0.99")) -> list[Query]:
    """One histogram_quantile query per level over `metric`'s buckets, grouped by `by`."""
    return [Query(f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{{{sel}}}"
                  f"[$__rate_interval])))", f"p{round(float(q) * 100)} {legend}") for q in levels]


def timeseries(title: str, description: str, queries: list[Query], *, unit: str,
               width: int = 12, decimals: int | None = None) -> Panel:
    defaults: JSON = {"unit": unit, "min": 0, "custom": {
        "drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": False,
    }}
    if decimals is not None:
        defaults["decimals"] = decimals
    legend = {"showLegend": True, "displayMode": "table", "placement": "bottom",
              "calcs": ["mean", "max", "lastNotNull"]}
    options = {"legend": legend,
               "tooltip": {"mode": "multi", "sort": "desc"}}
    return Panel("timeseries", title, description, tuple(queries), width, 8, defaults, options)


def stat(title: str, description: str, expr: str, *, unit: str, red: float | None = None,
         decimals: int | None = None, legend: str = "", width: int = 4, height: int = 4) -> Panel:
    steps: list[JSON] = [{"color": "green", "value": None}]
    if red is not None:
        steps.append({"color": "red", "value": red})
    defaults: JSON = {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps},
                      "color": {"mode": "thresholds"}}
    if decimals is not None:
        defaults["decimals"] = decimals
    options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
               "colorMode": "value", "graphMode": "none", "textMode": "auto", "justifyMode": "auto",
               "orientation": "auto", "wideLayout": True, "showPercentChange": False,
               "percentChangeColorMode": "standard"}
    return Panel("stat", title, description, (Query(expr, legend, instant=True),), width, height,
                 defaults, options)


def heatmap(title: str, description: str, expr: str) -> Panel:
    options = {"calculate": False, "cellGap": 1, "yAxis": {"unit": "s", "axisPlacement": "left"},
               "rowsFrame": {"layout": "auto"}, "legend": {"show": True},
               "color": {"mode": "scheme", "scheme": "Oranges", "exponent": 0.5, "steps": 64,
                         "fill": "dark-orange", "reverse": False},
               "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False},
               "filterValues": {"le": 1e-9}, "showValue": "auto", "exemplars": {"color": "rgba(255,0,255,0.7)"}}
    return Panel("heatmap", title, description, (Query(expr, "{{le}}", fmt="heatmap"),), 12, 8, {}, options)


# The metrics that carry a `key` or `team` label (docs/reference.md, Metrics): every query made of them
# only is narrowed to the dashboard's $key or $team variable, so picking a key or a team changes every
# panel that can show it, whichever way its query was written. A query that also reads a metric without
# the label (attempts per request) is left whole: narrowing one side of a ratio would mislead.
NARROWED_BY: dict[str, frozenset[str]] = {
    "key": frozenset({"llm_gateway_requests_total", "llm_gateway_tokens_total", "llm_gateway_cost_usd_total",
                      "llm_gateway_rate_limited_total"}),
    "team": frozenset({"llm_gateway_team_requests_total", "llm_gateway_team_cost_usd_total"}),
}
_SELECTOR = re.compile(r"\b(llm_gateway_[a-z_]+)\{([^}]*)\}")


def narrowable(expr: str) -> list[str]:
    """The labels of NARROWED_BY that every metric `expr` reads carries."""
    metrics = {m.group(1) for m in _SELECTOR.finditer(expr)}
    return [label for label, have in NARROWED_BY.items() if metrics and metrics <= have]


def narrow(expr: str) -> str:
    """`expr` with `key=~"$key"` / `team=~"$team"` in every selector, where every metric has the label."""
    labels = narrowable(expr)

    def add(m: re.Match[str]) -> str:
        matchers = m.group(2)
        for label in labels:
            wanted = f'{label}=~"${label}"'
            if wanted not in matchers:
                matchers = f"{matchers}, {wanted}" if matchers.strip() else wanted
        return f"{m.group(1)}{{{matchers}}}"
    return _SELECTOR.sub(add, expr) if labels else expr


def _target(ref: str, q: Query) -> JSON:
    return {"refId": ref, "datasource": DS, "expr": narrow(q.expr), "legendFormat": q.legend or "__auto",
            "range": not q.instant, "instant": q.instant, "format": q.fmt, "editorMode": "code"}


def _panel_json(p: Panel, pid: int, x: int, y: int) -> JSON:
    return {
        "id": pid, "type": p.kind, "title": p.title, "description": p.description, "datasource": DS,
        "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
        "fieldConfig": {"defaults": p.field_defaults, "overrides": []}, "options": p.options,
        "targets": [_target(chr(ord("A") + i), q) for i, q in enumerate(p.queries)],
    }


def layout(items: list[Panel | Row]) -> list[JSON]:
    """Places panels left to right, wrapping at the grid width; a Row starts a new line."""
    out: list[JSON] = []
    x = y = line_h = 0
    for pid, item in enumerate(items, start=1):
        if isinstance(item, Row):
            y, x, line_h = y + line_h, 0, 0
            out.append({"id": pid, "type": "row", "title": item.title, "collapsed": False, "panels": [],
                        "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y}})
            y += 1
            continue
        if x + item.width > GRID_WIDTH:
            y, x, line_h = y + line_h, 0, 0
        out.append(_panel_json(item, pid, x, y))
        x, line_h = x + item.width, max(line_h, item.height)
    return out


def _query_variable(name: str, label: str, query: str) -> JSON:
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": f"PrometheusVariableQueryEditor-{name}"},
            "refresh": 2, "sort": 1, "multi": True, "includeAll": True,
            "allValue": ".*", "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "hide": 0, "regex": "", "options": []}


def variables() -> list[JSON]:
    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "hide": 0, "refresh": 1, "regex": "", "multi": False, "includeAll": False,
         "options": []},
        # several gateways (jobs) and replicas (instances) report the same series: pick, or see them all
        _query_variable("job", "Job", "label_values(llm_gateway_build_info, job)"),
        _query_variable("instance", "Instance", 'label_values(llm_gateway_build_info{job=~"$job"}, instance)'),
        _query_variable("model", "Model", 'label_values(llm_gateway_requests_total{job=~"$job", '
                        'instance=~"$instance"}, model)'),
        _query_variable("provider", "Provider", "label_values(llm_gateway_time_to_first_token_seconds_count"
                        '{job=~"$job", instance=~"$instance", model=~"$model"}, provider)'),
        _query_variable("key", "Key", 'label_values(llm_gateway_requests_total{job=~"$job", '
                        'instance=~"$instance", model=~"$model"}, key)'),
        # the control plane's teams (stored keys): narrows the panels of team-labelled metrics
        _query_variable("team", "Team", 'label_values(llm_gateway_team_requests_total{job=~"$job", '
                        'instance=~"$instance", model=~"$model"}, team)'),
    ]


def dashboard(uid: str, title: str, description: str, items: list[Panel | Row]) -> JSON:
    return {
        "uid": uid, "title": title, "description": description, "tags": TAGS,
        "editable": True, "graphTooltip": 1, "timezone": "browser", "refresh": "30s",
        "schemaVersion": 39, "version": 1, "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
            "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
            "type": "dashboard"}]},
        "links": [{"title": "LLM gateway dashboards", "type": "dashboards", "tags": TAGS, "asDropdown": True,
                   "includeVars": True, "keepTime": True, "targetBlank": False, "icon": "external link",
                   "tooltip": ""}],
        "templating": {"list": variables()},
        "panels": layout(items),
    }
