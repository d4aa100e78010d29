"""The stream-core interface every client API's core implements (`core.chat.stream.ChatStream`,
`core.responses.stream.ResponsesStream`, `core.messages.stream.MessagesStream`), sans I/O.

One attempt's upstream bytes go in through `feed`; before `commit` they are held (the preamble) until
the stream is `committable` (its first output token, or the end of an empty answer); after it `feed`
returns the client's bytes. At the upstream's end the pipeline asks the core, in this order, for what
its parser still owed (`drain`), what its text windows still hold (`tail`, once the answer is whole),
and its kept end (`finish`: `[DONE]`, the terminal event, `message_delta` + `message_stop`); or, for
one of the gateway's own errors, the API's error event (`fail`). The bytes of every end are the core's:
the pipeline writes them and knows no API.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.core.events import DeltaKind, Failure, StreamEvent, Usage
from gateway.core.scrub import FailedEvent, Scrubber


@dataclass(frozen=True, slots=True)
class ClientError:
    """One of the gateway's own errors, as a stream core writes it into its API's error event."""

    status: int
    message: str
    type: str
    param: str | None = None
    code: str | None = None
    upstream_type: bool = False  # `type` is the upstream's own (a 4xx passed through), not ours


@dataclass(frozen=True, slots=True)
class Ended:
    """How a committed stream's upstream ended when its answer is not whole (`StreamCore.upstream_end`).

    The client gets `forward()` (the upstream's own failure event, scrubbed and re-encoded, for an API
    that passes those on) unless a hold guardrail kept the answer back; otherwise our error, `message`
    (a timeout's when `failure` is one). `reason` is the metric's and the log line's."""

    reason: str
    message: str
    failure: Failure | None = None
    forward: Callable[[], bytes] | None = None


class Answer(Protocol):
    """What guardrails and accounting read of the answer so far."""

    @property
    def first_token(self) -> bool: ...

    @property
    def usage(self) -> Usage | None: ...

    @property
    def finished(self) -> bool:
        """The answer ended by its protocol's terminal signal (which carries its final usage)."""

    def output_bytes(self) -> int: ...

    def text(self, kind: DeltaKind = DeltaKind.CONTENT) -> str:
        """The answer's text of one kind, as the whole-answer guardrails judge it."""


class StreamCore(Protocol):
    done: bool  # nothing more to read: the protocol's end, the upstream's end, or a failure
    skipped_malformed: int  # unreadable events after the first token, skipped (the pipeline counts them)

    @property
    def preamble(self) -> Sized:
        """The events held until the commit."""

    @property
    def committable(self) -> bool: ...

    @property
    def empty_answer(self) -> bool:
        """The upstream ended cleanly without any output: another deployment may have an answer."""

    @property
    def assembler(self) -> Answer: ...

    def hold_answer(self, obj: dict[str, Any], events: list[StreamEvent]) -> None:
        """A whole answer (a non-stream body in the API's shape, and its events) as the held stream it
        would have been. Raises `StreamFailed` when it holds no answer."""

    def feed(self, data: bytes) -> bytes:
        """Upstream bytes -> client bytes (b"" before the commit: they are held)."""

    def end_of_input(self) -> None:
        """The upstream's bytes have ended."""

    def commit(self, filt: Any) -> bytes:
        """The held preamble and the first token through the API's output filter, for the client."""

    def drain(self) -> bytes:
        """After the input's end: the client bytes of events the parser still owed."""

    def upstream_end(self, scrubber: Scrubber) -> Ended | None:
        """After the input's end and `drain`: None when the answer is whole, else how it ended (an
        upstream failure event is scrubbed of our credentials, and of what the model's redaction profile masks
        (`scrubber`: the request's model's), before any field of it is read, docs/extensions.md,
        "Costs a client or an upstream can impose")."""

    def tail(self) -> bytes:
        """The answer is whole: what the text windows still hold, released."""

    def finish(self) -> bytes:
        """The kept end of a whole answer, for the client (after `tail`)."""

    def fail(self, error: ClientError, *, held: bool, refused: bool) -> bytes:
        """The API's closing error event for one of our errors, after what may still be released:
        nothing when `refused` (a guardrail stopped the text) or `held` (a hold guardrail kept it all
        back: the client has seen nothing of this answer)."""

    # -- continuation (docs/continuation.md): only after the upstream failed; never on the hot path ------------

    def resume_point(self) -> str | None:
        """The answer's text so far (the upstream's, before any masking) when the failure came while the
        answer was in text: one answer, no tool call begun, not inside reasoning. None: it cannot be
        continued (the stream ends with one error event, as without continuation)."""

    def reported_model(self) -> object:
        """Before the commit: the model the held answer says it came from (its first event's `model`),
        as the upstream wrote it (any JSON value; the caller checks it)."""

    def end_reason(self) -> str | None:
        """How a whole answer ended, in the API's words (chat's `finish_reason`, Messages' `stop_reason`,
        Responses' status): a continuing attempt's, for the stream it continued."""

    def continue_with(self, events: list[StreamEvent]) -> bytes:
        """Another attempt's events (its output deltas, tool calls, finish; the summed usage) as this
        stream's own: the same id, lifecycle and indexes, through the same output filter, for the client.
        Raises `StreamFailed` for an event this API's stream cannot carry across the seam."""


def held_end(label: str, what: str, scrubber: Scrubber, failed: FailedEvent | None, whole: bool,
             forward: Callable[[Any], bytes]) -> Ended | None:
    """`upstream_end` of a core that keeps its end unsent (Responses, Messages): the upstream's failure
    event it kept (forwarded by `forward`, re-encoded from its scrubbed object; an unreadable one is
    our error), or an end without the API's terminal event."""
    if failed is not None:
        ev = scrubber.event(failed)
        if ev.obj is None:
            return Ended("malformed", f"{label}: malformed event after the first token")
        f = ev.failure
        cause = (f.code or f.kind.value) if f is not None else "error"
        return Ended("inband_error", f"{label}: upstream failed after the first token ({cause})", f,
                     functools.partial(forward, ev))
    if not whole:
        return Ended("early_eof", f"{label}: upstream ended the stream before the {what} was complete")
    return None
