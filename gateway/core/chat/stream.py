"""One attempt's chat stream, sans I/O: upstream bytes in, client bytes out.

`ChatStream` owns the SSE decoder, the provider's parser (and the envelope it learned), the assembler
and, once committed, the output filter. Before the commit `feed` holds what it parses (the preamble: role
chunk, Azure's prompt-filter chunk, ...) and stops at the event that makes the stream `committable` (the
rest of that read waits in `unread`); `commit` passes the held chunks through the filter, and from then
on `feed(bytes)` returns the bytes for the client. The fast paths live here: reads of whole one-line
events go by their bytes, runs of content chunks of the learned envelope go through the assembler and
the text window together and out as the upstream's own bytes when the window released them unchanged.

A failure raises `StreamFailed` (its `Failure` names the deployment); an in-band error after the first
token sets `error` and `done` instead: the text before it stands. An event the parser cannot read
(unparseable JSON, not an object) after the first token is skipped and counted in `skipped_malformed`
(the relay reports it): one broken line must not cut a long answer off; before the first token it fails
the attempt like any other failure, so it is retried. An event over the size limit always fails.
A tool-call delta that came without `index` is numbered by the assembler (`ChatAssembler.feed`) before
it is forwarded, and its chunk goes out re-encoded with the index.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from gateway.core.chat.assemble import ChatAssembler, completion_to_chunks
from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.shape import ContentShape, Run
from gateway.core.chat.wire import chunk_events, continued_chunk, has_output_token, number_tool_calls
from gateway.core.events import Failure, FailureKind, InbandError, StreamEvent, StreamFailed, ToolCallDelta
from gateway.core.scrub import Scrubber
from gateway.core.sse import DONE_EVENT, SSEDecoder, SSEError, SSEEvent, data_lines
from gateway.core.stream import ClientError, Ended


@dataclass(slots=True)
class ChatChunk:
    """One client-bound chunk in OpenAI `chat.completion.chunk` shape, with its typed events.

    `raw` holds the upstream's own data bytes when `obj` is exactly what it sent, so an unchanged chunk is
    forwarded without re-serialising (the hot path); a translated chunk has raw=None. (Content-only
    chunks of a learned envelope never become ChatChunks: the stream reads them from their bytes.)
    """

    events: list[StreamEvent]
    obj: dict[str, Any] | None
    raw: bytes | None = None
    done: bool = False  # the upstream's `[DONE]` (or its protocol's end): stop reading

    def __init__(self, events: list[StreamEvent], obj: dict[str, Any] | None, raw: bytes | None = None,
                 done: bool = False) -> None:  # compiled, unlike a dataclass's own (docs/compiled.md)
        self.events, self.obj, self.raw, self.done = events, obj, raw, done


class StreamParser(Protocol):
    def parse(self, event: SSEEvent) -> list[ChatChunk]: ...

    @property
    def shape(self) -> ContentShape | None:
        """The stream's learned content-only envelope, when this parser reads chunks by their bytes."""


