"""How the stream-core tests cut an upstream body into reads: in two at every byte index, and in
random reads of the sizes real sockets deliver (one byte to a kilobyte)."""

from __future__ import annotations

import random


def splits(body: bytes) -> list[list[bytes]]:
    return [[body[:i], body[i:]] for i in range(1, len(body))]


def random_reads(body: bytes, rng: random.Random) -> list[bytes]:
    reads, i = [], 0
    while i < len(body):
        n = rng.choice((1, 2, 3, 7, 16, 64, 200, 1000))
        reads.append(body[i:i + n])
        i += n
    return reads
