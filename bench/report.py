"""Turn raw measurements into the figures of the issue, check them against the targets, render markdown."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.scenarios import Scenario
from bench.variants import BUDGETS


@dataclass
class Measure:
    """One target in one scenario, summed over its rounds."""

    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    ttft_s: list[float] = field(default_factory=list)
    total_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # the measured server's process tree
    upstream_cpu_s: float = 0.0
    loadgen_cpu_s: float = 0.0
    max_open: int = 0
    rss_before_kib: int = 0  # before the first round
    hwm_after_kib: int = 0  # peak, after the last round
    procs: int = 0
    error_samples: dict[str, str] = field(default_factory=dict)
    # the loop-lag probe's ticks in the rounds (bench/loop_lag.py): lateness, and the loop's own part, ms
    lag_ms: list[float] = field(default_factory=list)
    lag_cpu_ms: list[float] = field(default_factory=list)
    hostile: Counter[str] = field(default_factory=Counter)  # bench/hostile.py's requests by outcome

    def add_round(self, lg: dict[str, Any], cpu_s: float, upstream_cpu_s: float) -> None:
        self.ok += lg["ok"]
        self.errors.update(lg["errors"])
        self.ttft_s += lg["ttft_s"]
        self.total_s += lg["total_s"]
        self.wall_s += lg["wall_s"]
        self.cpu_s += cpu_s
        self.upstream_cpu_s += upstream_cpu_s
        self.loadgen_cpu_s += lg["cpu_s"]
        self.max_open = max(self.max_open, lg["max_open"])
        for kind, sample in lg.get("error_samples", {}).items():
            self.error_samples.setdefault(kind, sample)

    @property
    def requests(self) -> int:
        return self.ok + sum(self.errors.values())


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); nan when empty."""
    if not values:
        return math.nan
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def figures(sc: Scenario, m: Measure) -> dict[str, float]:
    n = max(1, m.requests)
    out = {"requests": float(m.requests), "errors": float(sum(m.errors.values())),
           "req_per_s": m.requests / m.wall_s if m.wall_s else math.nan,
           "cpu_ms_per_req": m.cpu_s * 1000 / n,
           "cpu_us_per_chunk": m.cpu_s * 1e6 / (n * sc.chunks),
           "upstream_cpu_ms_per_req": m.upstream_cpu_s * 1000 / n,
           "loadgen_cpu_ms_per_req": m.loadgen_cpu_s * 1000 / n,
           "ttft_p50_ms": pct(m.ttft_s, 50) * 1000, "ttft_p99_ms": pct(m.ttft_s, 99) * 1000,
           "total_p50_ms": pct(m.total_s, 50) * 1000, "max_open": float(m.max_open),
           "rss_before_mib": m.rss_before_kib / 1024, "hwm_after_mib": m.hwm_after_kib / 1024,
           "lag_p99_ms": pct(m.lag_ms, 99), "lag_max_ms": max(m.lag_ms, default=math.nan),
           "lag_cpu_p99_ms": pct(m.lag_cpu_ms, 99), "lag_cpu_max_ms": max(m.lag_cpu_ms, default=math.nan)}
    out["hostile_requests"] = float(sum(m.hostile.values()))
    out["kib_per_stream"] = (m.hwm_after_kib - m.rss_before_kib) / m.max_open if m.max_open else math.nan
    return out


