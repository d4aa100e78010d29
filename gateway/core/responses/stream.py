"""One attempt's Responses stream, sans I/O: upstream bytes in, client bytes out.

`ResponsesStream` owns the SSE decoder, the provider's parser, the assembler and, once committed, the
output filter (`core.responses.filter`: text windows, renumbering). Before the commit `feed` holds what
it parses — the preamble: `response.created`, `response.in_progress`, items and parts without text,
unknown events — and stops at the event that makes the stream `committable` (its first output token, or
a terminal event of an empty answer); the rest of that read waits in `unread`. `commit` passes the held
events through the filter, and from then on `feed(bytes)` returns the bytes for the client.

The stream stops reading at the protocol's own end: a terminal event (`response.completed` /
`response.incomplete`) is kept unsent in `terminal`, for the whole-answer guardrails to judge before it
goes out; an upstream failure (`error`, `response.failed`, an unparseable event) before the first token
raises `StreamFailed`, after it is kept in `failed` and ends the stream (the text before it stands) —
except an event the parser cannot read (unparseable JSON, not an object), which after the first token
is skipped and counted in `skipped_malformed` (the relay reports it): one broken line must not cut a
long answer off. An event over the size limit always fails.
The order of the events decides, never how the bytes happened to be split into reads.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.core.events import Failure, FailureKind, InbandError, StreamEvent, StreamFailed
from gateway.core.responses.assemble import ResponsesAssembler
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.replay import replay_events
from gateway.core.responses.seam import ContinuedText
from gateway.core.responses.wire import ERROR_TYPES, TERMINAL_OK, ResponsesEvent, ResponsesParser
from gateway.core.scrub import Scrubber
from gateway.core.sse import SSEDecoder, SSEError, SSEEvent
from gateway.core.stream import ClientError, Ended, held_end


class ResponsesStreamParser(Protocol):
    """A provider's reader of Responses stream events (`[DONE]` included, as an event with `done`)."""

    def parse(self, event: SSEEvent) -> list[ResponsesEvent]: ...

    def finish(self) -> list[ResponsesEvent]:
        """The end of the bytes: events still owed (a translated stream's terminal event, when its
        upstream ends without a protocol end of its own)."""


