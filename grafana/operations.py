"""The "LLM gateway / Operations" dashboard (issue #62): what the gateway itself adds to the first token,
how continuation and session affinity turn out, and the health of the parts it leans on (the control
plane's store and its spend ledger, Redis, WebSocket connections). Imported by generate.py.
"""

from __future__ import annotations

from panels import RI, J, M, Panel, Query, Row, heatmap, quantiles, stat, timeseries

OVERHEAD = "llm_gateway_overhead_seconds"


def overhead_panels() -> list[Panel | Row]:
    return [
        Row("What the gateway adds to the first token"),
        timeseries("Gateway overhead p50 and p99 by API",
                   "The gateway's own share of each request's time to first token (docs/overhead.md): "
                   "TTFT minus the upstream's time, failed attempts, backoff, a hedge's delay and a hold "
                   "guardrail's wait. Milliseconds at most on a healthy gateway; a rise means the gateway "
                   "(CPU, event loop, its guardrails and redaction) got slower, not the provider.",
                   quantiles(OVERHEAD, M, "api", "{{api}}", ("0.5", "0.99")), unit="s", width=12),
        timeseries("Gateway overhead p99 by model",
                   "The 99th percentile of the gateway's own share of the first token's time, by model: "
                   "a model with a redaction profile or guardrails shows their cost here.",
                   quantiles(OVERHEAD, M, "model", "{{model}}", ("0.99",)), unit="s", width=12),
        heatmap("Gateway overhead distribution",
                "How the gateway's own share of TTFT is distributed (0.1 ms to 1 s buckets): one band is "
                "a steady gateway; a second band higher up is a minority of slow requests.",
                f"sum by (le) (increase({OVERHEAD}_bucket{{{M}}}[{RI}]))"),
        timeseries("Overhead share of time to first token",
                   "The gateway's own time as a share of the time to first token clients saw, by API: what "
                   "part of the wait the gateway can do anything about.",
                   [Query(f"sum by (api) (rate({OVERHEAD}_sum{{{M}}}[{RI}]))\n"
                          f"/ sum by (api) (rate(llm_gateway_time_to_first_token_seconds_sum{{{M}}}[{RI}]))",
                          "{{api}}")], unit="percentunit", width=12),
    ]


def session_panels() -> list[Panel | Row]:
    cont = "llm_gateway_continuations_total"
    return [
        Row("Continuation and session affinity"),
        timeseries("Continuations by mode and outcome",
                   "Streams that failed after their first token and were continued on another deployment "
                   "(models with continuation: on), by mode (prefill, regenerate) and outcome (ok, diverged, "
                   "failed). A climbing `failed` means clients see the error events.",
                   [Query(f"sum by (mode, outcome) (rate({cont}{{{M}}}[{RI}]))", "{{mode}} {{outcome}}")],
                   unit="ops", width=12),
        timeseries("Session affinity outcomes",
                   "Session requests of models with affinity: session, by result: kept (the session's own "
                   "deployment served, its prompt cache warm), moved (it could not: the next of the "
                   "session's ranking did), new (a session's first request on this replica).",
                   [Query(f"sum by (model, result) (rate(llm_gateway_affinity_total{{{M}}}[{RI}]))",
                          "{{model}} {{result}}")], unit="ops", width=12),
    ]


def store_up(width: int, height: int) -> Panel:
    """The store's health as one number; the overview's per-team row shows it too."""
    return stat("Store up",
                "1 while every selected gateway reaches the control plane's store; 0: stored keys are served "
                "from each replica's cache, admin writes answer 503 and spend rows wait in memory.",
                f"min(llm_gateway_store_up{{{J}}})", unit="none", width=width, height=height)


def health_panels() -> list[Panel | Row]:
    return [
        Row("Store, ledger, Redis and WebSocket connections"),
        store_up(width=6, height=4),
        stat("Redis degraded (replicas)",
             "Gateways counting rate limits and budgets locally because Redis is away (each replica then "
             "admits its own share). 0 on a healthy deployment.",
             f"sum(llm_gateway_state_degraded{{{J}}})", unit="none", red=1, width=6),
        stat("Spend rows not yet in the store",
             "Spend rows answered but not yet committed to the store's ledger, over every selected "
             "gateway. They are kept and retried; a backlog that grows means the store is down or slow.",
             f"sum(llm_gateway_ledger_pending_rows{{{J}}})", unit="none", width=6),
        stat("Open WebSocket connections",
             "Responses API connections in WebSocket mode open right now, over every selected gateway.",
             f"sum(llm_gateway_websocket_connections{{{J}}})", unit="none", width=6),
        timeseries("Ledger backlog by gateway",
                   "Spend rows waiting for the store, per gateway instance: a line that only climbs is a "
                   "store the ledger cannot write to (see the runbook's LLMGatewayLedgerBacklog).",
                   [Query(f"sum by (instance) (llm_gateway_ledger_pending_rows{{{J}}})", "{{instance}}")],
                   unit="none", width=12),
        timeseries("Redis degraded and WebSocket connections by gateway",
                   "Per gateway instance: 1 while its limits are counted locally (Redis away), and its "
                   "open WebSocket-mode connections.",
                   [Query(f"max by (instance) (llm_gateway_state_degraded{{{J}}})", "degraded {{instance}}"),
                    Query(f"sum by (instance) (llm_gateway_websocket_connections{{{J}}})",
                          "websockets {{instance}}")], unit="none", width=12),
    ]


def operations_panels() -> list[Panel | Row]:
    return [*overhead_panels(), *session_panels(), *health_panels()]
