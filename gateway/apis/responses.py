"""`POST /v1/responses`: the OpenAI Responses API, streamed or not, through the chat pipeline's parts.

Parse and authorise as chat does, run input guardrails on `instructions` and `input`, then the same
attempt loop (`run_attempts`) over the model's deployments that serve the Responses API. A stream is
held until its first output token, with keep-alive comments while waiting (CONTRACT §4.2), then relayed
by `responses_relay`. A body is masked with the one-shot redactor and judged whole, like a chat body.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.apis.responses_attempt import OpenedResponses, open_responses
from gateway.config.types import Deployment
from gateway.core.responses.assemble import ResponsesAssembler
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.wire import map_response_texts
from gateway.errors import GatewayError, InvalidRequest
from gateway.inbound import Request, Response, StreamResponse
from gateway.observe.context import RequestContext
from gateway.observe.metrics import record_redactions, record_usage
from gateway.pipeline.attempt_io import fetch_body, raise_inband
from gateway.pipeline.attempts import run_attempts
from gateway.pipeline.first_token import serve_stream
from gateway.pipeline.guardrails import check_input, judge_output
from gateway.pipeline.limits import admit
from gateway.pipeline.request import answer_headers, keep_serving, redact_input_slots, resolve
from gateway.pipeline.responses_relay import relay
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import TextMap
from gateway.providers.responses_openai import ResponsesBody


async def responses(request: Request) -> Response | StreamResponse:
    rt, ctx = await resolve(request, "responses")
    text = input_text(ctx.body)
    await redact_input_slots(rt, ctx, _input_texts(ctx.body))
    keep_serving(ctx, lambda d: rt.responses_translator(d) is not None, "Responses")
    await admit(rt, request.app.state, ctx)
    await check_input(rt, ctx, text)
    if ctx.stream:
        return await stream_responses(request, rt, ctx)
    return await complete_responses(rt, ctx)


def _input_texts(body: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Where the prompt's text lives: (object, key) of `instructions`, of `input` as a string, and of
    each input item's `content` string or content part's `text`."""
    slots: list[tuple[dict[str, Any], str]] = []
    if isinstance(body.get("instructions"), str):
        slots.append((body, "instructions"))
    value = body.get("input")
    if isinstance(value, str):
        slots.append((body, "input"))
    elif isinstance(value, list):
        for item in value:
            if not isinstance(item, dict):
                raise InvalidRequest("each input item must be an object", param="input")
            content = item.get("content")
            if isinstance(content, str):
                slots.append((item, "content"))
            elif isinstance(content, list):
                slots.extend((p, "text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    elif value is not None:
        raise InvalidRequest("input must be a string or an array", param="input")
    return slots


def input_text(body: dict[str, Any]) -> str:
    """The prompt text input guardrails judge."""
    return "\n".join(obj[key] for obj, key in _input_texts(body))


def _error_event(err: GatewayError) -> bytes:
    return ResponsesOutputFilter(None).error_event(err.body()["error"])


async def stream_responses(request: Request, rt: Runtime, ctx: RequestContext) -> StreamResponse:
    async def attempt(d: Deployment) -> OpenedResponses:
        return await open_responses(rt, ctx, d)

    async def relay_to(opened: OpenedResponses, client: StreamResponse) -> None:
        await relay(rt, ctx, opened, client, rt.safety.models[ctx.model.name].start())

    return await serve_stream(request, rt, ctx, attempt, _error_event, relay_to)


async def _fetch(rt: Runtime, ctx: RequestContext, d: Deployment) -> ResponsesBody:
    tr = rt.responses_translator(d)
    assert tr is not None
    req = tr.responses_request(ctx.body, d.model, stream=False)
    parsed = tr.parse_responses_body(await fetch_body(rt, d, req, tr.classify_http_error, ctx.client_headers))
    raise_inband(parsed.events)
    return parsed


async def complete_responses(rt: Runtime, ctx: RequestContext) -> Response:
    async def attempt(d: Deployment) -> ResponsesBody:
        return await _fetch(rt, ctx, d)

    won, parsed = await run_attempts(rt, ctx, attempt)
    ctx.deployment = won.deployment
    obj = parsed.obj
    ctx.redactions += await _redact_body(rt, ctx, obj)
    assembler = ResponsesAssembler()
    assembler.feed_response(obj)  # after masking: guardrails judge what the client would read
    safety = rt.safety.models[ctx.model.name]
    refusal = await judge_output(rt, ctx, assembler.as_chat(),
                                 safety.stream_guards + safety.hold_guards + safety.audit_guards)
    ctx.usage = assembler.usage
    ctx.cost_usd = record_usage(rt.metrics, ctx.model.name, won.deployment, assembler.usage, ctx.key_name)
    if refusal is not None:
        raise refusal
    return Response(body=orjson.dumps(obj), content_type="application/json", headers=answer_headers(ctx, won))


async def _redact_body(rt: Runtime, ctx: RequestContext, obj: dict[str, Any]) -> int:
    def walk(fn: TextMap) -> None:
        map_response_texts(obj, lambda _key, kind, text: fn(kind, text))

    counts = await rt.safety.models[ctx.model.name].mask_texts(rt.slicer, walk)
    return record_redactions(rt.metrics, counts.items())

