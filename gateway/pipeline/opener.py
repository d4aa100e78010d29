"""One attempt of any client API, to any provider: open it and read up to the first output token (a
stream), or read the whole answer (a body). The API is a value (`pipeline.api.ServedApi`), the
translator its deployment's cell of the support matrix; neither is named here.

Before the first token the preamble (a role chunk, `message_start`, `response.created`, pings, ...) is
held by the API's stream core, so a retried attempt replaces it and the client sees one lifecycle. At the
first token the pipeline commits; after it nothing is retried (docs/extensions.md, "Streams"; docs/extensions.md,
"Failure semantics").

Learn-once fallbacks (docs/extensions.md, "Failure semantics"), per deployment and API: the `stream_options` the
gateway added, when rejected (a 400/422 that names it or no parameter), is dropped for one retry and learned when that
retry succeeds; a deployment that answers a stream request with a body is asked for a body from then on (read
under `total_s`: a whole answer takes as long as it takes) and its answer held as the stream it would
have been; one that rejects `stream: false` is streamed and its stream assembled into the body. A 400/422
naming OpenAI's `prompt_cache_key` or `prompt_cache_retention` when the client sent one is retried once
without them, and learned (`no_prompt_cache_key`) when that retry succeeds (docs/caching.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from gateway.config.types import Deployment
from gateway.core.events import Failure, FailureKind, StreamFailed
from gateway.core.policy.learned import Fact
from gateway.core.stream import StreamCore
from gateway.observe.context import RequestContext
from gateway.pipeline.api import ServedApi
from gateway.pipeline.attempt_io import (
    Classify,
    FirstTokenDeadline,
    Opened,
    Transcoded,
    fetch_whole,
    forwardable,
    raise_for_status,
    raise_inband,
    with_response_wait,
)
from gateway.pipeline.first_token import until_first_token
from gateway.pipeline.learned import confirm, wants
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.timeouts import LoopTimeout
from gateway.pipeline.unanswered import cancelled, failed, unfinished
from gateway.providers.base import (
    MAX_BODY_BYTES,
    ParsedBody,
    Translator,
    UpstreamRequest,
    bound,
    breakpoints_for,
    with_breakpoints,
)
from gateway.upstream import UpstreamError, UpstreamResponse

OpenedStream = Opened[StreamCore]


def translator(rt: Runtime, ctx: RequestContext, d: Deployment, body: dict[str, Any] | None = None) -> Translator:
    """`d`'s cell for this request (bound to it when its parsers must know the request: the Responses
    bridge, `providers.base.PerRequest`); the twin that adds cache breakpoints when the model says
    `prompt_cache: {breakpoints: auto}` (docs/caching.md)."""
    tr = rt.translator(ctx.schema, d)
    assert tr is not None, "only deployments whose provider serves the API are candidates (`keep_serving`)"
    tr = with_breakpoints(tr, breakpoints_for(ctx.cache_marked, ctx.model.auto_breakpoints))
    return bound(tr, ctx.body if body is None else body)


def _noted(ctx: RequestContext, req: UpstreamRequest) -> UpstreamRequest:
    """The request as built; the client's cache markers it dropped go to the log line."""
    ctx.cache_markers_dropped = req.cache_markers_dropped
    return req


