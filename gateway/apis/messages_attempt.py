"""A streamed Messages request up to its first output token: one attempt of the attempt loop.

Everything before the first token — `message_start`, `ping`, `content_block_start`, unknown events — is
the preamble, held by the stream core (`core.messages.stream.MessagesStream`) and thrown away with the
attempt if it fails, so a 529, a 5xx or an in-band `overloaded_error` before any text is retried or falls
back invisibly and the client sees one lifecycle (CONTRACT §4.1-§4.2). After it, the relay
(`pipeline.held_end`) ends the stream with one `event: error` on a failure (§4.3).

The learn-once fallbacks are chat's (§4.6), per deployment and this API: a deployment that answers a
stream request with a body is asked for a body from then on (re-emitted as the stream it would have
been); a translated request's `stream_options`, when rejected, is dropped for one retry and learned when
that retry succeeds.
"""

from __future__ import annotations

import time

from gateway.apis.chat_attempt import check_status
from gateway.config.types import Deployment
from gateway.core.messages.stream import MessagesStream
from gateway.core.policy.learned import Fact
from gateway.core.sse import looks_like_sse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import FirstTokenDeadline, Opened, fetch_body, forwardable, raise_inband
from gateway.pipeline.first_token import until_first_token
from gateway.pipeline.learned import confirm, wants
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.timeouts import LoopTimeout
from gateway.providers.base import MAX_BODY_BYTES, MessagesTranslator

OpenedMessages = Opened[MessagesStream]


async def open_messages(rt: Runtime, ctx: RequestContext, d: Deployment) -> OpenedMessages:
    """One attempt: open the stream and read until the first output token, under `first_token_s`."""
    provider, tr = rt.provider(d), rt.messages_translator(d)
    assert tr is not None, "the handler only routes to deployments that serve the Messages API"
    ttl = provider.learn_ttl_s
    # the translator passes anthropic-version / -beta on: only those the provider's forward_headers allow
    client_headers = forwardable(rt, d, ctx.client_headers)
    t_sent = time.perf_counter()
    opened = Opened(d, None, MessagesStream(tr.messages_stream_parser(), d.label), t_sent)
    if wants(rt.learned, ctx.fallbacks, d, ctx.api, Fact.NO_STREAM):
        req = tr.messages_request(ctx.body, d.model, stream=False, client_headers=client_headers)
        _replay(opened, tr, await fetch_body(rt, d, req, tr.classify_http_error, client_headers))
        confirm(rt.learned, ctx.fallbacks, d, ctx.api, Fact.NO_STREAM, ttl)
        return opened
    options = not wants(rt.learned, ctx.fallbacks, d, ctx.api, Fact.NO_STREAM_OPTIONS)
    with FirstTokenDeadline(d) as deadline:
        async with LoopTimeout(rt.upstream.loop, provider.timeouts.first_token_s):
            req = tr.messages_request(ctx.body, d.model, stream=True, client_headers=client_headers,
                                      send_stream_options=options)
            resp = await rt.upstream.open(provider, req, d.label, client_headers)
            opened.response = resp
            deadline.track(opened)
            await check_status(resp, tr.classify_http_error, d, added_options=options and tr.sends_stream_options)
            first = b"" if resp.is_event_stream else await resp.next_chunk()
            if resp.is_event_stream or looks_like_sse(first):
                await until_first_token(resp, opened.stream, d.label, first)
                opened.t_first = time.perf_counter()
                confirm(rt.learned, ctx.fallbacks, d, ctx.api, Fact.NO_STREAM_OPTIONS, ttl)
                return opened
    try:  # a body to a stream request: the rest of it under the response's own `total_s`
        _replay(opened, tr, first + await resp.read_body(MAX_BODY_BYTES - len(first)))
    except BaseException:
        opened.close()
        raise
    rt.learned.learn(d, ctx.api, Fact.NO_STREAM, ttl)  # from a real answer only, never from an error body
    return opened


def _replay(opened: OpenedMessages, tr: MessagesTranslator, body: bytes) -> None:
    """A whole answer as a body: checked like one, then held as the stream it would have been."""
    parsed = tr.parse_messages_body(body)
    raise_inband(parsed.events)
    opened.stream.hold_message(parsed.obj)
    opened.t_first = time.perf_counter()
