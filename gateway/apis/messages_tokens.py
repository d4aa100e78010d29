"""`POST /v1/messages/count_tokens`: Anthropic's token counting, for the Messages API's clients (Claude Code).

Passed through to the model's Claude deployments that count tokens (`anthropic`, and Claude models on
`bedrock` and `vertex`: the attempt loop over those alone, retries and fallback as for any request, model
rewritten, betas passed through), the answer as the upstream gave it, in Anthropic's shape. A model with
none gets an *estimate* (about 4 bytes of the request's JSON a token),
marked as one: the header `x-gateway-token-count: estimate` and `"estimate": true` in the body; a
Messages client reads `input_tokens` and ignores the rest.

A request like any other (docs/reference.md, "Routes"): it counts against the key's `rpm` (and is refused once the
key's budget is used up), in Anthropic's error shape; it is counted in `llm_gateway_requests_total`
and logged as `api="count_tokens"`. Its `tpm` is left alone: counting spends no tokens. See
docs/messages.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, cast

import orjson

from gateway.apis.catalog import COUNT_TOKENS
from gateway.apis.messages import input_slots
from gateway.config.types import Deployment
from gateway.http import Response
from gateway.pipeline.attempt_io import fetch_body, forwardable
from gateway.pipeline.attempts import run_attempts
from gateway.pipeline.exchange import GatewayRequest
from gateway.pipeline.guardrails import check_input
from gateway.pipeline.limits import admit
from gateway.pipeline.request import (
    answer_headers,
    keep_serving,
    prompt_sent,
    prompt_slots,
    redact_input_slots,
    resolve,
)
from gateway.pipeline.runtime import Runtime
from gateway.providers.base import CountsTokens, TranslatesCount, Translator

ESTIMATE_HEADER = "x-gateway-token-count"
BYTES_PER_TOKEN = 4


async def count_tokens(request: GatewayRequest) -> Response:
    rt, ctx = await resolve(request, COUNT_TOKENS)
    slots, text = prompt_slots(rt, ctx, input_slots)  # the same validation as a Messages request
    keep_serving(ctx, lambda d: rt.translator(COUNT_TOKENS.schema, d), "Messages")
    await admit(rt, request.app.state, ctx, tokens=False)
    counting = tuple(d for d in ctx.model.deployments if _counter(rt, d, request) is not None)
    if not counting:
        return _estimate(ctx.body, ctx.request_id)
    # the prompt leaves for the upstream as a Messages request's does: masked (`redaction.inputs`), and
    # judged first by its input guardrails
    await redact_input_slots(rt, ctx, slots)
    await check_input(rt, ctx, text, prompt_sent(rt, ctx, slots))
    ctx.model = dataclasses.replace(ctx.model, deployments=counting)

    async def attempt(d: Deployment) -> bytes:
        tr = _counter(rt, d, request)
        assert tr is not None
        client_headers = forwardable(rt, d, ctx.client_headers)  # anthropic-version / -beta as the policy says
        req = tr.count_tokens_request(ctx.body, d.model, client_headers)
        assert req is not None
        body = await fetch_body(rt, d, req, tr.classify_http_error, client_headers)
        return tr.count_tokens_answer(body) if isinstance(tr, TranslatesCount) else body

    won, body = await run_attempts(rt, ctx, attempt)
    ctx.deployment = won.deployment
    return Response(body=body, content_type="application/json", headers=answer_headers(ctx, won))


class _Counter(CountsTokens, Translator, Protocol):
    pass


def _counter(rt: Runtime, d: Deployment, request: GatewayRequest) -> _Counter | None:
    """`d`'s Messages cell when it can count tokens for `d`'s model."""
    tr = rt.translator(COUNT_TOKENS.schema, d)
    if isinstance(tr, CountsTokens) and tr.count_tokens_request({}, d.model, request.headers) is not None:
        return cast(_Counter, tr)
    return None


def _estimate(body: dict[str, Any], request_id: str) -> Response:
    size = len(orjson.dumps({k: body.get(k) for k in ("system", "messages", "tools")}))
    tokens = max(1, -(-size // BYTES_PER_TOKEN))
    return Response(body=orjson.dumps({"input_tokens": tokens, "estimate": True}), content_type="application/json",
                    headers={"x-request-id": request_id, ESTIMATE_HEADER: "estimate"})
