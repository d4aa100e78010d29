"""`GET /v1/models` (the models the key may use) and the probes `/healthz` and `/readyz`."""

from __future__ import annotations

from gateway.errors import Unavailable
from gateway.inbound import Request, Response, json_response
from gateway.pipeline.auth import KeyRing


async def list_models(request: Request) -> Response:
    rt = request.app.runtime
    key = rt.keyring.authenticate(request.headers)
    names = KeyRing.visible(key, list(rt.config.models))
    data = [{"id": n, "object": "model", "created": 0, "owned_by": "llm-gateway"} for n in names]
    return json_response({"object": "list", "data": data})


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    state = request.app.state
    if not await state.healthy():
        raise Unavailable("the state backend is not answering")
    return json_response({"status": "ready"})