class ChatStream:
    __slots__ = ("assembler", "clean_end", "decoder", "done", "error", "filt", "label", "meta", "parser",
                 "preamble", "skipped_malformed", "unread", "unread_datas")

    def __init__(self, parser: StreamParser | None, label: str) -> None:
        self.decoder = SSEDecoder()
        self.parser = parser  # None: a whole answer re-emitted as a stream (`hold_body`)
        self.label = label  # the deployment, for failure messages
        self.assembler = ChatAssembler()
        self.preamble: list[ChatChunk] = []  # held until the commit
        self.done = False  # upstream said [DONE] or its body has ended
        self.clean_end = False  # upstream said [DONE] (its protocol's end), not just closed
        self.error: Failure | None = None  # an in-band error that came after the first token
        self.filt: ChatOutputFilter | None = None  # set by `commit`
        self.skipped_malformed = 0  # unreadable events after the first token, skipped
        self.meta: dict[str, Any] = {}  # the first held chunk's object: the answer's id, model, created
        # events of the committing read after the one that made the stream committable (the fast path
        # reads them as data when they are all one-line data events)
        self.unread: list[SSEEvent] = []
        self.unread_datas: list[bytes] = []

    @property
    def committable(self) -> bool:
        """An output token has come, or the answer ended cleanly without one (an empty answer is an
        answer: a finish reason, or `[DONE]` with nothing before it)."""
        return self.assembler.first_token or self.assembler.finished or self.clean_end

    @property
    def empty_answer(self) -> bool:
        return not self.assembler.first_token and (self.assembler.finished or self.clean_end)

    @property
    def ended_early(self) -> bool:
        """The upstream stopped before the answer finished (and, without [DONE], before any token)."""
        asm = self.assembler
        return not (asm.finished or self.clean_end or (self.done and asm.first_token))

    # -- before the commit -------------------------------------------------------------------------

    def hold_body(self, events: list[StreamEvent], chunks: list[dict[str, Any]]) -> None:
        """A whole answer (a non-stream body) as the held stream: its events and its chunks."""
        self.assembler.feed(events)
        # each chunk with its own events: the filter tells by them which write carries the first token
        self.preamble = [ChatChunk(chunk_events(chunk), chunk) for chunk in chunks]
        self.done = True

    def hold_answer(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        """A non-stream completion as the held stream: its events and the chunks it would have come in."""
        self.hold_body(events, completion_to_chunks(obj))
        if not self.committable:
            raise StreamFailed(Failure(FailureKind.MALFORMED, f"{self.label}: answer without choices"))

    def feed(self, data: bytes) -> bytes:
        """Upstream bytes -> client bytes; before the commit they are held, and b"" is returned."""
        if self.filt is None:
            self.preamble.extend(self._hold(data))
            return b""
        return self._relay_read(self.filt, data)

    def end_of_input(self) -> None:
        """The upstream's bytes have ended. Before the commit that ends the attempt's reading (`done`: a
        token already read is an answer); after it, `ended_early` tells whether the answer was whole."""
        self.decoder.finish()
        if self.filt is None:
            self.done = True

    def _decode(self, data: bytes) -> list[SSEEvent]:
        try:
            return self.decoder.feed(data)
        except SSEError:
            raise StreamFailed(Failure(FailureKind.MALFORMED, f"{self.label}: event too large")) from None

    def _hold(self, data: bytes) -> list[ChatChunk]:
        region = self.decoder.take_region(data)
        if region is not None:
            return self._hold_region(region)
        return self._hold_events(self._decode(data))

    def _hold_events(self, events: list[SSEEvent]) -> list[ChatChunk]:
        out: list[ChatChunk] = []
        for i, ev in enumerate(events):
            out += self.feed_events([ev])
            if self.done or self.committable:
                self.unread = events[i + 1:]
                break
        return out

    def _hold_region(self, region: bytes) -> list[ChatChunk]:
        """A read of whole events: the rest after the commit is left as the events' data when they are
        all one-line data events (the fast path reads them so)."""
        datas = data_lines(region)
        if datas is None:
            return self._hold_events(self.decoder.events_of(region))
        out: list[ChatChunk] = []
        ident = self.decoder.last_id
        for i, data in enumerate(datas):
            out += self.feed_events([SSEEvent(data, None, ident)])
            if self.done or self.committable:
                self.unread_datas = datas[i + 1:]
                break
        return out

    def feed_events(self, events: list[SSEEvent]) -> list[ChatChunk]:
        """SSE events -> client-bound chunks. An in-band error before the first token fails the attempt;
        after it, it sets `error` and `done` and stops: the events after it are not read."""
        out: list[ChatChunk] = []
        assert self.parser is not None
        for ev in events:
            for ch in self.parser.parse(ev):
                if ch.done:
                    self.done = self.clean_end = True
                    continue
                for e in ch.events:
                    if type(e) is InbandError:
                        if not self.assembler.first_token:
                            raise StreamFailed(e.failure)
                        if e.failure.kind is FailureKind.MALFORMED:
                            self.skipped_malformed += 1
                            break  # skipped: the `else` below does not run
                        self.error = e.failure  # text before it stands; the relay ends the stream
                        self.done = True
                        return out
                else:
                    numbered = self.assembler.feed(ch.events)
                    out.append(ch if numbered is None else _numbered(ch, numbered))
        return out

    # -- the commit and after ----------------------------------------------------------------------

    def commit(self, filt: ChatOutputFilter) -> bytes:
        """The held preamble, the first token and the rest of the committing read, for the client."""
        self.filt = filt
        self.meta = {}
        for ch in self.preamble:  # not `next(<genexpr>)`: see `wire.has_output_token`
            if ch.obj:
                self.meta = ch.obj
                break
        first = _apply(filt, self.preamble)
        if self.unread:
            first += self._relay_events(filt, self.unread)
        if self.unread_datas:
            first += self._relay_datas(filt, self.unread_datas)
        self.preamble, self.unread, self.unread_datas = [], [], []
        return first

    def completion(self) -> dict[str, Any]:
        """The whole answer as a `chat.completion` body, as the assembler read it."""
        meta = self.meta
        return self.assembler.completion(id=str(meta.get("id", "")), model=str(meta.get("model", "")),
                                         created=int(meta.get("created", 0) or 0))

    # -- the end (`core.stream.StreamCore`) -------------------------------------------------------

    def drain(self) -> bytes:
        return b""  # a chat parser owes nothing at the end of the bytes

    def upstream_end(self, scrubber: Scrubber) -> Ended | None:
        """An in-band error after the first token is ours to tell (its upstream text is never sent), an
        end without `[DONE]` or a finish reason an early one."""
        if self.error is not None:
            reason = self.error.kind.value
            return Ended(reason, f"{self.label}: {reason.replace('_', ' ')} after the first token", self.error)
        if self.ended_early:
            return Ended("early_eof", f"{self.label}: upstream ended the stream early")
        return None

    def tail(self) -> bytes:
        return self.filt.flush_all() if self.filt is not None else b""

    def finish(self) -> bytes:
        return DONE_EVENT

    def fail(self, error: ClientError, *, held: bool, refused: bool) -> bytes:
        """One error event, no `[DONE]`: `data: {"error": {...}}`, which the SDKs raise on."""
        tail = b"" if refused or held else self.tail()
        body = {"error": {"message": error.message, "type": error.type, "param": error.param, "code": error.code}}
        return tail + b"data: " + orjson.dumps(body) + b"\n\n"

    # -- continuation (docs/continuation.md) --------------------------------------------------------------

    def resume_point(self) -> str | None:
        return self.assembler.resume_text() if self.filt is not None and self.filt.refusal is None else None

    def reported_model(self) -> object:
        for ch in self.preamble:  # every chunk carries the model; the first with an object says it
            if ch.obj:
                return ch.obj.get("model")
        return None

    def end_reason(self) -> str | None:
        return self.assembler.finish_reason(0)

    def continue_with(self, events: list[StreamEvent]) -> bytes:
        """Each event as a chunk of this stream (its id, created, model), through its filter."""
        filt = self.filt
        assert filt is not None, "only a committed stream is continued"
        self.error = None  # the failure is behind the seam now
        out: list[bytes] = []
        for e in events:
            numbered = self.assembler.feed([e])
            if numbered:
                e = numbered[0]
            out.append(_apply_one(filt, ChatChunk([e], continued_chunk(self.meta, e))))
        return b"".join(out)

    def _relay_read(self, filt: ChatOutputFilter, data: bytes) -> bytes:
        if self.parser is not None and self.parser.shape is not None:
            region = self.decoder.take_region(data)  # the usual read: whole events, read by their bytes
            if region is not None:
                datas = data_lines(region)
                if datas is not None:
                    return self._relay_datas(filt, datas)
                return self._relay_events(filt, self.decoder.events_of(region))
        return self._relay_events(filt, self._decode(data))

    def _relay_events(self, filt: ChatOutputFilter, events: list[SSEEvent]) -> bytes:
        """The events of one upstream read -> the client's bytes."""
        if self.parser is None or self.parser.shape is None:
            return _apply(filt, self.feed_events(events))
        return self._relay_datas(filt, [ev.data for ev in events])

    def _relay_datas(self, filt: ChatOutputFilter, datas: list[bytes]) -> bytes:
        """The event data of one read -> the client's bytes. Runs of content chunks of the learned
        envelope go through the assembler and the text window together, and out as their own bytes when
        the window released them as they came; the other events one by one."""
        shape = self.parser.shape if self.parser is not None else None
        if shape is None:  # a parser that reads every event whole
            ident = self.decoder.last_id
            return _apply(filt, self.feed_events([SSEEvent(d, None, ident) for d in datas]))
        segments = shape.runs(datas) if len(datas) > 1 and filt.content_push(shape.index) is not None else None
        if segments is None:
            return self._relay_each(filt, datas)
        out: list[bytes] = []
        for seg in segments:
            if type(seg) is list:
                out.append(self._relay_each(filt, seg))
                if self.error is not None:
                    break  # an in-band error: what came before it stands, nothing after it is read
                continue
            assert isinstance(seg, Run)
            push = filt.content_push(seg.index)  # None once a guardrail refused: then one event at a time
            if push is None:
                out.append(self._relay_each(filt, seg.datas))
                continue
            self.assembler.add_contents(seg.index, seg.texts)
            events = seg.events(push(seg.texts))
            if events:
                filt.output_released = True
                out.append(events)
        return b"".join(out)

    def _relay_each(self, filt: ChatOutputFilter, datas: list[bytes]) -> bytes:
        """Event data one by one. A content-only chunk of the stream's learned envelope goes from its
        bytes to the filter with no chunk object in between; every other event takes the parser,
        `feed_events` and the filter's general path (the parsers that learn shapes read an event's data
        only)."""
        assert self.parser is not None and self.parser.shape is not None
        shape = self.parser.shape
        out: list[bytes] = []
        match = shape.match
        index = shape.index
        push = filt.content_push(index)  # the read's deltas to the window together, when nothing can refuse
        hits: list[tuple[str, int, int]] = []  # matched chunks not yet through the window, and their bytes
        raws: list[bytes] = []
        for data in datas:
            hit = match(data)
            if hit is not None and push is not None:
                hits.append(hit)
                raws.append(data)
                continue
            if hits:
                self._release(out, hits, raws, push, index, filt)
                hits, raws = [], []
            if hit is not None:  # a stage that can refuse: one delta at a time
                text, _, end = hit
                self.assembler.add_content(index, text)
                _write_released(out, shape, data, end, text, filt.release_content(index, text))
                continue
            out.extend(_apply_one(filt, ch) for ch in self.feed_events([SSEEvent(data)]))
            if self.error is not None:
                break  # an in-band error: what came before it stands, nothing after it is read
            if shape.index != index or filt.refusal is not None:
                index = shape.index  # the parse may have taught the shape a new envelope
                push = filt.content_push(index)
        if hits:
            self._release(out, hits, raws, push, index, filt)
        return b"".join(out)

    def _release(self, out: list[bytes], hits: list[tuple[str, int, int]], raws: list[bytes],
                 push: Callable[[list[str]], list[str]] | None, index: int, filt: ChatOutputFilter) -> None:
        """Consecutive content chunks of one read (their matches and bytes) through the assembler and the
        window together; a chunk whose text is released as it came is forwarded as the upstream's bytes,
        a changed one spliced."""
        assert push is not None and self.parser is not None and self.parser.shape is not None
        splice = self.parser.shape.splice_into
        texts = [h[0] for h in hits]
        self.assembler.add_contents(index, texts)
        before = len(out)
        for data, (text, _, end), rel in zip(raws, hits, push(texts), strict=True):
            if rel == text:
                out += (b"data: ", data, b"\n\n")
            elif rel:
                splice(out, data, end, rel)
        if len(out) > before:
            filt.output_released = True


def _numbered(ch: ChatChunk, numbered: list[ToolCallDelta]) -> ChatChunk:
    """The chunk with the indexes the assembler gave its index-less tool-call deltas, in its events and
    in its object (re-encoded for the client: raw=None)."""
    given = iter(numbered)
    events = [next(given) if type(e) is ToolCallDelta and e.index < 0 else e for e in ch.events]
    if ch.obj is not None:
        number_tool_calls(ch.obj, numbered)
    return ChatChunk(events, ch.obj, None, ch.done)


def _write_released(out: list[bytes], shape: ContentShape, data: bytes, end: int, text: str, rel: str) -> None:
    if rel == text:
        out += (b"data: ", data, b"\n\n")
    elif rel:
        shape.splice_into(out, data, end, rel)


def _apply(filt: ChatOutputFilter, chunks: list[ChatChunk]) -> bytes:
    if len(chunks) == 1:
        return _apply_one(filt, chunks[0])
    return b"".join([_apply_one(filt, ch) for ch in chunks])


def _apply_one(filt: ChatOutputFilter, ch: ChatChunk) -> bytes:
    return filt.apply(ch.obj, ch.raw, not filt.output_released and has_output_token(ch.events))