async def open_stream(rt: Runtime, ctx: RequestContext, api: ServedApi, d: Deployment,
                      body: dict[str, Any] | None = None) -> OpenedStream:
    """One streamed attempt: open, read until the first output token under `first_token_s`. `body`: the
    request to send when it is not the client's (a continuation's). One cancelled on its way (its client
    gone, a hedge lost), or timed out, is charged what its upstream billed (`pipeline.unanswered`)."""
    body = _cache_key_kept(rt, ctx, d, ctx.body if body is None else body)
    provider, tr = rt.provider(d), translator(rt, ctx, d, body)
    headers = forwardable(rt, d, ctx.client_headers)  # what the provider's `forward_headers` let through
    deadline = FirstTokenDeadline(d)
    try:
        if wants(rt.learned, ctx, d, Fact.NO_STREAM):
            return await _asked_for_a_body(rt, ctx, api, d, tr, body, headers)
        options = not wants(rt.learned, ctx, d, Fact.NO_STREAM_OPTIONS)
        added = options and tr.sends_stream_options and "stream_options" not in body  # by us, not the client
        with deadline:
            async with LoopTimeout(rt.upstream.loop, provider.timeouts.first_token_s):
                req = _noted(ctx, tr.request(body, d.model, stream=True, client_headers=headers,
                                             send_stream_options=options))
                t_sent = ctx.sent_upstream()  # built: what follows is the connection's and the upstream's
                resp = deadline.track(await rt.upstream.open(provider, req, d.label, headers))
                ctx.request_left(t_sent, resp.sent_at)
                # the stream core is built once the request is out and its head is back, while the model
                # thinks: not on the request's way out (issue #34, the "in" hop of the added TTFT)
                opened = deadline.track(Opened(d, resp, api.stream_core(tr.stream_parser(), d.label), t_sent))
                await check_status(resp, tr.classify_http_error, d, added_options=added,
                                   cache_key=_carries_cache_key(body))
                framing, ctype = tr.framing, resp.headers.get("content-type", "")
                first = b"" if framing.is_stream(ctype, b"") else await resp.next_chunk()
                if framing.is_stream(ctype, first):
                    t_read = resp.read_at
                    if framing.transcoder is not None:  # bytes of another framing, read as SSE
                        resp = opened.response = Transcoded(resp, framing.transcoder())
                    opened.t_first = await until_first_token(resp, opened.stream, d.label, first, t_read)
                    confirm(rt.learned, ctx, d, Fact.NO_STREAM_OPTIONS, provider.learn_ttl_s)
                    return opened
        return await _body_answered(rt, ctx, d, tr, opened, first)
    except (UpstreamError, asyncio.CancelledError) as exc:
        unfinished(ctx, d, deadline.opened, exc)
        raise


async def _body_answered(rt: Runtime, ctx: RequestContext, d: Deployment, tr: Translator, opened: OpenedStream,
                         first: bytes) -> OpenedStream:
    """A body to a stream request: the rest of it under the response's own `total_s`, held as the stream
    it would have been; learned from a real answer only, never from an error body."""
    resp = opened.response
    assert resp is not None
    try:
        _hold(opened, tr, first + await resp.read_body(MAX_BODY_BYTES - len(first)), resp.read_at)
    except BaseException:
        opened.close()
        raise
    rt.learned.learn(ctx, d, Fact.NO_STREAM, rt.provider(d).learn_ttl_s)
    return opened


async def _asked_for_a_body(rt: Runtime, ctx: RequestContext, api: ServedApi, d: Deployment, tr: Translator,
                            body: dict[str, Any], headers: dict[str, str]) -> OpenedStream:
    """A deployment that answered a stream request with a body is asked for one, held as the stream.
    If it streams after all, its stream is read as one (an in-band error classified as on any stream)."""
    req = _noted(ctx, tr.request(body, d.model, stream=False, client_headers=headers, send_stream_options=False))
    opened: OpenedStream = Opened(d, None, api.stream_core(tr.stream_parser(), d.label), ctx.sent_upstream())
    whole = await fetch_whole(rt, d, req, tr.classify_http_error, headers)
    ctx.request_left(opened.t_sent, whole.sent_at)
    if tr.framing.is_stream(whole.headers.get("content-type", ""), whole.body):
        coder = tr.framing.transcoder
        resp = opened.response = whole if coder is None else Transcoded(whole, coder())
        opened.t_first = await until_first_token(resp, opened.stream, d.label, t_first=whole.read_at)
        return opened
    _hold(opened, tr, whole.body, whole.read_at)
    confirm(rt.learned, ctx, d, Fact.NO_STREAM, rt.provider(d).learn_ttl_s)
    return opened


def _hold(opened: OpenedStream, tr: Translator, body: bytes, read_at: float) -> None:
    """A whole answer as a body (read whole at `read_at`): checked like one, then held as the stream it
    would have been."""
    parsed = tr.parse_body(body)
    raise_inband(parsed.events)
    try:
        opened.stream.hold_answer(parsed.obj, parsed.events)
    except StreamFailed as exc:
        raise UpstreamError(exc.failure) from None
    opened.t_first = read_at


