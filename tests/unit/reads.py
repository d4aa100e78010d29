"""How the stream-core tests cut an upstream body into reads: in two at every byte index, and in
random reads of the sizes real sockets deliver (one byte to a kilobyte)."""

from __future__ import annotations

import functools
import random
from typing import Any, Protocol

from gateway.core.scrub import Scrubber
from gateway.core.stream import ClientError


def splits(body: bytes) -> list[list[bytes]]:
    return [[body[:i], body[i:]] for i in range(1, len(body))]


def random_reads(body: bytes, rng: random.Random) -> list[bytes]:
    reads, i = [], 0
    while i < len(body):
        n = rng.choice((1, 2, 3, 7, 16, 64, 200, 1000))
        reads.append(body[i:i + n])
        i += n
    return reads


class _Filter(Protocol):
    refusal: Any


class _Core(Protocol):
    done: bool
    filt: Any

    @property
    def committable(self) -> bool: ...

    def feed(self, data: bytes) -> bytes: ...

    def commit(self, filt: Any) -> bytes: ...

    def end_of_input(self) -> None: ...


def pump_reads(stream: _Core, filt: _Filter, reads: list[bytes], *, must_commit: bool = False) -> list[bytes]:
    """What the pipeline does with a stream core, minus the sockets: hold until committable, commit,
    feed each read, stop at the core's end or a refusal; an input that ends before the commit is
    committed as it stands (`must_commit`: and it must be committable then)."""
    out: list[bytes] = []
    for data in reads:
        if stream.done or filt.refusal is not None:
            break
        out.append(stream.feed(data))
        if stream.filt is None and stream.committable:
            out.append(stream.commit(filt))
    if stream.filt is None:
        stream.end_of_input()
        if must_commit:
            assert stream.committable
        out.append(stream.commit(filt))
    return out


# the errors the pipeline hands a core's `fail` (`errors.GuardrailBlocked`, `UpstreamFailed`), as values
REFUSED = ClientError(400, "output refused by guardrail", "invalid_request_error", code="guardrail_blocked")
EARLY_END = ClientError(502, "upstream ended the stream early", "upstream_error", code="upstream_error")


@functools.cache
def _scrubber() -> Scrubber:
    return Scrubber.compile([])


def the_end(stream: Any, filt: _Filter) -> bytes:
    """The bytes the gateway writes at a stream's end when no whole-answer guardrail is waited for
    (`pipeline.relay.Relay`), from the core's own methods, in the relay's order: what its parser still
    owed; how an unfinished stream ended (`upstream_end`: an upstream failure event forwarded, or the
    core's error event); a refusal, the core's error event; else the windows' tail and the kept end."""
    out = stream.drain()
    if filt.refusal is not None:
        return out + stream.fail(REFUSED, held=False, refused=True)
    ended = stream.upstream_end(_scrubber())
    if ended is not None:
        if ended.forward is not None:
            return out + ended.forward()
        return out + stream.fail(EARLY_END, held=False, refused=False)
    tail = stream.tail()
    if filt.refusal is not None:
        return out + stream.fail(REFUSED, held=False, refused=True)
    return out + tail + stream.finish()
