"""`GET /v1/gateway/spend`: what the calling key has spent in its current budget period.

Authenticated by the key itself (`Authorization: Bearer <key>`, `api-key`, or `x-api-key` as the
Messages API takes it, so a tool configured for Anthropic's header reads it too), so a team reads
its own spend and nobody else's; the figure is the one budgets are enforced against (the state backend's,
shared across replicas with Redis, started from the store's ledger), from deployment prices. A key in a
team also gets its team's figures, and `budget_usd`/`remaining_usd`/`limited_by` name the limit that
applies (the one with the least left). Per-key spend over time is the metric
`llm_gateway_cost_usd_total{key}` (docs/reference.md, "Metrics").
"""

from __future__ import annotations

from gateway.errors import InvalidApiKey
from gateway.http import Response, json_response
from gateway.pipeline.exchange import GatewayRequest
from gateway.state.base import Period, period_id


async def key_spend(request: GatewayRequest) -> Response:
    rt = request.app.runtime
    key = await rt.keyring.caller(request.headers, x_api_key=True)
    if key is None:  # auth.allow_unauthenticated and no key sent: there is no key to account to
        raise InvalidApiKey("send the gateway key whose spend to read: Authorization: Bearer <key>")
    now = rt.clock()  # the clock budgets are checked and charged on
    state = request.app.state
    own = _figures(key.budget_period, now, await state.spend(key.counter, key.budget_period, now), key.budget_usd)
    body: dict[str, object] = {"object": "gateway.key_spend", "key": key.name, **own}
    binding: tuple[str, dict[str, object]] | None = ("key", own) if key.budget_usd is not None else None
    team = key.team
    if team is not None:
        spent = await state.spend(team.counter, team.budget_period, now)
        figures = _figures(team.budget_period, now, spent, team.budget_usd)
        body["team"] = {"name": team.name, **figures}
        if team.budget_usd is not None and (binding is None or _remaining(figures) < _remaining(binding[1])):
            binding = ("team", figures)
    # the limit that applies: the one with the least left, so a key held by its team's budget says so
    body["budget_usd"] = None if binding is None else binding[1]["budget_usd"]
    body["remaining_usd"] = None if binding is None else binding[1]["remaining_usd"]
    body["limited_by"] = None if binding is None else binding[0]
    return json_response(body)


def _figures(period: Period, now: float, spent: float, budget: float | None) -> dict[str, object]:
    return {"period": period, "period_id": period_id(period, now), "spend_usd": round(spent, 8),
            "budget_usd": budget,
            "remaining_usd": None if budget is None else round(max(0.0, budget - spent), 8)}


def _remaining(figures: dict[str, object]) -> float:
    value = figures["remaining_usd"]
    return float(value) if isinstance(value, int | float) else float("inf")
