"""`GET /admin/v1/stats?window_s=3600`: per model, this replica's own recent numbers (docs/console.md,
Stats): requests, error rate, time to first token p50/p95, and the gateway's overhead p50 (null when no
request of the window measured one). Read from `observe.stats_window`, never from the store."""

from __future__ import annotations

from urllib.parse import parse_qsl

from gateway.errors import InvalidRequest
from gateway.http import Response, json_response
from gateway.observe.stats_window import MAX_WINDOW_S, WINDOW, ModelStats
from gateway.pipeline.exchange import GatewayRequest
from gateway.store import ControlPlane
from gateway.store.types import Actor

MIN_WINDOW_S = 60


def window_of(query: str) -> int:
    raw = dict(parse_qsl(query, keep_blank_values=True)).get("window_s", str(MAX_WINDOW_S))
    # ASCII digits, few of them, before int(): "²".isdigit() holds, and int() of a long string raises
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6) or not MIN_WINDOW_S <= int(raw) <= MAX_WINDOW_S:
        raise InvalidRequest(f"window_s must be an integer from {MIN_WINDOW_S} to {MAX_WINDOW_S}",
                             param="window_s")
    return int(raw)


def _row(s: ModelStats) -> dict[str, object]:
    return {"model": s.model, "requests": s.requests, "errors": s.errors, "error_rate": round(s.error_rate, 6),
            "ttft_p50_s": s.ttft_p50_s, "ttft_p95_s": s.ttft_p95_s, "overhead_p50_s": s.overhead_p50_s}


async def stats(request: GatewayRequest, cp: ControlPlane, actor: Actor, parts: list[str]) -> Response:
    window_s = window_of(request.head.query)
    return json_response({"object": "list", "window_s": window_s,
                          "data": [_row(s) for s in WINDOW.snapshot(window_s)]})
