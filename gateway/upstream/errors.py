"""What the upstream layer hands inward: one error type carrying a classified Failure, and the response
surface every attempt reads (an HTTP response or the demo provider's scripted one)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gateway.core.events import Failure
from gateway.providers.base import MAX_BODY_BYTES


class UpstreamError(Exception):
    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


class UpstreamResponse(Protocol):
    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...  # lower-case keys

    @property
    def is_event_stream(self) -> bool: ...

    # the upstream's time, told apart from the gateway's own (perf_counter; docs/overhead.md): when the
    # request was written, its connection's set-up taken out (a pooled connection would have had none);
    # when the read that brought what `next_chunk` last returned came, before any of it was parsed
    @property
    def sent_at(self) -> float: ...

    @property
    def read_at(self) -> float: ...

    async def next_chunk(self) -> bytes: ...  # b"" at end of stream

    async def read_body(self, limit: int = MAX_BODY_BYTES) -> bytes: ...

    def finish(self) -> None: ...

    def close(self) -> None: ...