# scenario -> the figures its table shows, with how each is printed
COLUMNS: dict[str, list[tuple[str, str]]] = {
    "S1": [("ttft_p50_ms", "TTFT p50 ms"), ("ttft_p99_ms", "TTFT p99 ms"), ("added_p50_ms", "added p50 ms"),
           ("added_p99_ms", "added p99 ms"), ("total_p50_ms", "total p50 ms"), ("cpu_ms_per_req", "CPU ms/req")],
    "S1w": [("ttft_p50_ms", "TTFT p50 ms"), ("ttft_p99_ms", "TTFT p99 ms"), ("added_p50_ms", "added p50 ms"),
            ("added_p99_ms", "added p99 ms"), ("total_p50_ms", "total p50 ms")],
    "S2": [("req_per_s", "req/s"), ("cpu_ms_per_req", "CPU ms/req"), ("ttft_p50_ms", "TTFT p50 ms"),
           ("upstream_cpu_ms_per_req", "upstream CPU ms/req"), ("loadgen_cpu_ms_per_req", "loadgen CPU ms/req")],
    "S2t": [("req_per_s", "req/s"), ("cpu_ms_per_req", "CPU ms/req"), ("ttft_p50_ms", "TTFT p50 ms"),
            ("upstream_cpu_ms_per_req", "upstream CPU ms/req")],
    "S3": [("req_per_s", "req/s"), ("cpu_us_per_chunk", "CPU µs/chunk"), ("cpu_ms_per_req", "CPU ms/req")],
    "S3p": [("req_per_s", "req/s"), ("cpu_us_per_chunk", "CPU µs/chunk"), ("total_p50_ms", "total p50 ms")],
    "M2": [("req_per_s", "req/s"), ("cpu_ms_per_req", "CPU ms/req"), ("ttft_p50_ms", "TTFT p50 ms"),
           ("upstream_cpu_ms_per_req", "upstream CPU ms/req")],
    "M3": [("req_per_s", "req/s"), ("cpu_us_per_chunk", "CPU µs/chunk"), ("cpu_ms_per_req", "CPU ms/req")],
    "S4": [("max_open", "open at once"), ("rss_before_mib", "RSS before MiB"), ("hwm_after_mib", "peak MiB"),
           ("kib_per_stream", "KiB/stream"), ("ttft_p50_ms", "TTFT p50 ms"), ("ttft_p99_ms", "TTFT p99 ms"),
           ("total_p50_ms", "total p50 ms"), ("cpu_ms_per_req", "CPU ms/req")],
}
COLUMNS["S3n"] = [("req_per_s", "req/s"), ("cpu_us_per_chunk", "CPU µs/chunk"), ("cpu_ms_per_req", "CPU ms/req")]
for _key in ("S2r", "S2f"):
    COLUMNS[_key] = [("req_per_s", "req/s"), ("cpu_ms_per_req", "CPU ms/req"), ("ttft_p50_ms", "TTFT p50 ms"),
                     ("ttft_p99_ms", "TTFT p99 ms")]
HOSTILE_KEYS = ("S2hb", "S2hd", "S2hs", "S2hn")  # S2 beside bench/hostile.py's clients
for _key in HOSTILE_KEYS:
    COLUMNS[_key] = [("req_per_s", "req/s"), ("ttft_p50_ms", "TTFT p50 ms"), ("ttft_p99_ms", "TTFT p99 ms"),
                     ("cpu_ms_per_req", "CPU ms/req (with the hostile's)"), ("hostile_requests", "hostile requests")]
for _cols in COLUMNS.values():  # every scenario: the loop-lag probe's figures (gateway targets)
    _cols += [("lag_p99_ms", "loop lag p99 ms"), ("lag_max_ms", "loop lag max ms"),
              ("lag_cpu_p99_ms", "own lag p99 ms"), ("lag_cpu_max_ms", "own lag max ms")]
# the figure whose ratio to nginx's is shown
RATIO_OF = {"S1": "cpu_ms_per_req", "S1w": "cpu_ms_per_req", "S2": "cpu_ms_per_req", "S2t": "cpu_ms_per_req",
            "S3": "cpu_us_per_chunk", "S3p": "cpu_us_per_chunk", "S4": "kib_per_stream",
            "M2": "cpu_ms_per_req", "M3": "cpu_us_per_chunk", "S2r": "cpu_ms_per_req", "S2f": "cpu_ms_per_req",
            "S3n": "cpu_us_per_chunk", **dict.fromkeys(HOSTILE_KEYS, "cpu_ms_per_req")}


def summarize(sc: Scenario, measures: dict[str, Measure]) -> dict[str, dict[str, float]]:
    out = {t: figures(sc, m) for t, m in measures.items()}
    direct = out.get("direct")
    if direct is not None:
        for f in out.values():
            f["added_p50_ms"] = f["ttft_p50_ms"] - direct["ttft_p50_ms"]
            f["added_p99_ms"] = f["ttft_p99_ms"] - direct["ttft_p99_ms"]
    return out


@dataclass(frozen=True)
class Verdict:
    target: str
    met: bool | None  # None: not measured
    detail: str


def _check(name: str, value: float, limit: float, unit: str) -> Verdict:
    if math.isnan(value):
        return Verdict(name, None, "not measured")
    met = value <= limit
    how = f"{value:.3g} {unit} vs ≤ {limit:g} {unit}"
    return Verdict(name, met, how + ("" if met else f": missed by {value - limit:.3g} {unit} ({value / limit:.1f}x)"))