class ResponsesStream:
    __slots__ = ("assembler", "decoder", "done", "failed", "filt", "flushed", "label", "parser", "preamble", "seam",
                 "skipped_malformed", "terminal", "unread")

    def __init__(self, parser: ResponsesStreamParser, label: str) -> None:
        self.decoder = SSEDecoder()
        self.parser = parser
        self.label = label  # the deployment, for failure messages
        self.assembler = ResponsesAssembler()
        self.preamble: list[ResponsesEvent] = []  # held until the commit, the first token last
        self.unread: list[SSEEvent] = []  # the committing read's events after the first token
        self.done = False  # nothing more to read: the upstream's end, `[DONE]`, a terminal event, a failure
        self.terminal: ResponsesEvent | None = None  # the answer's end, not sent yet
        self.failed: ResponsesEvent | None = None  # an upstream failure after the first token, not sent yet
        self.filt: ResponsesOutputFilter | None = None  # set by `commit`
        self.skipped_malformed = 0  # unreadable events after the first token, skipped
        self.flushed = b""  # client bytes of events the parser still owed at the end of the bytes
        self.seam: ContinuedText | None = None  # where a continuation writes (docs/continuation.md)

    @property
    def committable(self) -> bool:
        """An output token has come, or the answer ended without one (an empty answer is an answer)."""
        return self.assembler.first_token or self.assembler.finished

    @property
    def empty_answer(self) -> bool:
        return self.assembler.finished and not self.assembler.first_token

    @property
    def ended_early(self) -> bool:
        """The upstream stopped (its bytes or `[DONE]`) without a terminal event or a failure."""
        return self.terminal is None and self.failed is None

    # -- before the commit -------------------------------------------------------------------------

    def hold_answer(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        self.hold_response(obj)

    def hold_response(self, resp: dict[str, Any]) -> None:
        """A whole answer (a non-stream `response` object) as the held stream it would have been."""
        parser = ResponsesParser()
        for obj in replay_events(resp):
            ev = parser.parse(obj, None)
            self.assembler.feed(ev)
            self.preamble.append(ev)
        self.done = True

    def feed(self, data: bytes) -> bytes:
        """Upstream bytes -> client bytes; before the commit they are held, and b"" is returned."""
        if self.filt is None:
            self._hold(self._decode(data))
            return b""
        return self._relay(self.filt, self._decode(data))

    def end_of_input(self) -> None:
        """The upstream's bytes have ended: what the parser still owed is read, and reading is over."""
        self.decoder.finish()
        owed = [ev for ev in self.parser.finish() if not ev.done]
        if owed and self.filt is None:
            self._hold_parsed(owed)
        elif owed and self.filt is not None and not (self.terminal or self.failed):
            self.flushed = self._relay_parsed(self.filt, owed)
        self.done = True

    def _decode(self, data: bytes) -> list[SSEEvent]:
        try:
            return self.decoder.feed(data)
        except SSEError:
            raise StreamFailed(Failure(FailureKind.MALFORMED, f"{self.label}: event too large")) from None

    def _hold(self, events: list[SSEEvent]) -> None:
        """Parse and hold up to the committing event; a failure before it fails the attempt."""
        for i, sse in enumerate(events):
            self._hold_parsed(self.parser.parse(sse))
            if self.committable or self.done:
                self.unread = events[i + 1:]
                return

    def _hold_parsed(self, parsed: list[ResponsesEvent]) -> None:
        for ev in parsed:
            if ev.done:
                self.done = True
                continue
            self.assembler.feed(ev)
            for e in ev.events:
                if type(e) is InbandError:
                    raise StreamFailed(e.failure)  # invisible: retried or passed on
            self.preamble.append(ev)

    # -- the commit and after ----------------------------------------------------------------------

    def commit(self, filt: ResponsesOutputFilter) -> bytes:
        """The held preamble, the first token and the rest of the committing read, for the client."""
        self.filt = filt
        out: list[bytes] = []
        for ev in self.preamble:
            if self._ends(ev):
                break
            out.append(filt.apply(ev))
        unread, self.preamble, self.unread = self.unread, [], []
        if unread and not (self.terminal or self.failed):
            out.append(self._relay(filt, unread))
        return b"".join(out)

    def end_bytes(self, filt: ResponsesOutputFilter) -> bytes:
        """The kept terminal event of a whole answer, through the filter, for the client."""
        assert self.terminal is not None
        return filt.apply(self.terminal)

    # -- the end (`core.stream.StreamCore`) -------------------------------------------------------

    def drain(self) -> bytes:
        flushed, self.flushed = self.flushed, b""
        return flushed

    def upstream_end(self, scrubber: Scrubber) -> Ended | None:
        return held_end(self.label, "response", scrubber, self.failed, self.terminal is not None,
                        self.forward_failure)

    def tail(self) -> bytes:
        return self.filt.flush_open() if self.filt is not None else b""

    def finish(self) -> bytes:
        assert self.filt is not None
        return self.end_bytes(self.filt)

    def fail(self, error: ClientError, *, held: bool, refused: bool) -> bytes:
        """Our closing `error` event, numbered after what was sent (from 0 when the client has seen
        nothing of this lifecycle)."""
        body = {"message": error.message, "type": error.type, "param": error.param, "code": error.code}
        if held or self.filt is None:
            return ResponsesOutputFilter(None).error_event(body)
        tail = b"" if refused else self.filt.flush_open()
        return tail + self.filt.error_event(body)

    # -- continuation (docs/continuation.md) --------------------------------------------------------------

    def resume_point(self) -> str | None:
        if self.filt is None or self.filt.refusal is not None:
            return None
        key = self.assembler.resume_key()
        return self.assembler.texts()[key] if key is not None else None

    def reported_model(self) -> object:
        for ev in self.preamble:  # `response.created` leads, its `response` names the model
            if ev.obj is not None and isinstance(resp := ev.obj.get("response"), dict):
                return resp.get("model")
        return None

    def end_reason(self) -> str | None:
        return self.assembler.status

    def continue_with(self, events: list[StreamEvent]) -> bytes:
        """The events as this response's own (`core.responses.seam`), through its filter; its terminal
        event kept in `terminal` like the upstream's own."""
        filt = self.filt
        assert filt is not None, "only a committed stream is continued"
        self.failed = None  # the failure is behind the seam now
        out: list[bytes] = []

        def take(ev: ResponsesEvent) -> None:
            self.assembler.feed(ev)
            if ev.type in TERMINAL_OK:
                self.terminal, self.done = ev, True
            else:
                out.append(filt.apply(ev))

        if self.seam is None:
            self.seam = ContinuedText(self.assembler, take)
        self.seam.take = take
        self.seam.feed(events, self.label)
        return b"".join(out)

    def forward_failure(self, ev: ResponsesEvent) -> bytes:
        """An upstream failure after the first token (a readable one, scrubbed by the caller), forwarded
        renumbered after what the windows still hold; a `response.failed` is followed by our error event
        (the SDKs raise on it)."""
        assert self.filt is not None and ev.failure is not None
        filt, f = self.filt, ev.failure
        payload = filt.flush_open() + filt.apply(ev)
        if ev.type not in ERROR_TYPES:
            payload += filt.error_event({"message": f.message, "type": f.type or "api_error", "param": f.param,
                                         "code": f.code})
        return payload

    def _relay(self, filt: ResponsesOutputFilter, events: list[SSEEvent]) -> bytes:
        """The events of one upstream read -> the client's bytes, up to the terminal event or a failure
        (both kept unsent; nothing after them is read)."""
        out: list[bytes] = []
        parse = self.parser.parse
        for sse in events:
            if not self._relay_into(filt, parse(sse), out):
                break
        return b"".join(out)

    def _relay_parsed(self, filt: ResponsesOutputFilter, parsed: list[ResponsesEvent]) -> bytes:
        out: list[bytes] = []
        self._relay_into(filt, parsed, out)
        return b"".join(out)

    def _relay_into(self, filt: ResponsesOutputFilter, parsed: list[ResponsesEvent], out: list[bytes]) -> bool:
        """False once the terminal event or a failure came (kept unsent)."""
        assemble, apply = self.assembler.feed, filt.apply
        for ev in parsed:
            if ev.done:
                self.done = True
                continue
            if ev.obj is None and _unreadable(ev):
                self.skipped_malformed += 1
                continue
            assemble(ev)
            if ev.type in TERMINAL_OK:
                self.terminal, self.done = ev, True
                return False
            if ev.events and ev.failure is not None:
                self.failed, self.done = ev, True
                return False
            out.append(apply(ev))
        return True

    def _ends(self, ev: ResponsesEvent) -> bool:
        """Keep a terminal event or a failure, unsent, and stop; any other event goes on."""
        if ev.type in TERMINAL_OK:
            self.terminal, self.done = ev, True
            return True
        if ev.failure is not None:
            self.failed, self.done = ev, True
            return True
        return False


def _unreadable(ev: ResponsesEvent) -> bool:
    """An event the parser could not read (`ResponsesParser.parse` of a non-object), not an error event."""
    f = ev.failure
    return f is not None and f.kind is FailureKind.MALFORMED
