"""One attempt of a streamed chat request: open it and read up to the first output token.

Before the first token the preamble (role chunk, Azure's prompt-filter chunk, ...) is held by the stream
core (`core.chat.stream.ChatStream`), so a retried attempt replaces it and the client sees one clean
lifecycle. At the first token the pipeline commits: headers, the held preamble, the token. After it,
nothing is retried: a failure ends the stream with one error event and no `[DONE]` (CONTRACT §4.3).
"""

from __future__ import annotations

import time

from gateway.config.types import Deployment
from gateway.core.chat.assemble import completion_to_chunks
from gateway.core.chat.stream import ChatStream
from gateway.core.events import Failure, FailureKind
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import FirstTokenDeadline, Opened, fetch_body, raise_for_status, raise_inband
from gateway.pipeline.first_token import until_first_token
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.timeouts import LoopTimeout
from gateway.providers.base import ChatTranslator
from gateway.upstream import UpstreamError

OpenedChat = Opened[ChatStream]


async def open_stream(rt: Runtime, ctx: RequestContext, d: Deployment) -> OpenedChat:
    """One attempt: open, read until the first output token under `first_token_s`."""
    provider, tr = rt.provider(d), rt.translator(d)
    t_sent = time.perf_counter()
    with FirstTokenDeadline(d) as deadline:
        async with LoopTimeout(rt.upstream.loop, provider.timeouts.first_token_s):
            if d.provider in rt.learned.no_stream:
                return await _buffered(rt, ctx, d, tr, t_sent)
            req = tr.chat_request(ctx.body, d.model, stream=True,
                                  send_stream_options=d.provider not in rt.learned.no_stream_options)
            resp = await rt.upstream.open(provider, req, d.label, ctx.client_headers)
            opened = deadline.track(Opened(d, resp, ChatStream(tr.stream_parser(), d.label), t_sent))
            await raise_for_status(resp, tr.classify_http_error, d.label)
            if not resp.is_event_stream:
                answer = _from_body(d, tr, await resp.read_body(), opened)
                # learned only from a real answer: a JSON error body must not switch the provider for good
                rt.learned.learn("no_stream", d.provider)
                return answer
            await until_first_token(resp, opened.stream, d.label)
            opened.t_first = time.perf_counter()
            return opened


async def _buffered(rt: Runtime, ctx: RequestContext, d: Deployment, tr: ChatTranslator,
                    t_sent: float) -> OpenedChat:
    """Learn-once fallback: the provider can't stream, so ask for a body and re-emit it as a stream."""
    req = tr.chat_request(ctx.body, d.model, stream=False, send_stream_options=False)
    body = await fetch_body(rt, d, req, tr.classify_http_error, ctx.client_headers)
    return _from_body(d, tr, body, Opened(d, None, ChatStream(None, d.label), t_sent))


def _from_body(d: Deployment, tr: ChatTranslator, body: bytes, opened: OpenedChat) -> OpenedChat:
    parsed = tr.parse_body(body)
    raise_inband(parsed.events)
    opened.stream.hold_body(parsed.events, completion_to_chunks(parsed.obj))
    opened.t_first = time.perf_counter()
    if not opened.stream.committable:
        raise UpstreamError(Failure(FailureKind.MALFORMED, f"{d.label}: answer without choices"))
    return opened
