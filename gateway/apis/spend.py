"""`GET /v1/gateway/spend`: what the calling key has spent in its current budget period.

Authenticated by the key itself (`Authorization: Bearer <key>`, `api-key`, or `x-api-key` as the
Messages API takes it, so a tool configured for Anthropic's header reads it too), so a team reads
its own spend and nobody else's; the figure is the one budgets are enforced against (the state backend's,
shared across replicas with Redis), from deployment prices. Per-key spend over time is the metric
`llm_gateway_cost_usd_total{key}` (CONTRACT §6).
"""

from __future__ import annotations

import time

from gateway.errors import InvalidApiKey
from gateway.http import Response, json_response
from gateway.pipeline.exchange import GatewayRequest
from gateway.state.base import period_id


async def key_spend(request: GatewayRequest) -> Response:
    rt = request.app.runtime
    key = rt.keyring.authenticate(request.headers, x_api_key=True)
    if key is None:  # auth.allow_unauthenticated and no key sent: there is no key to account to
        raise InvalidApiKey("send the gateway key whose spend to read: Authorization: Bearer <key>")
    now = time.time()
    spent = await request.app.state.spend(key.counter, key.budget_period, now)  # by id: a reused name starts at 0
    body: dict[str, object] = {
        "object": "gateway.key_spend", "key": key.name, "period": key.budget_period,
        "period_id": period_id(key.budget_period, now), "spend_usd": round(spent, 8),
        "budget_usd": key.budget_usd,
        "remaining_usd": None if key.budget_usd is None else round(max(0.0, key.budget_usd - spent), 8),
    }
    return json_response(body)
