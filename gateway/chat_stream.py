"""A streamed chat request: the attempt up to the first output token, then the relay loop.

Before the first token the preamble (role chunk, Azure's prompt-filter chunk, ...) is held, so a retried
attempt replaces it and the client sees one clean lifecycle. At the first token the pipeline commits:
headers, the held preamble, the token. After it, nothing is retried: a failure ends the stream with one
error event and no `[DONE]` (CONTRACT §4.3).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gateway.attempt_io import FirstTokenDeadline, decode, fetch_body, raise_for_status, raise_inband
from gateway.config_types import Deployment
from gateway.context import RequestContext
from gateway.core.assemble import ChatAssembler, completion_to_chunks
from gateway.core.events import Failure, FailureKind, InbandError
from gateway.core.sse import SSEDecoder, SSEEvent, data_lines
from gateway.providers.base import ChatChunk, ChatTranslator, StreamParser
from gateway.runtime import Runtime
from gateway.timeouts import LoopTimeout
from gateway.upstream import UpstreamError, UpstreamResponse


@dataclass(slots=True)
class OpenedStream:
    deployment: Deployment
    response: UpstreamResponse | None
    decoder: SSEDecoder
    parser: StreamParser | None
    t_sent: float
    pending: list[ChatChunk] = field(default_factory=list)
    assembler: ChatAssembler = field(default_factory=ChatAssembler)
    done: bool = False  # upstream said [DONE] or its body has been read whole
    t_first: float = 0.0
    error: Failure | None = None  # an in-band error that came after the first token, in the same read
    # events of the committing read after the one that made the stream committable: the relay reads
    # them on its fast path (a whole answer often comes in that one read)
    unread: list[SSEEvent] = field(default_factory=list)
    unread_datas: list[bytes] = field(default_factory=list)  # the same, as the events' data (fast path)

    def close(self) -> None:
        if self.response is not None:
            self.response.close()

    def feed(self, data: bytes) -> list[ChatChunk]:
        """Before the commit: bytes -> client-bound chunks, up to the event that makes the stream
        committable (the rest waits in `unread`, or as data in `unread_datas`); raises UpstreamError
        for an in-band error or a bad event."""
        region = self.decoder.take_region(data)
        if region is not None:
            return self._feed_region(region)
        return self._feed_events_until_commit(decode(self.decoder, data, self.deployment))

    def _feed_events_until_commit(self, events: list[SSEEvent]) -> list[ChatChunk]:
        out: list[ChatChunk] = []
        for i, ev in enumerate(events):
            out += self.feed_events([ev])
            if self.done or self.committable:
                self.unread = events[i + 1:]
                break
        return out

    def _feed_region(self, region: bytes) -> list[ChatChunk]:
        """`feed` for a read of whole events: the rest after the commit is left as the events' data
        when they are all one-line data events (the relay's fast path reads them so)."""
        datas = data_lines(region)
        if datas is None:
            return self._feed_events_until_commit(self.decoder.events_of(region))
        out: list[ChatChunk] = []
        ident = self.decoder.last_id
        for i, data in enumerate(datas):
            out += self.feed_events([SSEEvent(data, None, ident)])
            if self.done or self.committable:
                self.unread_datas = datas[i + 1:]
                break
        return out

    def feed_events(self, events: list[SSEEvent]) -> list[ChatChunk]:
        """SSE events -> client-bound chunks. An in-band error after the first token sets `error`
        and `done` and stops: the events after it are not read."""
        out: list[ChatChunk] = []
        assert self.parser is not None
        for ev in events:
            for ch in self.parser.parse(ev):
                if ch.done:
                    self.done = True
                    continue
                for e in ch.events:
                    if type(e) is InbandError:
                        if not self.assembler.first_token:
                            raise UpstreamError(e.failure)
                        self.error = e.failure  # text before it stands; the relay ends the stream
                        self.done = True
                        return out
                self.assembler.feed(ch.events)
                out.append(ch)
        return out

    @property
    def committable(self) -> bool:
        """An output token has come, or the answer finished without one (an empty answer is an answer)."""
        return self.assembler.first_token or self.assembler.finished


async def open_stream(rt: Runtime, ctx: RequestContext, d: Deployment) -> OpenedStream:
    """One attempt: open, read until the first output token under `first_token_s`."""
    provider, tr = rt.provider(d), rt.translator(d)
    t_sent = time.perf_counter()
    with FirstTokenDeadline(d) as deadline:
        async with LoopTimeout(rt.upstream.loop, provider.timeouts.first_token_s):
            if d.provider in rt.learned.no_stream:
                return await _buffered(rt, ctx, d, tr, t_sent)
            req = tr.chat_request(ctx.body, d.model, stream=True,
                                  send_stream_options=d.provider not in rt.learned.no_stream_options)
            resp = await rt.upstream.open(provider, req, d.label)
            opened = deadline.track(OpenedStream(d, resp, SSEDecoder(), tr.stream_parser(), t_sent))
            await raise_for_status(resp, tr.classify_http_error, d.label)
            if not resp.is_event_stream:
                answer = _from_body(d, tr, await resp.read_body(), t_sent, opened)
                # learned only from a real answer: a JSON error body must not switch the provider for good
                rt.learned.learn("no_stream", d.provider)
                return answer
            await _until_first_token(opened)
            opened.t_first = time.perf_counter()
            return opened


async def _until_first_token(opened: OpenedStream) -> None:
    assert opened.response is not None
    while not opened.committable:
        if opened.done:
            break
        data = await opened.response.next_chunk()
        if not data:
            opened.decoder.finish()
            opened.done = True
            break
        opened.pending.extend(opened.feed(data))
    if not opened.committable:
        raise UpstreamError(Failure(FailureKind.EARLY_EOF,
                                    f"{opened.deployment.label}: stream ended before the first token"))


async def _buffered(rt: Runtime, ctx: RequestContext, d: Deployment, tr: ChatTranslator,
                    t_sent: float) -> OpenedStream:
    """Learn-once fallback: the provider can't stream, so ask for a body and re-emit it as a stream."""
    req = tr.chat_request(ctx.body, d.model, stream=False, send_stream_options=False)
    body = await fetch_body(rt, d, req, tr.classify_http_error)
    return _from_body(d, tr, body, t_sent, OpenedStream(d, None, SSEDecoder(), None, t_sent))


def _from_body(d: Deployment, tr: ChatTranslator, body: bytes, t_sent: float,
               opened: OpenedStream) -> OpenedStream:
    parsed = tr.parse_body(body)
    raise_inband(parsed.events)
    opened.assembler.feed(parsed.events)
    opened.pending = [ChatChunk([], chunk) for chunk in completion_to_chunks(parsed.obj)]
    opened.done = True
    opened.t_first = time.perf_counter()
    if not opened.committable:
        raise UpstreamError(Failure(FailureKind.MALFORMED, f"{d.label}: answer without choices"))
    return opened
