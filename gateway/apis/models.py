"""`GET /v1/models` (the models the key may use) and the probes `/healthz` and `/readyz`.

A request that carries `anthropic-version` (the Anthropic SDKs' `models.list()`/`retrieve()`, Claude
Code) gets Anthropic's shapes (`data[].type: "model"`, `id`, `display_name`, `created_at`, `has_more`,
`first_id`, `last_id`) and may send the key in `x-api-key`, as on the Messages API.
"""

from __future__ import annotations

from urllib.parse import unquote

from gateway.errors import ModelNotFound
from gateway.http import Response, json_response
from gateway.pipeline.auth import KeyRing
from gateway.pipeline.exchange import GatewayRequest
from gateway.pipeline.request import is_anthropic


async def list_models(request: GatewayRequest) -> Response:
    rt = request.app.runtime
    anthropic = is_anthropic(request.headers)
    key = await rt.keyring.caller(request.headers, x_api_key=anthropic)
    names = KeyRing.visible(key, list(rt.config.models))
    if anthropic:
        return json_response({"data": [_anthropic_model(n) for n in names], "has_more": False,
                              "first_id": names[0] if names else None, "last_id": names[-1] if names else None})
    return json_response({"object": "list", "data": [_model(n) for n in names]})


async def retrieve_model(request: GatewayRequest) -> Response:
    """`GET /v1/models/{id}` (the SDKs' `models.retrieve`): a model this key may use, by its name or an
    alias (answered under the name asked for, as a client checks it), else a 404 as for an unknown name
    (a model the key may not use is not disclosed either)."""
    rt = request.app.runtime
    anthropic = is_anthropic(request.headers)
    key = await rt.keyring.caller(request.headers, x_api_key=anthropic)
    name = unquote(request.path.rpartition("/")[2])
    model = rt.model(name, key) or await rt.shared_model(name, key, request.app.state)
    if model is None or not KeyRing.visible(key, [model.name]):
        raise ModelNotFound.named(name)
    return json_response(_anthropic_model(name) if anthropic else _model(name))


def _model(name: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "llm-gateway"}


def _anthropic_model(name: str) -> dict[str, object]:
    return {"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}


async def healthz(request: GatewayRequest) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: GatewayRequest) -> Response:
    """Ready while it serves, also with the state backend away: requests are then counted locally
    (docs/scale-out.md). A 503 there took every replica out of its Service at once when Redis went away
    (the chart's readiness probe is on this path), an outage of the whole gateway instead of local limits.
    The answer says which: `state` is `degraded` while counting is local because Redis is away."""
    state = "ok" if await request.app.state.healthy() else "degraded"
    return json_response({"status": "ready", "state": state})
