"""The demo provider's answer: a `MockScript` played with its pacing, with the surface of an HTTP response
(no I/O: the embedded default of `gateway serve` needs no network)."""

from __future__ import annotations

import asyncio
import time

from gateway.providers.base import MAX_BODY_BYTES
from gateway.providers.demo import MockScript


class MockResponse:
    """Plays a `MockScript` with its pacing; same surface as an HTTP response."""

    __slots__ = ("_parts", "_pos", "headers", "read_at", "sent_at", "status")

    def __init__(self, script: MockScript):
        self.status = script.status
        self.headers = {"content-type": script.content_type}
        self._parts, self._pos = script.parts, 0
        self.sent_at = self.read_at = time.perf_counter()

    @property
    def is_event_stream(self) -> bool:
        return self.headers["content-type"] == "text/event-stream"

    async def next_chunk(self) -> bytes:
        if self._pos >= len(self._parts):
            return b""
        delay, data = self._parts[self._pos]
        self._pos += 1
        if delay > 0:
            await asyncio.sleep(delay)
        self.read_at = time.perf_counter()
        out = [data]
        while self._pos < len(self._parts) and self._parts[self._pos][0] == 0:
            out.append(self._parts[self._pos][1])  # what arrives together is read together
            self._pos += 1
        return b"".join(out)

    async def read_body(self, limit: int = MAX_BODY_BYTES) -> bytes:
        parts = []
        while chunk := await self.next_chunk():
            parts.append(chunk)
        return b"".join(parts)

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        self._pos = len(self._parts)
