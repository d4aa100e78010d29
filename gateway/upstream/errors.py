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

    async def next_chunk(self) -> bytes: ...  # b"" at end of stream

    async def read_body(self, limit: int = MAX_BODY_BYTES) -> bytes: ...

    def finish(self) -> None: ...

    def close(self) -> None: ...
