"""Hypothesis settings for the protocol-fidelity property tests: bounded and seeded in `make test`
(derandomized: the same examples every run), larger with HYPOTHESIS_PROFILE=nightly (random seeds, ten
times the examples). See tests/README.md."""

from __future__ import annotations

import os
from typing import Any, Protocol

from hypothesis import HealthCheck, settings

NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly"


def fidelity(examples: int) -> settings:
    """`examples` in `make test`; ten times as many, unseeded, in the nightly run."""
    return settings(max_examples=examples * 10 if NIGHTLY else examples, derandomize=not NIGHTLY, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], database=None)


class _Core(Protocol):
    done: bool

    @property
    def committable(self) -> bool: ...

    def feed(self, data: bytes) -> bytes: ...

    def commit(self, filt: Any) -> bytes: ...

    def end_of_input(self) -> None: ...


def drive(stream: _Core, filt: Any, reads: list[bytes]) -> list[bytes]:
    """What the pipeline does with a stream core (`first_token.until_first_token`, then `relay.pump`),
    minus the sockets: feed reads until it is committable or done (the input's end is `end_of_input`),
    commit, then feed each read until it is done or the input ends; the client's bytes, write by write."""
    it = iter([r for r in reads if r])  # a socket read is never empty but at the end
    while not stream.committable and not stream.done:
        data = next(it, b"")
        if not data:
            stream.end_of_input()
            break
        stream.feed(data)
    assert stream.committable, "the answer has a first token, or is an empty answer"
    out = [stream.commit(filt)]
    while not stream.done:
        data = next(it, b"")
        if not data:
            stream.end_of_input()
            break
        out.append(stream.feed(data))
    return out
