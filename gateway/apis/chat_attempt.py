"""One attempt of a streamed chat request: open it and read up to the first output token.

Before the first token the preamble (role chunk, Azure's prompt-filter chunk, ...) is held by the stream
core (`core.chat.stream.ChatStream`), so a retried attempt replaces it and the client sees one clean
lifecycle. At the first token the pipeline commits: headers, the held preamble, the token. After it,
nothing is retried: a failure ends the stream with one error event and no `[DONE]` (CONTRACT §4.3).

Learn-once fallbacks (CONTRACT §4.6), per deployment and API: `stream_options` that the gateway added
and the upstream rejected (any 400/422) is dropped for one retry, and learned when that retry succeeds;
a deployment that answers a stream request with a JSON body is asked for a body next time (the buffered
path, under `total_s`: a whole answer takes as long as it takes), its answer re-emitted as a stream.
"""

from __future__ import annotations

import dataclasses
import time

from gateway.config.types import Deployment
from gateway.core.chat.assemble import completion_to_chunks
from gateway.core.chat.stream import ChatStream
from gateway.core.events import Failure, FailureKind
from gateway.core.policy.learned import Fact
from gateway.core.sse import looks_like_sse
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import FirstTokenDeadline, Opened, fetch_body, raise_for_status, raise_inband
from gateway.pipeline.first_token import until_first_token
from gateway.pipeline.learned import confirm, wants
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.timeouts import LoopTimeout
from gateway.providers.base import MAX_BODY_BYTES, ChatTranslator
from gateway.upstream import UpstreamError, UpstreamResponse

OpenedChat = Opened[ChatStream]


async def open_stream(rt: Runtime, ctx: RequestContext, d: Deployment) -> OpenedChat:
    """One attempt: open, read until the first output token under `first_token_s`."""
    provider, tr = rt.provider(d), rt.translator(d)
    ttl = provider.learn_ttl_s
    t_sent = time.perf_counter()
    if wants(rt.learned, ctx.fallbacks, d, ctx.api, Fact.NO_STREAM):
        opened = await _buffered(rt, ctx, d, tr, t_sent)
        confirm(rt.learned, ctx.fallbacks, d, ctx.api, Fact.NO_STREAM, ttl)
        return opened
    options = not wants(rt.learned, ctx.fallbacks, d, ctx.api, Fact.NO_STREAM_OPTIONS)
    added = options and tr.sends_stream_options and "stream_options" not in ctx.body  # by us, not the client
    with FirstTokenDeadline(d) as deadline:
        async with LoopTimeout(rt.upstream.loop, provider.timeouts.first_token_s):
            req = tr.chat_request(ctx.body, d.model, stream=True, send_stream_options=options)
            resp = await rt.upstream.open(provider, req, d.label, ctx.client_headers)
            opened = deadline.track(Opened(d, resp, ChatStream(tr.stream_parser(), d.label), t_sent))
            await _check_status(resp, tr, d, added_options=added)
            first = b"" if resp.is_event_stream else await resp.next_chunk()
            if resp.is_event_stream or looks_like_sse(first):
                await until_first_token(resp, opened.stream, d.label, first)
                opened.t_first = time.perf_counter()
                confirm(rt.learned, ctx.fallbacks, d, ctx.api, Fact.NO_STREAM_OPTIONS, ttl)
                return opened
    # A JSON body to a stream request: the rest of it under the response's own `total_s`.
    try:
        answer = _from_body(d, tr, first + await resp.read_body(MAX_BODY_BYTES - len(first)), opened)
    except BaseException:
        opened.close()
        raise
    rt.learned.learn(d, ctx.api, Fact.NO_STREAM, ttl)  # from a real answer only, never from an error body
    return answer


async def _check_status(resp: UpstreamResponse, tr: ChatTranslator, d: Deployment, added_options: bool) -> None:
    """A rejection of the `stream_options` we added is told by its status alone: providers name the
    parameter (`param: stream_options`), or not (Azure: `param: ""`), or answer 422 (vLLM-style
    validation). It is retried once without, unless the rejection names another parameter or a
    content code; a request rejected for another reason fails again on that retry and is then the
    client's error, passed through."""
    try:
        await raise_for_status(resp, tr.classify_http_error, d.label)
    except UpstreamError as exc:
        f = exc.failure
        if added_options and f.status in (400, 422) and f.kind is FailureKind.HTTP_4XX and _may_be_options(f):
            raise UpstreamError(dataclasses.replace(f, kind=FailureKind.STREAM_OPTIONS_REJECTED)) from None
        raise


# codes that name what is wrong with the request's content, whatever else it carries
_CONTENT_CODES = frozenset({"content_policy_violation", "content_filter", "model_not_found"})


def _may_be_options(f: Failure) -> bool:
    """A rejection that may be of `stream_options`: it names that parameter, or no parameter at all,
    and no code that blames the request's content."""
    return (not f.param or f.param.startswith("stream_options")) and f.code not in _CONTENT_CODES


async def _buffered(rt: Runtime, ctx: RequestContext, d: Deployment, tr: ChatTranslator,
                    t_sent: float) -> OpenedChat:
    """Learn-once fallback: the deployment can't stream, so ask for a body and re-emit it as a stream."""
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
