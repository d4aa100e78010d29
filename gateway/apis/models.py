"""`GET /v1/models` (the models the key may use) and the probes `/healthz` and `/readyz`."""

from __future__ import annotations

from urllib.parse import unquote

from gateway.errors import ModelNotFound, Unavailable
from gateway.inbound import Request, Response, json_response
from gateway.pipeline.auth import KeyRing


async def list_models(request: Request) -> Response:
    rt = request.app.runtime
    key = rt.keyring.authenticate(request.headers)
    names = KeyRing.visible(key, list(rt.config.models))
    return json_response({"object": "list", "data": [_model(n) for n in names]})


async def retrieve_model(request: Request) -> Response:
    """`GET /v1/models/{id}` (the SDKs' `models.retrieve`): a model this key may use, else a 404 as
    OpenAI answers it (a model the key may not use is not disclosed either)."""
    rt = request.app.runtime
    key = rt.keyring.authenticate(request.headers)
    name = unquote(request.path.rpartition("/")[2])
    if rt.model(name) is None or not KeyRing.visible(key, [name]):
        raise ModelNotFound.named(name)
    return json_response(_model(name))


def _model(name: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "llm-gateway"}


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    state = request.app.state
    if not await state.healthy():
        raise Unavailable("the state backend is not answering")
    return json_response({"status": "ready"})
