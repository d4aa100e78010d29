"""How the stream-core tests cut an upstream body into reads: in two at every byte index, and in
random reads of the sizes real sockets deliver (one byte to a kilobyte)."""

from __future__ import annotations

import random
from typing import Any, Protocol


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