def verdicts(summary: dict[str, dict[str, dict[str, float]]]) -> list[Verdict]:
    nan = math.nan
    g = {k: v.get("gateway", {}) for k, v in summary.items()}
    ng = {k: v.get("nginx", {}) for k, v in summary.items()}
    out = [
        _check("S1 added TTFT p50", g.get("S1", {}).get("added_p50_ms", nan), 1.0, "ms"),
        _check("S1 added TTFT p99", g.get("S1", {}).get("added_p99_ms", nan), 5.0, "ms"),
        _check("S2 CPU per streamed request", g.get("S2", {}).get("cpu_ms_per_req", nan), 1.0, "ms"),
    ]
    s2g, s2n = g.get("S2", {}).get("cpu_ms_per_req", nan), ng.get("S2", {}).get("cpu_ms_per_req", nan)
    out.append(_check("S2 CPU per request vs nginx", s2g / s2n if s2n else nan, 5.0, "x nginx"))
    out.append(_check("S3 CPU per chunk", g.get("S3", {}).get("cpu_us_per_chunk", nan), 8.0, "µs"))
    # issue "Anthropic Messages API inbound", point 5: a native Messages stream costs no more CPU per event
    # than a chat stream of the same size (M3 beside S3, M2 beside S2, from the same run)
    for m, c, fig, unit in (("M3", "S3", "cpu_us_per_chunk", "µs/chunk"), ("M2", "S2", "cpu_ms_per_req", "ms/req")):
        mv, cv = g.get(m, {}).get(fig, nan), g.get(c, {}).get(fig, nan)
        if not (math.isnan(mv) or math.isnan(cv)):
            out.append(_check(f"{m} CPU vs {c} (Messages vs chat, same size)", mv, cv * 1.0, unit))
    # issues #58, #59, #61 (`--variants`, bench/variants.py): a variant's CPU per S2 request over its reference's
    s2 = summary.get("S2", {})
    for this, ref, budget in BUDGETS:
        a, b = (s2.get(t, {}).get("cpu_ms_per_req", nan) for t in (this, ref))
        if not (math.isnan(a) or math.isnan(b)):
            out.append(_check(f"S2 CPU per request, {this} vs {ref}", a / b, budget, f"x {ref}"))
    # issue #34, acceptance 3: redaction secrets+pii on text without whitespace, against redaction off
    s3n = summary.get("S3n", {})
    on, off = (s3n.get(t, {}).get("cpu_us_per_chunk", nan) for t in ("gateway", "gateway-noredact"))
    out.append(_check("S3n CPU per chunk, redaction on vs off", on / off if off else nan, 1.5, "x off"))
    # issue #34, acceptance 2: the loop never stalls, in S2, under reloads, and when failures start
    for key, target in (("S2", "gateway"), ("S2r", "gateway"), ("S2f", "gateway-faults")):
        lag = summary.get(key, {}).get(target, {})
        out.append(_check(f"{key} loop lag p99", lag.get("lag_p99_ms", nan), 5.0, "ms"))
        out.append(_check(f"{key} loop lag max", lag.get("lag_max_ms", nan), 50.0, "ms"))
    s4 = g.get("S4", {})
    out.append(_check("S4 RSS per open stream", s4.get("kib_per_stream", nan), 64.0, "KiB"))
    if s4:
        errs = s4.get("errors", nan)
        out.append(Verdict("S4 no errors", errs == 0, f"{errs:g} errors in {s4.get('requests', 0):g} streams"))
    return out


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "-"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def table(sc: Scenario, figs: dict[str, dict[str, float]]) -> list[str]:
    cols = COLUMNS[sc.key]
    ratio = RATIO_OF[sc.key]
    head = ["target", "requests", "errors", *(c[1] for c in cols), "÷ nginx"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = figs.get("nginx", {}).get(ratio, math.nan)
    for target, f in figs.items():
        r = f.get(ratio, math.nan) / base if base and not math.isnan(base) and target != "direct" else math.nan
        cells = [target, _fmt(f["requests"]), _fmt(f["errors"]), *(_fmt(f.get(c[0], math.nan)) for c in cols),
                 "-" if math.isnan(r) else f"{r:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(machine: dict[str, str], scenarios: list[Scenario], summary: dict[str, dict[str, dict[str, float]]],
             errors: dict[str, dict[str, dict[str, Any]]], checks: list[Verdict]) -> str:
    out = ["# Benchmark results", "", "## Machine", ""]
    out += [f"- {k}: {v}" for k, v in machine.items()]
    for sc in scenarios:
        if sc.key not in summary:
            continue
        out += ["", f"## {sc.key} — {sc.title}", "", *table(sc, summary[sc.key])]
        for target, errs in errors.get(sc.key, {}).items():
            if errs["counts"]:
                out.append(f"\n{target} errors: " + ", ".join(f"{k}: {v}" for k, v in sorted(errs["counts"].items())))
                out += [f"- first {k}: `{v.strip()}`" for k, v in sorted(errs["first"].items())]
            if errs.get("hostile"):
                out.append(f"\n{target}, the hostile client's answers: "
                           + ", ".join(f"{k}: {v}" for k, v in sorted(errs["hostile"].items())))
    out += ["", "## Targets (gateway)", ""]
    for v in checks:
        if v.met is None:
            out.append(f"- {v.target}: not measured in this run")
            continue
        out.append(f"- {v.target}: **{'met' if v.met else 'MISSED'}** — {v.detail}")
    return "\n".join(out) + "\n"