async def check_status(resp: UpstreamResponse, classify: Classify, d: Deployment, added_options: bool,
                       cache_key: bool = False) -> None:
    """A rejection of the `stream_options` we added is told by its status alone: providers name the
    parameter (`param: stream_options`), or not (Azure: `param: ""`), or answer 422 (vLLM-style
    validation). It is retried once without, unless the rejection names another parameter or a
    content code; a request rejected for another reason fails again on that retry and is then the
    client's error, passed through."""
    try:
        await raise_for_status(resp, classify, d.label)
    except UpstreamError as exc:
        f = exc.failure
        if added_options and f.status in (400, 422) and f.kind is FailureKind.HTTP_4XX and _may_be_options(f):
            raise UpstreamError(dataclasses.replace(f, kind=FailureKind.STREAM_OPTIONS_REJECTED)) from None
        raise _cache_key_rejection(exc, cache_key) from None


# codes that name what is wrong with the request's content, whatever else it carries
_CONTENT_CODES = frozenset({"content_policy_violation", "content_filter", "model_not_found"})


def _may_be_options(f: Failure) -> bool:
    """A rejection that may be of `stream_options`: it names that parameter, or no parameter at all,
    and no code that blames the request's content."""
    return (not f.param or f.param.startswith("stream_options")) and f.code not in _CONTENT_CODES


CACHE_KEY_FIELDS = ("prompt_cache_key", "prompt_cache_retention")  # OpenAI's, passed to OpenAI-type servers


def _carries_cache_key(body: dict[str, Any]) -> bool:
    return "prompt_cache_key" in body or "prompt_cache_retention" in body


def _cache_key_kept(rt: Runtime, ctx: RequestContext, d: Deployment, body: dict[str, Any]) -> dict[str, Any]:
    """The body, without OpenAI's prompt-cache fields for a deployment that rejects them (learn-once)."""
    if ("prompt_cache_key" not in body and "prompt_cache_retention" not in body) or not wants(
            rt.learned, ctx, d, Fact.NO_PROMPT_CACHE_KEY):
        return body
    return {k: v for k, v in body.items() if k not in CACHE_KEY_FIELDS}


def _cache_key_rejection(exc: UpstreamError, carried: bool) -> UpstreamError:
    """A 400/422 that names a prompt-cache field the request carried: a learn-once rejection; any other
    failure as it was. Servers name the field in `param`, or only in the message (a validator's list of
    unknown fields), so both are read; a rejection for another reason fails again without it."""
    f = exc.failure
    named = f.param.startswith("prompt_cache") if f.param else "prompt_cache" in f.message
    if carried and named and f.status in (400, 422) and f.kind is FailureKind.HTTP_4XX:
        return UpstreamError(dataclasses.replace(f, kind=FailureKind.CACHE_KEY_REJECTED))
    return exc


async def fetch_answer(rt: Runtime, ctx: RequestContext, api: ServedApi, d: Deployment) -> ParsedBody:
    """One attempt of a non-stream request: the whole answer, or the classified failure. An upstream
    that streams anyway has its stream read through the API's stream core, so an in-band error in it is
    classified as on a streamed request (an in-band rate limit is a 429, never a malformed body). One
    cancelled on its way (its client gone), or timed out, is charged its prompt (`pipeline.unanswered`)."""
    body = _cache_key_kept(rt, ctx, d, ctx.body)
    tr = translator(rt, ctx, d, body)
    if wants(rt.learned, ctx, d, Fact.STREAM_ONLY):
        try:
            streamed = await _fetch_streamed(rt, ctx, api, d, tr, body)
        except asyncio.CancelledError as exc:
            cancelled(ctx, d, None, exc)
            raise
        ctx.t_answer = time.perf_counter()
        confirm(rt.learned, ctx, d, Fact.STREAM_ONLY, rt.provider(d).learn_ttl_s)
        return streamed
    headers = forwardable(rt, d, ctx.client_headers)
    req = _noted(ctx, tr.request(body, d.model, stream=False, client_headers=headers, send_stream_options=False))
    built = ctx.sent_upstream()
    try:
        whole = await fetch_whole(rt, d, req, tr.classify_http_error, headers)
    except UpstreamError as exc:
        failed(ctx, d, None, exc.failure)
        raise _cache_key_rejection(exc, _carries_cache_key(body)) from None
    except asyncio.CancelledError as exc:
        cancelled(ctx, d, None, exc)
        raise
    ctx.request_left(built, whole.sent_at)
    ctx.t_answer = whole.read_at  # read whole: parsing it on is the gateway's own time
    if tr.framing.is_stream(whole.headers.get("content-type", ""), whole.body):
        return await _assembled(rt, ctx, api, tr, d.label, whole)
    parsed = tr.parse_body(whole.body)
    raise_inband(parsed.events)
    return parsed


