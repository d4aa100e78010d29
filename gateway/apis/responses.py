"""`POST /v1/responses`: the OpenAI Responses API, streamed or not, through the chat pipeline's parts.

Parse and authorise as chat does, run input guardrails on `instructions` and `input`, then the same
attempt loop (`run_attempts`) over the model's deployments that serve the Responses API. A stream is
held until its first output token, with keep-alive comments while waiting (CONTRACT §4.2), then relayed
by `pipeline.held_end`. A body is masked with the one-shot redactor and judged whole, like a chat body.
"""

from __future__ import annotations

from typing import Any

from gateway.apis.catalog import RESPONSES
from gateway.apis.responses_attempt import OpenedResponses, open_responses
from gateway.config.types import Deployment
from gateway.core.responses.assemble import ResponsesAssembler
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.core.responses.wire import ResponsesEvent, map_response_texts
from gateway.core.sse import SSEEvent
from gateway.errors import GatewayError, InvalidRequest
from gateway.http import Request, Response, StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline import cache
from gateway.pipeline.attempt_io import fetch_body, raise_inband
from gateway.pipeline.attempts import run_attempts
from gateway.pipeline.body import answer_body
from gateway.pipeline.first_token import serve_stream
from gateway.pipeline.guardrails import check_input
from gateway.pipeline.held_end import HeldEndRelay, relay_held_end
from gateway.pipeline.limits import admit
from gateway.pipeline.request import keep_serving, redact_input_slots, resolve
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import TextMap
from gateway.providers.base import ResponsesBody
from gateway.state.base import StateBackend


async def responses(request: Request) -> Response | StreamResponse:
    rt, ctx = await resolve(request, RESPONSES)
    text = input_text(ctx.body)
    await redact_input_slots(rt, ctx, _input_texts(ctx.body))
    keep_serving(ctx, lambda d: rt.responses_translator(d) is not None, "Responses")
    state = request.app.state
    await admit(rt, state, ctx)
    await check_input(rt, ctx, text)
    if self_contained(ctx.body) and cache.wanted(rt, request, ctx):
        hit = await cache.lookup(state, ctx)
        if hit is not None:
            return await cache.serve_hit(request, ctx, hit, hit_stream)
        ctx.cache_store = True
    if ctx.stream:
        return await stream_responses(request, rt, ctx)
    return await complete_responses(rt, ctx, state)


def self_contained(body: dict[str, Any]) -> bool:
    """A request whose answer depends on its body alone: no `previous_response_id` and `store: false`.
    Any other is never cached (its answer depends on, or creates, state the upstream keeps)."""
    return body.get("store") is False and body.get("previous_response_id") is None


def hit_stream(obj: dict[str, Any], ctx: RequestContext) -> bytes:
    """A cached `response` object as the stream it would have been, terminal event included."""
    stream = ResponsesStream(_NoParser(), "cache")
    stream.hold_response(obj)
    filt = ResponsesOutputFilter(None)
    return stream.commit(filt) + stream.finish()


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


class _NoParser:
    """A cached answer has no upstream bytes to parse."""

    def parse(self, event: SSEEvent) -> list[ResponsesEvent]:
        return []


def _error_event(err: GatewayError) -> bytes:
    return ResponsesOutputFilter(None).error_event(err.body()["error"])


async def stream_responses(request: Request, rt: Runtime, ctx: RequestContext) -> StreamResponse:
    async def attempt(d: Deployment) -> OpenedResponses:
        return await open_responses(rt, ctx, d)

    async def relay_to(opened: OpenedResponses, client: StreamResponse) -> None:
        run = rt.safety.models[ctx.model.name].start()
        filt = ResponsesOutputFilter(run.factory if run else None)
        await relay_held_end(HeldEndRelay(rt, ctx, opened, client, run, filt, "response"))
        end = opened.stream.terminal
        if ctx.cache_store and ctx.stream_error is None and end is not None and end.obj is not None \
                and end.type == "response.completed":
            # what the client read: the filter wrote the released (masked) texts into the terminal event
            await cache.store(rt, request.app.state, ctx, end.obj["response"])

    return await serve_stream(request, rt, ctx, attempt, _error_event, relay_to)


async def _fetch(rt: Runtime, ctx: RequestContext, d: Deployment) -> ResponsesBody:
    tr = rt.responses_translator(d)
    assert tr is not None
    req = tr.responses_request(ctx.body, d.model, stream=False)
    parsed = tr.parse_responses_body(await fetch_body(rt, d, req, tr.classify_http_error, ctx.client_headers))
    raise_inband(parsed.events)
    return parsed


async def complete_responses(rt: Runtime, ctx: RequestContext, state: StateBackend) -> Response:
    async def attempt(d: Deployment) -> ResponsesBody:
        return await _fetch(rt, ctx, d)

    async def mask(obj: dict[str, Any]) -> int:
        return await _redact_body(rt, ctx, obj)

    won, parsed = await run_attempts(rt, ctx, attempt)
    return await answer_body(rt, ctx, state, won, parsed.obj, mask, _read,
                             cacheable=parsed.obj.get("status") == "completed")


def _read(obj: dict[str, Any]) -> ResponsesAssembler:
    assembler = ResponsesAssembler()
    assembler.feed_response(obj)
    return assembler


async def _redact_body(rt: Runtime, ctx: RequestContext, obj: dict[str, Any]) -> int:
    def walk(fn: TextMap) -> None:
        map_response_texts(obj, lambda _key, kind, text: fn(kind, text))

    counts = await rt.safety.models[ctx.model.name].mask_texts(rt.slicer, walk)
    return ctx.rec.redactions(counts.items())

