"""The one serve path of every client API (issue #29): parse and authorise, mask the prompt, keep the
deployments that serve the API, admit, judge the input, answer from the cache or run the attempt loop,
then relay a stream or send a body. What differs per API is the `ServedApi` it is given.

A stream's status is not sent before the first token, so a failure until then is a proper HTTP error (or
a retry). If no token has come after `server.keepalive_after_s`, headers go out early with `: keepalive`
comments so proxies in front don't time out; a failure after that is one error event (docs/extensions.md,
"Failure semantics").
"""

from __future__ import annotations

from functools import partial

from gateway.config.types import Deployment
from gateway.core.stream import Answer, StreamCore
from gateway.http import Response, StreamResponse
from gateway.observe.context import RequestContext
from gateway.pipeline import cache, ownership
from gateway.pipeline.api import Body, ServedApi
from gateway.pipeline.attempt_io import Opened
from gateway.pipeline.attempts import run_attempts
from gateway.pipeline.body import answer_body
from gateway.pipeline.continuation import Continuation
from gateway.pipeline.exchange import GatewayRequest
from gateway.pipeline.first_token import serve_stream
from gateway.pipeline.guardrails import check_input
from gateway.pipeline.limits import admit
from gateway.pipeline.opener import fetch_answer, open_stream
from gateway.pipeline.relay import Relay
from gateway.pipeline.request import keep_serving, prompt_sent, prompt_slots, redact_input_slots, resolve
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.safety import TextMap
from gateway.pipeline.unanswered import dropped
from gateway.providers.base import ParsedBody


async def serve(request: GatewayRequest, served: ServedApi) -> Response | StreamResponse:
    api = served.api
    rt, ctx = await resolve(request, api)
    slots, text = prompt_slots(rt, ctx, served.input_slots)
    await redact_input_slots(rt, ctx, slots)
    keep_serving(ctx, lambda d: rt.translator(api.schema, d), api.title or api.name, ctx.body)
    state = request.app.state
    await admit(rt, state, ctx)
    if served.owned is not None:
        await ownership.check(state, served.owned, ctx)
    await check_input(rt, ctx, text, prompt_sent(rt, ctx, slots))
    if served.cacheable(ctx.body) and cache.wanted(rt, request, ctx):
        hit = await cache.lookup(rt, state, ctx)
        if hit is not None:
            return await cache.serve_hit(request, ctx, hit, served.hit_stream)
        ctx.cache_store = True
    if ctx.stream:
        return await _stream(request, rt, ctx, served)
    return await _complete(rt, ctx, served, request)


async def _stream(request: GatewayRequest, rt: Runtime, ctx: RequestContext, served: ServedApi) -> StreamResponse:
    async def attempt(d: Deployment) -> Opened[StreamCore]:
        return await open_stream(rt, ctx, served, d)

    async def relay(opened: Opened[StreamCore], client: StreamResponse) -> None:
        safety = rt.safety.models[ctx.model.name]
        run = safety.start()
        filt = served.output_filter(run.factory if run is not None else None, ctx.forward_usage)
        resume = Continuation(rt, ctx, served) if ctx.model.continuation else None
        # at the answer's end (its output items known): scheduled before its end is written, so it runs in
        # the loop's next turn, before a follow-up the client sends on reading that end can be read
        ended = None if served.owned is None else partial(
            rt.upstream.loop.call_soon, ownership.record_streamed, rt, request.app.state, ctx, served.owned, opened)
        # before the commit, from the held answer's first event
        rt.learn_served_name(opened.deployment, ctx.model.name, opened.stream.reported_model(), request.app.state)
        await Relay(rt, ctx, opened, client, safety, run, filt, resume, ended).run()
        if ctx.cache_store and ctx.stream_error is None:
            await _store_streamed(rt, request, ctx, served, opened.stream)

    async def drop(opened: Opened[StreamCore], reason: str) -> None:  # an empty answer, a hedge's loser
        await dropped(ctx, opened, reason, served.output_filter)

    return await serve_stream(request, rt, ctx, attempt, served.error_event, relay, drop)


async def _store_streamed(rt: Runtime, request: GatewayRequest, ctx: RequestContext, served: ServedApi,
                          stream: StreamCore) -> None:
    """Cache what the client read: the assembled answer, masked one-shot (equal to the streamed text)."""
    body = served.streamed_answer(stream)
    if not body or not served.answer_cacheable(body):
        return
    if not served.streamed_answer_masked:
        await mask_body(rt, ctx, served, body)
    await cache.store(rt, request.app.state, ctx, body)


async def _complete(rt: Runtime, ctx: RequestContext, served: ServedApi, request: GatewayRequest) -> Response:
    async def attempt(d: Deployment) -> ParsedBody:
        return await fetch_answer(rt, ctx, served, d)

    async def mask(obj: Body) -> int:
        return await mask_body(rt, ctx, served, obj)

    def read(obj: Body) -> Answer:
        return served.read_answer(obj, parsed.events)

    won, parsed = await run_attempts(rt, ctx, attempt)
    if served.owned is not None:
        owned = served.owned
        ownership.record(rt, request.app.state, ctx, owned, won.deployment, owned.body_id(parsed.obj),
                         owned.body_items(parsed.obj))
    rt.learn_served_name(won.deployment, ctx.model.name, parsed.obj.get("model"), request.app.state)
    return await answer_body(rt, ctx, request.app.state, won, parsed.obj, mask, read,
                             cacheable=served.answer_cacheable(parsed.obj))


async def mask_body(rt: Runtime, ctx: RequestContext, served: ServedApi, obj: Body) -> int:
    """A whole answer's texts masked one-shot with the model's redaction profile, a slice at a time."""
    def walk(fn: TextMap) -> None:
        served.map_texts(obj, fn)

    counts = await rt.safety.models[ctx.model.name].mask_texts(rt.slicer, walk)
    return ctx.rec.redactions(counts.items())