async def _fetch_streamed(rt: Runtime, ctx: RequestContext, api: ServedApi, d: Deployment,
                          tr: Translator, body: dict[str, Any]) -> ParsedBody:
    """A non-stream request to a deployment that only streams (it rejected `stream: false`): streamed,
    and assembled into the body the client asked for. Nothing reaches the client before the whole
    answer, so a failure anywhere in the stream is still an attempt's failure, retried like any other
    (one timed out is charged the prompt and the output read, which no client saw: `pipeline.unanswered`)."""
    headers = forwardable(rt, d, ctx.client_headers)
    req = _noted(ctx, tr.request(body, d.model, stream=True, client_headers=headers, send_stream_options=True))
    built = ctx.sent_upstream()
    opened: OpenedStream | None = None
    try:
        resp: UpstreamResponse = await rt.upstream.open(rt.provider(d), req, d.label, headers)
        ctx.request_left(built, resp.sent_at)
        opened = Opened(d, resp, api.stream_core(tr.stream_parser(), d.label), built)
        try:
            await raise_for_status(resp, tr.classify_http_error, d.label)
            return await _assembled(rt, ctx, api, tr, d.label, resp, opened.stream)
        finally:
            resp.close()
    except UpstreamError as exc:
        failed(ctx, d, opened, exc.failure)
        raise


async def _assembled(rt: Runtime, ctx: RequestContext, api: ServedApi, tr: Translator, label: str,
                     resp: UpstreamResponse, stream: StreamCore | None = None) -> ParsedBody:
    """A 200 stream read whole through the API's stream core (`stream`, else a new one) and assembled into
    the body; a failure in it is the attempt's, with the wait the response asked for (as
    `first_token.until_first_token`)."""
    stream = api.stream_core(tr.stream_parser(), label) if stream is None else stream
    if tr.framing.transcoder is not None:
        resp = Transcoded(resp, tr.framing.transcoder())
    try:
        await _read_all(resp, stream, api, label)
    except StreamFailed as exc:
        raise UpstreamError(with_response_wait(exc.failure, resp.headers)) from None
    end = stream.upstream_end(rt.safety.scrubber_for(ctx.model.name))
    if end is not None:
        failure = end.failure or Failure(FailureKind.EARLY_EOF, end.message)
        raise UpstreamError(with_response_wait(failure, resp.headers))
    obj = api.streamed_answer(stream)
    usage = stream.assembler.usage
    return ParsedBody(obj, [usage] if usage is not None else [])


async def _read_all(resp: UpstreamResponse, stream: StreamCore, api: ServedApi, label: str) -> None:
    """Every byte of the stream through its core, committed at the first token to a filter that
    releases everything (what it returns is for no client)."""
    committed = False
    while not stream.done:
        data = await resp.next_chunk()
        if not data:
            stream.end_of_input()
            break
        stream.feed(data)
        if not committed and stream.committable:
            stream.commit(api.output_filter(None, False))
            committed = True
    if not committed:
        raise UpstreamError(Failure(FailureKind.EARLY_EOF, f"{label}: stream ended before the answer did"))
    stream.drain()
