"""How an upstream's stream is cut into events: the translator's choice (issue #29), sans I/O.

Every client API's stream core reads Server-Sent Events (`core.sse`), the framing of OpenAI, Anthropic
and Gemini streams. A provider with another framing (AWS's `application/vnd.amazon.eventstream`)
supplies a `Transcoder` that turns its bytes into the SSE its parser reads, so a new framing touches no
stream core and no attempt opener. SSE itself has none: its bytes go to the core as they came.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.core.sse import looks_like_sse


class Transcoder(Protocol):
    """One stream's upstream bytes -> SSE bytes. Raises `core.events.StreamFailed` (MALFORMED) on bytes
    that break the framing (a bad checksum, a frame over its size cap)."""

    def feed(self, data: bytes) -> bytes: ...

    def end(self) -> bytes:
        """The upstream's bytes have ended: what is still owed; a frame cut in the middle fails."""


@dataclass(frozen=True, slots=True)
class Framing:
    media_type: str  # the Content-Type of a stream in this framing
    transcoder: Callable[[], Transcoder] | None = None  # None: the bytes are SSE already

    def is_stream(self, content_type: str, head: bytes) -> bool:
        """An answer in this framing (not a JSON body): by its Content-Type, or, for SSE, by its first
        bytes (servers that stream SSE under another Content-Type)."""
        if content_type.startswith(self.media_type):
            return True
        return self.transcoder is None and looks_like_sse(head)


SSE = Framing("text/event-stream")
