"""A streamed Responses request up to its first output token: one attempt of the attempt loop.

Everything before the first token — `response.created`, `response.in_progress`, items and parts without
text, unknown events — is the preamble, held by the stream core (`core.responses.stream.ResponsesStream`)
and thrown away with the attempt if it fails, so a retry or a fallback is invisible and the client sees
one lifecycle. An in-band `error` or `response.failed` before the first token fails the attempt (retried
or passed on by `core.retry`); after it, the relay forwards it (CONTRACT §4.1-§4.3).
"""

from __future__ import annotations

import time

from gateway.config.types import Deployment
from gateway.core.responses.stream import ResponsesStream
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import FirstTokenDeadline, Opened, raise_for_status, raise_inband
from gateway.pipeline.first_token import until_first_token
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.timeouts import LoopTimeout
from gateway.providers.responses_openai import ResponsesTranslator

OpenedResponses = Opened[ResponsesStream]


async def open_responses(rt: Runtime, ctx: RequestContext, d: Deployment) -> OpenedResponses:
    """One attempt: open the stream and read until the first output token, under `first_token_s`."""
    provider, tr = rt.provider(d), rt.responses_translator(d)
    assert tr is not None, "the handler only routes to deployments that serve the Responses API"
    t_sent = time.perf_counter()
    with FirstTokenDeadline(d) as deadline:
        async with LoopTimeout(rt.upstream.loop, provider.timeouts.first_token_s):
            stream = d.provider not in rt.learned.no_stream  # learned from a 400 that names `stream`
            resp = await rt.upstream.open(provider, tr.responses_request(ctx.body, d.model, stream=stream), d.label,
                                           ctx.client_headers)
            opened = deadline.track(Opened(d, resp, ResponsesStream(tr.responses_stream_parser(), d.label), t_sent))
            await raise_for_status(resp, tr.classify_http_error, d.label)
            if not resp.is_event_stream:  # buffered: asked so, or a server that ignores `stream`
                _replay(opened, tr, await resp.read_body())
                return opened
            await until_first_token(resp, opened.stream, d.label)
            opened.t_first = time.perf_counter()
            return opened


def _replay(opened: OpenedResponses, tr: ResponsesTranslator, body: bytes) -> None:
    """A whole answer as a body: checked like one, then re-emitted as the stream it would have been."""
    parsed = tr.parse_responses_body(body)
    raise_inband(parsed.events)
    opened.stream.hold_response(parsed.obj)
    opened.t_first = time.perf_counter()
