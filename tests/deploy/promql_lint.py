"""A small PromQL reader for the dashboard and alert tests: which series and labels an expression uses.

Not a full parser (Prometheus itself parses every query in test_prometheus_live.py and promtool in
test_alerts.py); it only has to find metric selectors, their label matchers and grouping labels well
enough to check them against the contract table in tests/contract_metrics.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tests.contract_metrics import SERIES, TARGET_LABELS

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<range>\[[^\]]*\])
  | (?P<duration>(?:\d+[smhdwy])+\b)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){},])
""", re.VERBOSE)

KEYWORDS = frozenset({"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                      "group_right", "offset", "bool", "inf", "nan"})
GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
# Grafana's variables, replaced by values a test Prometheus can evaluate.
GRAFANA_VARS: Mapping[str, str] = {
    "$__rate_interval": "1m", "$__range": "5m", "$__interval": "15s", "$model": "demo", "$provider": "demo",
    "$job": "llm-gateway", "$instance": "127.0.0.1:[0-9]+", "$key": "team-a", "$team": "search",
}


@dataclass(frozen=True, slots=True)
class Matcher:
    label: str
    op: str
    value: str


@dataclass(frozen=True, slots=True)
class Selector:
    name: str
    matchers: tuple[Matcher, ...]


@dataclass(frozen=True, slots=True)
class Parsed:
    selectors: tuple[Selector, ...]
    grouping: frozenset[str]
    functions: frozenset[str]


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot read PromQL at {expr[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup != "ws":
            out.append((str(m.lastgroup), m.group()))
    return out


def _matchers(toks: list[tuple[str, str]], i: int) -> tuple[tuple[Matcher, ...], int]:
    """Reads `{label op "value", ...}` starting at the `{` at index i; returns matchers and next index."""
    found, i = [], i + 1
    while toks[i][1] != "}":
        if toks[i][1] == ",":
            i += 1
            continue
        (_, label), (_, op), (kind, value) = toks[i], toks[i + 1], toks[i + 2]
        if kind != "string" or op not in ("=", "!=", "=~", "!~"):
            raise ValueError(f"bad label matcher near {label} {op} {value}")
        found.append(Matcher(label, op, value[1:-1]))
        i += 3
    return tuple(found), i + 1


def _label_list(toks: list[tuple[str, str]], i: int) -> tuple[list[str], int]:
    """Reads `(a, b)` starting at the `(` at index i."""
    labels, i = [], i + 1
    while toks[i][1] != ")":
        if toks[i][0] == "ident":
            labels.append(toks[i][1])
        i += 1
    return labels, i + 1


def parse(expr: str) -> Parsed:
    toks = tokens(expr)
    selectors: list[Selector] = []
    grouping: set[str] = set()
    functions: set[str] = set()
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        if kind == "op" and text == "{":
            raise ValueError("selector without a metric name")
        if kind != "ident":
            i += 1
            continue
        if text in GROUPING and nxt == "(":
            labels, i = _label_list(toks, i + 1)
            grouping.update(labels)
        elif text in KEYWORDS:
            i += 1
        elif nxt == "(" or nxt in ("by", "without"):  # a function, or an aggregation like `sum by (...)`
            functions.add(text)
            i += 1
        elif nxt == "{":
            found, i = _matchers(toks, i + 1)
            selectors.append(Selector(text, found))
        else:
            selectors.append(Selector(text, ()))
            i += 1
    return Parsed(tuple(selectors), frozenset(grouping), frozenset(functions))


def _values(m: Matcher) -> list[str] | None:
    """The literal values a matcher names, or None when it is a real regex or a variable."""
    if "$" in m.value:
        return None
    if m.op in ("=", "!="):
        return [m.value]
    alts = m.value.split("|")
    return alts if all(re.fullmatch(r"[A-Za-z0-9_\-]+", a) for a in alts) else None


def problems(expr: str, extra_names: Iterable[str] = ()) -> list[str]:
    """What is wrong with expr against the contract: unknown series, labels or label values."""
    try:
        parsed = parse(expr)
    except (ValueError, IndexError) as exc:
        return [f"unreadable: {exc}"]
    extra = set(extra_names)
    found: list[str] = []
    usable_labels: set[str] = set(TARGET_LABELS)
    for sel in parsed.selectors:
        spec = SERIES.get(sel.name)
        if spec is None:
            if sel.name not in extra:
                found.append(f"{sel.name} is not a contract series (histogram suffix on a non-histogram, "
                             "or a histogram without _bucket/_sum/_count?)")
            continue
        labels = spec.labels_of(sel.name)
        usable_labels |= labels
        for m in sel.matchers:
            if m.label not in labels:
                found.append(f"{sel.name} has no label {m.label}")
                continue
            allowed = spec.values.get(m.label)
            for v in (_values(m) or []) if allowed else []:
                if v not in allowed:
                    found.append(f"{sel.name}: {m.label}={v!r} is not one of {allowed}")
    only_contract = all(s.name in SERIES for s in parsed.selectors)
    if only_contract:
        for label in parsed.grouping - usable_labels:
            found.append(f"groups by {label}, which none of its series has")
    if "histogram_quantile" in parsed.functions and "le" not in parsed.grouping:
        found.append("histogram_quantile without grouping by le")
    return found


def substitute(expr: str) -> str:
    """expr with Grafana's variables replaced (longest names first, so $__range is not eaten by $__r...)."""
    for name in sorted(GRAFANA_VARS, key=len, reverse=True):
        expr = expr.replace("${" + name[1:] + "}", GRAFANA_VARS[name]).replace(name, GRAFANA_VARS[name])
    return expr
