"""A streamed Responses request up to its first output token: one attempt of the attempt loop.

Everything before the first token — `response.created`, `response.in_progress`, items and parts without
text, unknown events — is the preamble, held by the stream core (`core.responses.stream.ResponsesStream`)
and thrown away with the attempt if it fails, so a retry or a fallback is invisible and the client sees
one lifecycle. An in-band `error` or `response.failed` before the first token fails the attempt (retried
or passed on by `core.retry`); after it, the relay forwards it (CONTRACT §4.1-§4.3).

A deployment that rejects `stream: true` (a 400 naming `stream`), or answers a stream request with a
body, is asked for a body (learned per deployment for this API, CONTRACT §4.6), read under `total_s`,
and its answer re-emitted as the stream it would have been.
"""

from __future__ import annotations

import time

from gateway.config.types import Deployment
from gateway.core.policy.learned import Fact
from gateway.core.responses.stream import ResponsesStream
from gateway.core.sse import looks_like_sse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import FirstTokenDeadline, Opened, fetch_body, raise_for_status, raise_inband
from gateway.pipeline.first_token import until_first_token
from gateway.pipeline.learned import confirm, wants
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.timeouts import LoopTimeout
from gateway.providers.base import MAX_BODY_BYTES, ResponsesTranslator

OpenedResponses = Opened[ResponsesStream]


async def open_responses(rt: Runtime, ctx: RequestContext, d: Deployment) -> OpenedResponses:
    """One attempt: open the stream and read until the first output token, under `first_token_s`."""
    provider, tr = rt.provider(d), rt.responses_translator(d)
    assert tr is not None, "the handler only routes to deployments that serve the Responses API"
    t_sent = time.perf_counter()
    opened = Opened(d, None, ResponsesStream(tr.responses_stream_parser(), d.label), t_sent)
    if wants(rt.learned, ctx.fallbacks, d, ctx.api, Fact.NO_STREAM):
        body = await fetch_body(rt, d, tr.responses_request(ctx.body, d.model, stream=False), tr.classify_http_error,
                                ctx.client_headers)
        _replay(opened, tr, body)
        confirm(rt.learned, ctx.fallbacks, d, ctx.api, Fact.NO_STREAM, provider.learn_ttl_s)
        return opened
    with FirstTokenDeadline(d) as deadline:
        async with LoopTimeout(rt.upstream.loop, provider.timeouts.first_token_s):
            resp = await rt.upstream.open(provider, tr.responses_request(ctx.body, d.model, stream=True), d.label,
                                           ctx.client_headers)
            opened.response = resp
            deadline.track(opened)
            await raise_for_status(resp, tr.classify_http_error, d.label)
            first = b"" if resp.is_event_stream else await resp.next_chunk()
            if resp.is_event_stream or looks_like_sse(first):
                await until_first_token(resp, opened.stream, d.label, first)
                opened.t_first = time.perf_counter()
                return opened
    try:  # a body to a stream request: the rest of it under the response's own `total_s`
        _replay(opened, tr, first + await resp.read_body(MAX_BODY_BYTES - len(first)))
    except BaseException:
        opened.close()
        raise
    rt.learned.learn(d, ctx.api, Fact.NO_STREAM, provider.learn_ttl_s)
    return opened


def _replay(opened: OpenedResponses, tr: ResponsesTranslator, body: bytes) -> None:
    """A whole answer as a body: checked like one, then re-emitted as the stream it would have been."""
    parsed = tr.parse_responses_body(body)
    raise_inband(parsed.events)
    opened.stream.hold_response(parsed.obj)
    opened.t_first = time.perf_counter()
