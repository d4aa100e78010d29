"""A whole answer's one path, every API alike (issue #29): after the attempt loop's winner, the body is
masked with the one-shot redactor, read as the answer the guardrails judge (what the client would read),
its usage and cost recorded, refused or stored in the response cache, and sent. What differs per API is
given: how its body's texts are masked, and how it is read as an `Answer`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from gateway.core.stream import Answer
from gateway.core.usage_estimate import reported
from gateway.http import Response
from gateway.observe.context import RequestContext
from gateway.pipeline import cache
from gateway.pipeline.attempts import Won
from gateway.pipeline.guardrails import judge_output
from gateway.pipeline.request import answer_headers
from gateway.pipeline.runtime import Runtime
from gateway.state.base import StateBackend

Body = dict[str, Any]


async def answer_body(rt: Runtime, ctx: RequestContext, state: StateBackend, won: Won, obj: Body,
                      mask: Callable[[Body], Awaitable[int]], read: Callable[[Body], Answer], *,
                      cacheable: bool = True) -> Response:
    """`mask`: the body's texts masked in place, returning how many matches; `read`: the masked body as
    the answer guardrails judge and usage is read from; `cacheable`: a whole answer worth storing."""
    ctx.deployment = won.deployment
    ctx.redactions += await mask(obj)
    answer = read(obj)  # after masking: guardrails judge what the client would read
    safety = rt.safety.models[ctx.model.name]
    refusal = await judge_output(rt, ctx, answer, safety.stream_guards + safety.hold_guards + safety.audit_guards)
    ctx.usage = reported(answer.usage)  # a translation's zeros are no count: the usage is missing
    ctx.cost_usd = ctx.rec.answered(ctx.model.name, won.deployment, ctx.usage, ctx.key_name)
    if refusal is not None:
        raise refusal
    if ctx.cache_store and cacheable:
        await cache.store(rt, state, ctx, obj)
    response = Response(body=orjson.dumps(obj), content_type="application/json", headers=answer_headers(ctx, won))
    ctx.first_token_out(time.perf_counter())  # serialised: what is left is the write itself
    return response
