#!/usr/bin/env python3
"""Writes the gateway's Grafana dashboards (grafana/dashboards/*.json) from the definitions in this file.

Run `python grafana/generate.py` after changing a panel and commit the JSON it writes;
`python grafana/generate.py --check` exits 1 when the committed JSON differs from what this file makes.
Plain dicts rather than an SDK: the output must not change when a library upgrades, because the tests
compare the committed files with this script's output byte for byte.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from operations import operations_panels, store_up
from panels import (
    RI,
    J,
    M,
    Panel,
    Query,
    Row,
    dashboard,
    heatmap,
    quantiles,
    stat,
    timeseries,
)

DASHBOARD_DIR = Path(__file__).resolve().parent / "dashboards"

MP = f'{M}, provider=~"$provider"'
K = f'{MP}, key=~"$key"'
GW_TTFT = "llm_gateway_time_to_first_token_seconds"
UP_TTFT = "llm_gateway_upstream_time_to_first_token_seconds"
TPOT = "llm_gateway_time_per_output_token_seconds"
REQ = "llm_gateway_requests_total"
ATT = "llm_gateway_upstream_attempts_total"
# Requests that reached at least one upstream attempt: the others were refused by the gateway itself.
UPSTREAM_BOUND = 'outcome!~"client_error|auth_error|rate_limited|guardrail_blocked"'


def mean(metric: str, sel: str, by: str, window: str = RI) -> str:
    agg = f"sum by ({by}) " if by else "sum"
    return (f"{agg}(rate({metric}_sum{{{sel}}}[{window}]))\n"
            f"/ {agg}(rate({metric}_count{{{sel}}}[{window}]))")


def ratio_or_zero(num: str, den: str) -> str:
    """num/den, reading 0 (with den's labels) when num has no series: the healthy case shows a line."""
    return f"(\n  {num}\n  or 0 * {den}\n)\n/ {den}"


# ---------------------------------------------------------------- TTFT dashboard


def ttft_summary() -> list[Panel | Row]:
    rng = "$__range"
    return [
        Row("Summary over the selected time range"),
        stat("Gateway TTFT p95",
             "95th percentile of time to first token as clients see it (request received to first output "
             "token written, retries and fallbacks included) over the whole selected time range.",
             f"histogram_quantile(0.95, sum by (le) (increase({GW_TTFT}_bucket{{{MP}}}[{rng}])))",
             unit="s", red=2.0),
        stat("Upstream TTFT p95",
             "95th percentile of the winning upstream attempt's own time to first token (request sent to "
             "first output token received) over the selected time range.",
             f"histogram_quantile(0.95, sum by (le) (increase({UP_TTFT}_bucket{{{MP}}}[{rng}])))",
             unit="s", red=2.0),
        stat("Gateway share of mean TTFT",
             "Part of the mean time to first token spent outside the winning upstream attempt: failed "
             "attempts, backoff, input guardrails and the gateway's own processing. Near 0 % is healthy; "
             "a high share means retries or fallbacks, not a slow model.",
             f"1 - (\n{mean(UP_TTFT, MP, '', rng)}\n) / (\n{mean(GW_TTFT, MP, '', rng)}\n)",
             unit="percentunit", red=0.2),
        stat("Upstream attempts per request",
             "Upstream attempts (hedges included) per request that reached an upstream, over the selected "
             "range. 1.0 means every request was served by its first attempt; more means retries, "
             "fallbacks or hedges.",
             f"sum(increase({ATT}{{{M}}}[{rng}]))\n/ sum(increase({REQ}{{{M}, {UPSTREAM_BOUND}}}[{rng}]))",
             unit="none", red=1.5, decimals=2),
    ]


def ttft_panels() -> list[Panel | Row]:
    by_mp = "model, provider"
    return [
        *ttft_summary(),
        Row("Time to first token"),
        timeseries("Gateway TTFT p50 / p90 / p99 by model and provider",
                   "Time to first token as the client sees it: from request received to the first output "
                   "token (content, reasoning, refusal or tool call) written to the client, retries, "
                   "fallbacks and hedges included. Compare with the upstream panel beside it.",
                   quantiles(GW_TTFT, MP, by_mp, "{{model}} · {{provider}}"), unit="s"),
        timeseries("Upstream TTFT p50 / p90 / p99 by model and provider",
                   "Time to first token of the winning upstream attempt alone: request sent upstream to "
                   "first output token received. The gap to the gateway panel is the gateway's share "
                   "(failed attempts, backoff, guardrails, processing).",
                   quantiles(UP_TTFT, MP, by_mp, "{{model}} · {{provider}}"), unit="s"),
        timeseries("Gateway share of TTFT (mean gateway TTFT minus mean upstream TTFT)",
                   "Mean seconds per first token spent outside the winning upstream attempt, by model and "
                   "provider. Grows with retries, fallbacks, backoff waits and slow input guardrails.",
                   [Query(f"(\n{mean(GW_TTFT, MP, by_mp)}\n)\n- (\n{mean(UP_TTFT, MP, by_mp)}\n)",
                          "{{model}} · {{provider}}")], unit="s"),
        timeseries("Upstream TTFT p90 by deployment",
                   "90th percentile of the winning attempt's time to first token per deployment "
                   "(provider/model), to find the slow upstream behind a model.",
                   [Query(f"histogram_quantile(0.9, sum by (le, deployment) "
                          f"(rate({UP_TTFT}_bucket{{{MP}}}[{RI}])))", "{{deployment}}")], unit="s"),
        heatmap("Gateway TTFT distribution",
                "Heatmap of the gateway TTFT histogram: how many first tokens fell in each latency bucket "
                "per interval. Bands show bimodal behaviour (e.g. cache hits vs. misses, fallbacks) that "
                "percentiles hide.",
                f"sum by (le) (increase({GW_TTFT}_bucket{{{MP}}}[{RI}]))"),
        heatmap("Upstream TTFT distribution",
                "Heatmap of the winning upstream attempt's TTFT histogram, to compare with the gateway "
                "heatmap beside it.",
                f"sum by (le) (increase({UP_TTFT}_bucket{{{MP}}}[{RI}]))"),
        Row("After the first token"),
        timeseries("Time per output token p50 / p90 / p99",
                   "Time between output tokens after the first one, by model and provider: the streaming "
                   "speed users feel once the answer has started.",
                   quantiles(TPOT, MP, by_mp, "{{model}} · {{provider}}"), unit="s"),
        timeseries("Text delay inside the gateway p50 / p99",
                   "Time text spends inside the gateway, from upstream receipt to client write, by API "
                   "(all models). Redaction and stream-mode guardrails hold back text that could still "
                   "match a rule; a rising p99 means long held runs.",
                   [Query(f"histogram_quantile({q}, sum by (le, api) "
                          f"(rate(llm_gateway_text_delay_seconds_bucket{{{J}}}[{RI}])))", f"p{p} {{{{api}}}}")
                    for q, p in (("0.5", "50"), ("0.99", "99"))], unit="s"),
        timeseries("Upstream attempts per request by model",
                   "Upstream attempts (hedges included) divided by requests that reached an upstream. 1 "
                   "means first-attempt success; each extra 0.1 is one retry, fallback or hedge per ten "
                   "requests, and each one adds to TTFT.",
                   [Query(f"sum by (model) (rate({ATT}{{{M}}}[{RI}]))\n"
                          f"/ sum by (model) (rate({REQ}{{{M}, {UPSTREAM_BOUND}}}[{RI}]))", "{{model}}")],
                   unit="none", decimals=2),
        timeseries("Request duration p50 / p99 by model (successful requests)",
                   "Whole-request time for successful requests: TTFT plus the time to stream the answer.",
                   quantiles("llm_gateway_request_duration_seconds", f'{M}, outcome="ok"', "model",
                             "{{model}}", levels=("0.5", "0.99")), unit="s"),
    ]


# ---------------------------------------------------------------- overview dashboard


def overview_summary() -> list[Panel | Row]:
    rng = "$__range"
    return [
        Row("Summary over the selected time range"),
        stat("Requests per second", "Requests received per second, all outcomes, averaged over the range.",
             f"sum(rate({REQ}{{{M}}}[{rng}]))", unit="reqps"),
        stat("Failed requests",
             "Share of requests that failed on the upstream side (upstream_error: every attempt failed; "
             "timeout: every attempt timed out) over the selected range.",
             ratio_or_zero(f"sum(increase({REQ}{{{M}, outcome=~\"upstream_error|timeout\"}}[{rng}]))",
                           f"sum(increase({REQ}{{{M}}}[{rng}]))"), unit="percentunit", red=0.01),
        stat("In flight", "Requests being served right now, all APIs.",
             f"sum(llm_gateway_inflight_requests{{{J}}})", unit="none"),
        stat("Tokens", "Input plus output tokens reported by the providers over the selected range.",
             f"sum(increase(llm_gateway_tokens_total{{{MP}, type=~\"input|output\"}}[{rng}]))",
             unit="short"),
        stat("Cost", "Spend over the selected range, from the deployments' configured prices.",
             f"sum(increase(llm_gateway_cost_usd_total{{{MP}}}[{rng}]))", unit="currencyUSD",
             decimals=2),
        stat("Stream failures after first token",
             "Streams that broke after the first token over the selected range: the client got a partial "
             "answer and an error event. These cannot be retried.",
             f"sum(increase(llm_gateway_stream_failures_total{{{M}}}[{rng}]))", unit="none",
             red=1, decimals=0),
    ]


def overview_traffic() -> list[Panel | Row]:
    total = f"sum(rate({REQ}{{{M}}}[{RI}]))"
    return [
        Row("Traffic"),
        timeseries("Requests per second by outcome",
                   "Requests received per second by outcome: ok, client_error, auth_error, rate_limited, "
                   "guardrail_blocked, upstream_error, timeout, cancelled (client went away).",
                   [Query(f"sum by (outcome) (rate({REQ}{{{M}}}[{RI}]))", "{{outcome}}")], unit="reqps"),
        timeseries("Error ratio",
                   "Share of requests that failed upstream (upstream_error, timeout: the gateway's and "
                   "providers' fault) and share refused on the client's side (bad request, auth, rate "
                   "limit, guardrail). 0 when nothing failed.",
                   [Query(ratio_or_zero(f"sum(rate({REQ}{{{M}, outcome=~\"upstream_error|timeout\"}}[{RI}]))",
                                        total), "failed upstream"),
                    Query(ratio_or_zero(f"sum(rate({REQ}{{{M}, outcome=~\"client_error|auth_error|rate_limited|"
                                        f"guardrail_blocked\"}}[{RI}]))", total),
                          "refused (client side)")],
                   unit="percentunit"),
        timeseries("Request duration p50 / p99 by API",
                   "Whole-request time by API and streaming mode, all outcomes.",
                   quantiles("llm_gateway_request_duration_seconds", M, "api, stream",
                             "{{api}} stream={{stream}}", levels=("0.5", "0.99")), unit="s"),
        timeseries("Requests in flight by API",
                   "Requests the gateway is serving at this moment, by API. Long streams keep this high; "
                   "a climb without more traffic means upstreams got slower.",
                   [Query(f"sum by (api) (llm_gateway_inflight_requests{{{J}}})", "{{api}}")], unit="none"),
    ]


def overview_upstream() -> list[Panel | Row]:
    return [
        Row("Upstream attempts"),
        timeseries("Upstream attempts by outcome (in-band errors shown separately)",
                   "Every upstream attempt per second by outcome: ok, connect_error, http_429, http_5xx, "
                   "http_4xx, first_token_timeout, idle_timeout, quota, hedge_cancelled, client_cancelled "
                   "(cut by the client's leaving before its first token). In-band errors are on the next panel.",
                   [Query(f"sum by (outcome) (rate({ATT}{{{M}, outcome!=\"inband_error\"}}[{RI}]))",
                          "{{outcome}}")], unit="ops"),
        timeseries("In-band upstream errors by deployment",
                   "Attempts that got HTTP 200 but carried an error inside the stream (chat error chunk, "
                   "Responses error/response.failed, Anthropic overloaded_error). Status-code dashboards "
                   "miss these. Before the first token they are retried invisibly.",
                   [Query(f"sum by (deployment) (rate({ATT}{{{M}, outcome=\"inband_error\"}}[{RI}]))",
                          "{{deployment}}")], unit="ops"),
        timeseries("Retries and fallbacks: failed attempts by deployment",
                   "Attempts that failed before the first token, by deployment and reason. Each one was "
                   "followed by a retry, a fallback to the next deployment, or (when none was left) an "
                   "error to the client.",
                   [Query(f"sum by (deployment, outcome) (rate({ATT}{{{M}, "
                          f"outcome!~\"ok|hedge_cancelled|client_cancelled\"}}[{RI}]))",
                          "{{deployment}} {{outcome}}")], unit="ops"),
        timeseries("Hedges by winner",
                   "Hedged requests per second (a second attempt started because the first token was late) "
                   "by which attempt produced the first token: primary or hedge.",
                   [Query(f"sum by (model, winner) (rate(llm_gateway_hedges_total{{{M}}}[{RI}]))",
                          "{{model}} {{winner}}")], unit="ops"),
        timeseries("Routing: first choices by deployment, and the learned TTFT",
                   "Left axis: requests per second by the deployment routing chose first (not fallbacks "
                   "or hedges) and the model's policy (ordered, balanced, weighted, latency, cost): a "
                   "canary's share, a tier taking over. Also: the learned upstream TTFT average (30 s "
                   "half-life) per deployment and API that latency and cost route by, highest replica "
                   "shown; absent until learned.",
                   [Query(f"sum by (model, deployment, policy) (rate(llm_gateway_routing_decisions_total{{{M}}}"
                          f"[{RI}]))", "{{model}} · {{deployment}} ({{policy}})"),
                    Query(f"max by (model, deployment, api) (llm_gateway_deployment_ttft_seconds{{{M}}})",
                          "TTFT {{deployment}} {{api}}")], unit="short"),
        timeseries("Stream failures after the first token",
                   "Streams that failed after the first token, by deployment and reason (upstream error, "
                   "idle stall, output guardrail). The client got partial text and one error event.",
                   [Query(f"sum by (deployment, reason) (rate(llm_gateway_stream_failures_total{{{M}}}"
                          f"[{RI}]))", "{{deployment}} {{reason}}")], unit="ops"),
        timeseries("Responses without usage",
                   "Responses whose upstream reported no token usage. Their tokens and cost are not "
                   "counted and do not count against TPM limits or budgets.",
                   [Query(f"sum by (model, provider) (rate(llm_gateway_usage_missing_total{{{MP}}}[{RI}]))",
                          "{{model}} · {{provider}}")], unit="ops"),
    ]


def overview_tokens() -> list[Panel | Row]:
    tok = "llm_gateway_tokens_total"
    inp = f"sum by (model, provider) (rate({tok}{{{MP}, type=\"input\"}}[{RI}]))"
    cached = f"sum by (model, provider) (rate({tok}{{{MP}, type=\"cached_input\"}}[{RI}]))"
    return [
        Row("Tokens and cost"),
        timeseries("Tokens per second by type",
                   "Tokens reported by providers per second: input (all prompt tokens, cached included), "
                   "output (reasoning included), and the cached_input, cache_creation_input and reasoning "
                   "parts of them.",
                   [Query(f"sum by (type) (rate({tok}{{{MP}}}[{RI}]))", "{{type}}")], unit="short"),
        timeseries("Cost per hour by model and provider",
                   "Spend rate in USD per hour, from the serving deployment's configured prices, so "
                   "fallback traffic is charged to the deployment that served it. 0 without prices.",
                   [Query(f"(sum by (model, provider) (rate(llm_gateway_cost_usd_total{{{MP}}}[{RI}])) "
                          "* 3600)", "{{model}} · {{provider}}")], unit="currencyUSD"),
        timeseries("Cache-read share of input tokens",
                   "Share of input tokens read from the provider's prompt cache, by model and the provider of "
                   "the deployment that served (docs/caching.md). Cached tokens are cheaper and faster; a drop "
                   "means prompts stopped sharing a prefix or lost their cache markers.",
                   [Query(ratio_or_zero(cached, inp), "{{model}} · {{provider}}")], unit="percentunit"),
        timeseries("Output tokens per request by model",
                   "Mean output tokens per successful request, by model.",
                   [Query(f"sum by (model) (rate({tok}{{{MP}, type=\"output\"}}[{RI}]))\n"
                          f"/ sum by (model) (rate({REQ}{{{M}, outcome=\"ok\"}}[{RI}]))", "{{model}}")],
                   unit="short"),
    ]


def overview_keys() -> list[Panel | Row]:
    """Attribution: what each gateway key (a team, an application) sent, used and spent."""
    rng = "$__range"
    return [
        Row("Per key"),
        timeseries("Requests per second by key",
                   "Requests per second by gateway key (its configured name; `none` without auth) and "
                   "outcome.",
                   [Query(f"sum by (key, outcome) (rate({REQ}{{{M}, key=~\"$key\"}}[{RI}]))", "{{key}} {{outcome}}")],
                   unit="reqps", width=8),
        timeseries("Tokens per second by key",
                   "Input plus output tokens per second that the providers reported, by gateway key.",
                   [Query(f"sum by (key) (rate(llm_gateway_tokens_total{{{K}, type=~\"input|output\"}}[{RI}]))",
                          "{{key}}")], unit="short", width=8),
        timeseries("Cost per hour by key",
                   "Spend rate in USD per hour by gateway key, from the serving deployments' prices. A key's "
                   "spend in its budget period: GET /v1/gateway/spend with that key.",
                   [Query(f"sum by (key) (rate(llm_gateway_cost_usd_total{{{K}}}[{RI}])) * 3600", "{{key}}")],
                   unit="currencyUSD", width=8),
        stat("Spend by key over the selected range",
             "USD spent by each gateway key over the selected time range.",
             f"sum by (key) (increase(llm_gateway_cost_usd_total{{{K}}}[{rng}]))", unit="currencyUSD",
             legend="{{key}}", decimals=2, width=24),
    ]


def overview_teams() -> list[Panel | Row]:
    """The control plane's teams (stored keys, docs/keys-teams-spend.md): requests and spend by team."""
    rng = "$__range"
    team = "llm_gateway_team_cost_usd_total"
    return [
        Row("Per team (control plane)"),
        timeseries("Requests per second by team",
                   "Answered requests per second of stored keys, by their team (control plane; empty "
                   "without store.url). The spend ledger holds the same per request.",
                   [Query(f"sum by (team) (rate(llm_gateway_team_requests_total{{{M}}}[{RI}]))", "{{team}}")],
                   unit="reqps", width=8),
        timeseries("Cost per hour by team",
                   "Spend rate in USD per hour by team, from the serving deployments' prices. The monthly "
                   "report: GET /admin/v1/spend?group_by=team,model.",
                   [Query(f"sum by (team) (rate({team}{{{M}}}[{RI}])) * 3600", "{{team}}")],
                   unit="currencyUSD", width=8),
        store_up(width=4, height=8),
        timeseries("Store errors per second",
                   "Failed store operations by kind: refresh (the key cache's poll), ledger (spend rows, kept "
                   "and retried), admin (answered 503).",
                   [Query(f"sum by (op) (rate(llm_gateway_store_errors_total{{{J}}}[{RI}]))", "{{op}}")],
                   unit="ops", width=4),
        stat("Spend by team over the selected range",
             "USD spent by each team's stored keys over the selected time range, by team.",
             f"sum by (team) (increase({team}{{{M}}}[{rng}]))", unit="currencyUSD",
             legend="{{team}}", decimals=2, width=24),
    ]


def overview_safety() -> list[Panel | Row]:
    ver = "llm_gateway_guardrail_verdicts_total"
    blocks = f"sum by (guardrail, stage) (rate({ver}{{{J}, verdict=\"block\"}}[{RI}]))"
    return [
        Row("Safety and limits"),
        timeseries("Guardrail blocks per second",
                   "Guardrail verdicts that blocked, by guardrail and stage (input: request refused "
                   "with 400; output: stream ended with an error event). A failing webhook blocks too.",
                   [Query(f"{blocks}", "{{guardrail}} {{stage}}")], unit="ops", width=8),
        timeseries("Guardrail block ratio",
                   "Share of each guardrail's verdicts that blocked. A sudden rise with unchanged "
                   "traffic points at a broken webhook or an over-broad rule.",
                   [Query(ratio_or_zero(blocks, f"sum by (guardrail, stage) (rate({ver}{{{J}}}[{RI}]))"),
                          "{{guardrail}} {{stage}}")], unit="percentunit", width=8),
        timeseries("Redactions per second by rule",
                   "Matches masked as [REDACTED:<rule>] in text sent to clients (and in prompts when "
                   "input masking is on), by rule.",
                   [Query(f"sum by (rule) (rate(llm_gateway_redactions_total{{{J}}}[{RI}]))",
                          "{{rule}}")], unit="ops", width=8),
        timeseries("Rate-limited requests by key and limit",
                   "Requests refused with 429 because a gateway key went over its requests-per-minute "
                   "(rpm) or tokens-per-minute (tpm) limit.",
                   [Query(f"sum by (key, limit) (rate(llm_gateway_rate_limited_total{{{J}}}[{RI}]))",
                          "{{key}} {{limit}}")], unit="reqps", width=16),
        stat("Gateway instances by version",
             "Number of gateway processes reporting each version: during a rollout two versions show.",
             f"count by (version) (llm_gateway_build_info{{{J}}})", unit="none", legend="{{version}}",
             width=8, height=8),
    ]


def build() -> dict[str, dict[str, object]]:
    """File name -> dashboard JSON model."""
    return {
        "llm-gateway-ttft.json": dashboard(
            "llm-gateway-ttft", "LLM gateway / Time to first token",
            "Time to first token through the gateway against the upstream's own, its distribution, "
            "streaming speed after it, and the attempts that delay it.", ttft_panels()),
        "llm-gateway-overview.json": dashboard(
            "llm-gateway-overview", "LLM gateway / Overview",
            "Traffic, errors, upstream attempts, tokens, cost and safety of the LLM gateway.",
            [*overview_summary(), *overview_traffic(), *overview_upstream(), *overview_tokens(),
             *overview_keys(), *overview_teams(), *overview_safety()]),
        "llm-gateway-operations.json": dashboard(
            "llm-gateway-operations", "LLM gateway / Operations",
            "What the gateway itself adds to the first token, continuation and session affinity, and the "
            "health of the store, the spend ledger, Redis and WebSocket connections.", operations_panels()),
    }


def render(model: dict[str, object]) -> str:
    return json.dumps(model, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, model in build().items():
        path = DASHBOARD_DIR / name
        text = render(model)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print("out of date, run python grafana/generate.py: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
