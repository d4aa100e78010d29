"""One attempt's Messages stream, sans I/O: upstream bytes in, client bytes out.

`MessagesStream` owns the SSE decoder, the provider's parser, the assembler and, once committed, the
output filter (`core.messages.filter`). Before the commit `feed` holds what it parses — the preamble:
`message_start`, `ping`, `content_block_start`, unknown events — and stops at the event that makes the
stream `committable`: its first output token (a text, thinking or tool-input delta), a block that ended
(a tool call without arguments), or the message's end (an empty answer, a refusal); the rest of that read
waits in `unread`. `commit` passes the held events through the filter; from then on `feed(bytes)`
returns the bytes for the client.

The end is the protocol's own: the `message_delta` that carries the `stop_reason` and what follows it
(`message_stop`) are kept unsent in `terminal`, for the whole-answer guardrails to judge before they go
out; the stream is done at `message_stop` or at the end of the bytes. An upstream `error` (or an
unparseable event) before the first token raises `StreamFailed`, so the attempt is retried or falls back
invisibly (docs/extensions.md, "Failure semantics"); after it, it is kept in `failed` and ends the stream: text sent
stands (docs/extensions.md, "Failure semantics") — except an event that cannot be read (not JSON, not an object), which
after the first token is skipped and counted in `skipped_malformed`, as in the chat and Responses cores.
A repeated `message_start` is dropped: the client sees one lifecycle.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from gateway.core.events import DeltaKind, Failure, FailureKind, InbandError, StreamEvent, StreamFailed
from gateway.core.messages.assemble import MessagesAssembler
from gateway.core.messages.fast import encode_text_delta, text_delta
from gateway.core.messages.filter import MessagesOutputFilter
from gateway.core.messages.seam import continued_events
from gateway.core.messages.wire import MessagesEvent, anthropic_error_type, message_stream_events, parse_event
from gateway.core.scrub import Scrubber
from gateway.core.sse import SSEDecoder, SSEError, SSEEvent, encode_event
from gateway.core.stream import ClientError, Ended, held_end

MESSAGE_STOP = encode_event("message_stop", b'{"type":"message_stop"}')


class MessagesStreamParser(Protocol):
    """A provider's reader of stream events into Messages events (a translator may build them).
    `native`: the upstream's events are Anthropic's own, so the fast path may read them by their bytes."""

    native: bool

    def parse(self, event: SSEEvent) -> list[MessagesEvent]: ...

    def finish(self) -> list[MessagesEvent]:
        """The upstream's bytes have ended: the events still owed (a translator's pending end)."""


class MessagesStream:
    __slots__ = ("assembler", "decoder", "done", "failed", "filt", "flushed", "label", "parser", "preamble",
                 "skipped_malformed", "started", "terminal", "unread", "unread_frames")

    def __init__(self, parser: MessagesStreamParser, label: str) -> None:
        self.decoder = SSEDecoder()
        self.parser = parser
        self.label = label  # the deployment, for failure messages
        self.assembler: MessagesAssembler = MessagesAssembler()
        self.preamble: list[MessagesEvent] = []  # held until the commit, the first token last
        self.unread: list[MessagesEvent] = []  # the committing read's events after the first token
        self.unread_frames: list[bytes] = []  # or its whole events, as bytes, for the fast path
        self.done: bool = False  # nothing more to read: `message_stop`, the upstream's end, a failure
        self.terminal: list[MessagesEvent] = []  # from the stop_reason's message_delta on, not sent yet
        self.failed: MessagesEvent | None = None  # an upstream failure after the first token, not sent yet
        self.filt: MessagesOutputFilter | None = None  # set by `commit`
        self.started = False  # a message_start has been read
        self.flushed = b""  # client bytes of events a parser still owed at the end of the bytes
        self.skipped_malformed: int = 0  # unreadable events after the first token, skipped (the relay reports them)

    @property
    def committable(self) -> bool:
        a = self.assembler
        return a.first_token or a.block_done or a.finished

    @property
    def empty_answer(self) -> bool:
        """The message ended without any output (a refusal without blocks is an answer, not empty)."""
        a = self.assembler
        return a.finished and not (a.first_token or a.block_done) and a.stop_reason != "refusal"

    # -- before the commit -------------------------------------------------------------------------

    def hold_answer(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        self.hold_message(obj)

    def hold_message(self, msg: dict[str, Any]) -> None:
        """A whole answer (a non-stream Message object) as the held stream it would have been."""
        for obj in message_stream_events(msg):
            ev = parse_event(obj, None)
            self._take(ev, self.preamble)
        self.done = True

    def feed(self, data: bytes) -> bytes:
        """Upstream bytes -> client bytes; before the commit they are held, and b"" is returned."""
        if not self.parser.native or self.terminal:
            return self._feed_events(data)
        out = self._feed_region(data)
        if out is not None:
            return out
        end = self.decoder.event_end(data) if data.find(b"\r") < 0 else -1  # not `in`: see `core.sse`
        if end <= 0:
            return self._feed_events(data)
        # the read finishes an event the last one began: that one alone the slow way, then the rest
        head = self._feed_events(data[:end])
        if self.done:
            return head
        if self.terminal:
            return head + self._feed_events(data[end:])
        rest = self._feed_region(data[end:])
        return head + (rest if rest is not None else self._feed_events(data[end:]))

    def _feed_region(self, data: bytes) -> bytes | None:
        """The fast path, when the read (with what is buffered) is whole events (`take_region`)."""
        region = self.decoder.take_region(data, lines_ok=True)
        if region is None:
            return None
        frames = region.split(b"\n\n")
        frames.pop()  # the region ends with a blank line
        if self.filt is None:
            self._hold_frames(frames)
            return b""
        return self._relay_frames(self.filt, frames)

    def _feed_events(self, data: bytes) -> bytes:
        """The general path: every event decoded and parsed."""
        events = self._parse(self._decode(data))
        if self.filt is None:
            self._hold(events)
            return b""
        return self._relay(self.filt, events)

    def end_of_input(self) -> None:
        """The upstream's bytes have ended: what the parser still owed is read, and reading is over."""
        self.decoder.finish()
        events = self.parser.finish()
        if events and self.filt is None:
            self._hold(events)
        elif events and self.filt is not None:
            self.flushed = self._relay(self.filt, events)
        self.done = True

    def _decode(self, data: bytes) -> list[SSEEvent]:
        try:
            return self.decoder.feed(data)
        except SSEError:
            raise StreamFailed(Failure(FailureKind.MALFORMED, f"{self.label}: event too large")) from None

    def _parse(self, events: list[SSEEvent]) -> list[MessagesEvent]:
        parse = self.parser.parse
        if len(events) == 1:
            return parse(events[0])
        return [ev for sse in events for ev in parse(sse)]

    def _hold(self, events: list[MessagesEvent]) -> None:
        """Hold up to the committing event; a failure before it fails the attempt."""
        if self.committable:  # the rest of a read that committed: after what already waits
            self.unread.extend(events)
            return
        for i, ev in enumerate(events):
            if self.done:
                return
            for e in ev.events:
                if type(e) is InbandError:
                    raise StreamFailed(e.failure)  # invisible: retried or passed on
            self._take(ev, self.preamble)
            if self.committable:
                self.unread = events[i + 1:]
                return

    def _hold_frames(self, frames: list[bytes]) -> None:
        """Hold event by event up to the committing one; the frames after it wait, as bytes, for the
        fast path (`commit`)."""
        if self.committable:  # the rest of a read that committed, after the events that wait
            self.unread_frames.extend(frames)
            return
        for i, frame in enumerate(frames):
            if self.done:
                return
            self._hold(self._parse(self.decoder.events_of(frame + b"\n\n")))
            if self.committable:
                self.unread_frames = frames[i + 1:]
                return

    def _take(self, ev: MessagesEvent, out: list[MessagesEvent]) -> None:
        """Assemble one event and put it where it goes: `out`, or the terminal part."""
        etype = ev.type
        if etype == "message_start":
            if self.started:
                return  # a duplicate: the client has its message_start already
            self.started = True
        elif etype == "ping" and out and out[-1].type == "ping" and out is self.preamble:
            return  # pings in a row: the client is kept alive by one as well as by many (bounded memory)
        self.assembler.feed(ev)
        if self.terminal or self.assembler.finished:
            self.terminal.append(ev)
            if etype == "message_stop":
                self.done = True
            return
        out.append(ev)

    # -- the commit and after ----------------------------------------------------------------------

    def commit(self, filt: MessagesOutputFilter) -> bytes:
        """The held preamble, the first token and the rest of the committing read, for the client."""
        self.filt = filt
        apply = filt.apply
        out = [apply(ev) for ev in self.preamble]
        unread, self.preamble, self.unread = self.unread, [], []
        if unread:
            out.append(self._relay(filt, unread))
        frames, self.unread_frames = self.unread_frames, []
        if frames:
            out.append(self._relay_frames(filt, frames))
        return b"".join(out)

    def end_bytes(self, filt: MessagesOutputFilter) -> bytes:
        """The kept end of a whole answer (`terminal`), through the filter, for the client: the protocol's
        end even if the upstream's `message_stop` was lost."""
        terminal = self.terminal
        end = b"".join([filt.apply(ev) for ev in terminal])
        if terminal[-1].type != "message_stop":
            end += MESSAGE_STOP
        return end

    # -- the end (`core.stream.StreamCore`) -------------------------------------------------------

    def drain(self) -> bytes:
        """What the parser still owed at the end of the bytes (a translator's closing events)."""
        flushed, self.flushed = self.flushed, b""
        return flushed

    def upstream_end(self, scrubber: Scrubber) -> Ended | None:
        return held_end(self.label, "message", scrubber, self.failed, bool(self.terminal), self.forward_failure)

    def tail(self) -> bytes:
        return self.filt.flush_open() if self.filt is not None else b""

    def finish(self) -> bytes:
        assert self.filt is not None
        return self.end_bytes(self.filt)

    def fail(self, error: ClientError, *, held: bool, refused: bool) -> bytes:
        """Anthropic's in-stream `error` event, its type Anthropic's for the status (or the upstream's own)."""
        tail = b"" if refused or held else self.tail()
        etype = anthropic_error_type(error.status, error.type, error.upstream_type)
        return tail + encode_event("error", orjson.dumps({"type": "error",
                                                          "error": {"type": etype, "message": error.message}}))

    # -- continuation (docs/continuation.md) --------------------------------------------------------------

    def resume_point(self) -> str | None:
        return self.assembler.resume_text() if self.filt is not None and self.filt.refusal is None else None

    def reported_model(self) -> object:
        for ev in self.preamble:  # `message_start` leads, its `message` names the model
            if ev.type == "message_start" and ev.obj is not None and isinstance(msg := ev.obj.get("message"), dict):
                return msg.get("model")
        return None

    def end_reason(self) -> str | None:
        return self.assembler.stop_reason

    def continue_with(self, events: list[StreamEvent]) -> bytes:
        """The events as this message's own (`core.messages.seam`), through its filter; its end kept in
        `terminal` like the upstream's own."""
        filt = self.filt
        assert filt is not None, "only a committed stream is continued"
        self.failed = None  # the failure is behind the seam now
        out: list[bytes] = []

        def take(ev: MessagesEvent) -> None:
            held = len(self.terminal)
            pending: list[MessagesEvent] = []
            self._take(ev, pending)
            if pending and len(self.terminal) == held:
                out.append(filt.apply(pending[0]))

        continued_events(self.assembler, events, self.label, take)
        return b"".join(out)

    def forward_failure(self, ev: MessagesEvent) -> bytes:
        """An upstream `error` after the first token (a readable one, scrubbed by the caller), forwarded
        re-encoded from the parsed object (what was checked is exactly what the client gets), after what
        the windows still hold."""
        assert self.filt is not None and ev.obj is not None
        found = ev.obj.get("error")
        err: dict[str, Any] = found if isinstance(found, dict) else {}
        body = {"type": "error", "error": {"type": err.get("type") or "api_error",
                                           "message": err.get("message") or "upstream error"}}
        return self.filt.flush_open() + self.filt.apply(MessagesEvent("error", body, None))

    def _relay_frames(self, filt: MessagesOutputFilter, frames: list[bytes]) -> bytes:
        """The events of a read of whole events (`SSEDecoder.take_region`), as frames: runs of
        text/thinking deltas of one block through the assembler and the window together, forwarded as
        their own bytes when the window released them as they came; any other event through the
        general path, in order."""
        out: list[bytes] = []
        i, n = 0, len(frames)
        while i < n and not self.done:
            hit = text_delta(frames[i]) if not self.terminal else None
            if hit is None:
                events = self.decoder.events_of(frames[i] + b"\n\n")
                out.append(self._relay(filt, self._parse(events)))
                i += 1
                continue
            index, kind, text = hit
            run_frames, texts = [frames[i]], [text]
            i += 1
            while i < n and (nxt := text_delta(frames[i])) is not None and nxt[0] == index and nxt[1] is kind:
                run_frames.append(frames[i])
                texts.append(nxt[2])
                i += 1
            out.append(self._release(filt, index, kind, run_frames, texts))
            if filt.refusal is not None:
                break
        return b"".join(out)

    def _release(self, filt: MessagesOutputFilter, index: int, kind: DeltaKind, frames: list[bytes],
                 texts: list[str]) -> bytes:
        self.assembler.add_texts(index, texts)
        push = filt.text_push(index, kind)
        if push is not None:
            released = push(texts)
        else:  # a stage that can refuse: one delta at a time, stopping at a refusal
            released = []
            for text in texts:
                released.append(filt.release_text(index, kind, text))
                if filt.refusal is not None:
                    break
        out: list[bytes] = []
        for frame, text, rel in zip(frames, texts, released, strict=False):
            if rel == text:
                out += (frame, b"\n\n")
            elif rel:
                out.append(encode_text_delta(index, kind, rel))
        if out:
            filt.output_released = True
        return b"".join(out)

    def _relay(self, filt: MessagesOutputFilter, events: list[MessagesEvent]) -> bytes:
        """The events of one upstream read -> the client's bytes, up to the answer's end (kept) or a
        failure (kept; nothing after it is read)."""
        out: list[bytes] = []
        apply = filt.apply
        for ev in events:
            if self.done:
                break
            if ev.obj is None:  # unreadable after the first token: skipped, one broken line must not cut
                self.skipped_malformed += 1  # a long answer off (an event over the size limit still fails)
                continue
            if ev.events and ev.failure is not None:
                self.failed, self.done = ev, True
                break
            held = len(self.terminal)
            pending: list[MessagesEvent] = []
            self._take(ev, pending)
            if pending and len(self.terminal) == held:
                out.append(apply(pending[0]))
        return b"".join(out)
