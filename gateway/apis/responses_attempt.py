"""A streamed Responses request up to its first output token: one attempt of the attempt loop.

Everything before the first token — `response.created`, `response.in_progress`, items and parts without
text, unknown events — is the preamble: held, and thrown away with the attempt if it fails, so a retry
or a fallback is invisible and the client sees one lifecycle. An in-band `error` or `response.failed`
before the first token fails the attempt (retried or passed on by `core.retry`); after it, the relay
forwards it (CONTRACT §4.1-§4.3).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gateway.config.types import Deployment
from gateway.core.events import Failure, FailureKind, InbandError
from gateway.core.responses.assemble import ResponsesAssembler
from gateway.core.responses.replay import replay_events
from gateway.core.responses.wire import TERMINAL_OK, ResponsesEvent, ResponsesParser
from gateway.core.sse import SSEDecoder
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import FirstTokenDeadline, decode, raise_for_status
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.timeouts import LoopTimeout
from gateway.providers.responses_openai import ResponsesStreamParser, ResponsesTranslator
from gateway.upstream import UpstreamError, UpstreamResponse


@dataclass(slots=True)
class OpenedResponses:
    deployment: Deployment
    response: UpstreamResponse
    parser: ResponsesStreamParser
    t_sent: float
    decoder: SSEDecoder = field(default_factory=SSEDecoder)
    pending: list[ResponsesEvent] = field(default_factory=list)  # the held preamble and the first token
    assembler: ResponsesAssembler = field(default_factory=ResponsesAssembler)
    done: bool = False  # the upstream's bytes have ended, or it sent `[DONE]`
    t_first: float = 0.0

    def close(self) -> None:
        self.response.close()

    def feed(self, data: bytes) -> list[ResponsesEvent]:
        """Bytes -> parsed events, folded into the assembler. Raises UpstreamError for an event too large."""
        sse_events = decode(self.decoder, data, self.deployment)
        out: list[ResponsesEvent] = []
        for sse in sse_events:
            for ev in self.parser.parse(sse):
                if ev.done:
                    self.done = True
                    continue
                self.assembler.feed(ev)
                out.append(ev)
        return out

    async def read(self) -> list[ResponsesEvent]:
        """The next events; [] at the end of the bytes (then `done` is set)."""
        data = await self.response.next_chunk()
        if not data:
            self.decoder.finish()
            self.done = True
            return []
        return self.feed(data)


def translator_for(rt: Runtime, d: Deployment) -> ResponsesTranslator | None:
    return rt.responses_translator(d)


async def open_responses(rt: Runtime, ctx: RequestContext, d: Deployment) -> OpenedResponses:
    """One attempt: open the stream and read until the first output token, under `first_token_s`."""
    provider, tr = rt.provider(d), translator_for(rt, d)
    assert tr is not None, "the handler only routes to deployments that serve the Responses API"
    t_sent = time.perf_counter()
    with FirstTokenDeadline(d) as deadline:
        async with LoopTimeout(rt.upstream.loop, provider.timeouts.first_token_s):
            stream = d.provider not in rt.learned.no_stream  # learned from a 400 that names `stream`
            resp = await rt.upstream.open(provider, tr.responses_request(ctx.body, d.model, stream=stream), d.label)
            opened = deadline.track(OpenedResponses(d, resp, tr.responses_stream_parser(), t_sent))
            await raise_for_status(resp, tr.classify_http_error, d.label)
            if not resp.is_event_stream:  # buffered: asked so, or a server that ignores `stream`
                _replay(opened, tr, await resp.read_body())
                return opened
            await _until_first_token(opened)
            opened.t_first = time.perf_counter()
            return opened


async def _until_first_token(opened: OpenedResponses) -> None:
    """Hold events up to and including the first output token (or the end of an empty answer). What
    follows it in the same read is after the token, so it is the relay's, failures included: the order
    of the stream decides, not how the bytes happened to be chunked."""
    started = False
    while not started and not opened.done:
        for ev in await opened.read():
            if not started:
                failure = ev.failure
                if failure is not None:
                    raise UpstreamError(failure)  # before the first token: invisible, retried or passed on
                started = ev.has_token or ev.type in TERMINAL_OK
            opened.pending.append(ev)
    if not started:
        raise UpstreamError(Failure(FailureKind.EARLY_EOF,
                                    f"{opened.deployment.label}: stream ended before the first token"))


def _replay(opened: OpenedResponses, tr: ResponsesTranslator, body: bytes) -> None:
    """A whole answer as a body: checked like one, then re-emitted as the stream it would have been."""
    parsed = tr.parse_responses_body(body)
    for e in parsed.events:
        if type(e) is InbandError:
            raise UpstreamError(e.failure)
    parser = ResponsesParser()
    for obj in replay_events(parsed.obj):
        ev = parser.parse(obj, None)
        opened.assembler.feed(ev)
        opened.pending.append(ev)
    opened.done = True
    opened.t_first = time.perf_counter()
