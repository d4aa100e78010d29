"""`POST /v1/embeddings`: the body passes to the deployment through the attempt loop, usage counted."""

from __future__ import annotations

import orjson

from gateway.apis.catalog import EMBEDDINGS
from gateway.config.types import Deployment
from gateway.core.events import Usage
from gateway.errors import InvalidRequest
from gateway.http import Response, StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import fetch_body, raise_inband
from gateway.pipeline.attempts import run_attempts
from gateway.pipeline.exchange import GatewayRequest
from gateway.pipeline.guardrails import check_input
from gateway.pipeline.limits import admit
from gateway.pipeline.request import answer_headers, keep_serving, resolve
from gateway.pipeline.runtime import Runtime
from gateway.providers.base import Embeds, ParsedBody


async def embeddings(rt: Runtime, ctx: RequestContext) -> Response:
    async def attempt(d: Deployment) -> ParsedBody:
        tr = rt.translator(EMBEDDINGS.schema, d)
        assert isinstance(tr, Embeds)  # `keep_serving` kept only those
        req = tr.embeddings_request(ctx.body, d.model)
        parsed = tr.parse_body(await fetch_body(rt, d, req, tr.classify_http_error, ctx.client_headers))
        raise_inband(parsed.events)
        return parsed

    won, parsed = await run_attempts(rt, ctx, attempt)
    ctx.deployment = won.deployment
    usage = parsed.obj.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
        ctx.usage = Usage(input=usage["prompt_tokens"])
    ctx.cost_usd = ctx.rec.answered(ctx.model.name, won.deployment, ctx.usage, ctx.key_name)
    return Response(body=orjson.dumps(parsed.obj), content_type="application/json",
                    headers=answer_headers(ctx, won))


async def embeddings_handler(request: GatewayRequest) -> Response | StreamResponse:
    rt, ctx = await resolve(request, EMBEDDINGS)
    if "input" not in ctx.body:
        raise InvalidRequest("you must provide an input parameter", param="input")
    keep_serving(ctx, lambda d: tr if isinstance(tr := rt.translator(EMBEDDINGS.schema, d), Embeds) else None,
                 "embeddings")
    await admit(rt, request.app.state, ctx)
    # the input leaves for the upstream: the model's input guardrails judge it first (docs/reference.md)
    if rt.safety.models[ctx.model.name].input_guards:
        await check_input(rt, ctx, "\n".join(_texts(ctx.body["input"])))
    return await embeddings(rt, ctx)


def _texts(value: object) -> list[str]:
    """The texts of an embeddings `input`: a string, or a list of them (token arrays carry no text)."""
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
