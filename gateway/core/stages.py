"""The text stages every API's output filter pushes its texts through (a redaction window, stream
guardrails: `core.redact`, `pipeline.safety`), as the filters see them: text in, released text and maybe
a refusal out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gateway.core.events import DeltaKind


class Refusal(Protocol):
    """A stream-ending verdict (a guardrail's); rendered by the caller."""

    @property
    def guardrail(self) -> str: ...

    @property
    def reason(self) -> str: ...


def refused(refusal: Refusal | None) -> bool:
    """Whether a filter's stage has refused, asked at the top of its `apply`: through a call, not as
    `self.refusal is not None` there, because mypy then keeps the attribute narrowed to None past the
    calls that can set it, and the compiled build (mypyc) checks that type at run time
    (docs/compiled.md)."""
    return refusal is not None


class TextStage(Protocol):
    def push(self, text: str) -> tuple[str, Refusal | None]: ...

    def flush(self) -> tuple[str, Refusal | None]: ...

    @property
    def push_together(self) -> Callable[[list[str]], list[str]] | None:
        """For a stage that can never refuse (a redaction window alone): deltas that arrived together
        -> each one's release (`SegmentWindow.push_together`); else None."""

    @property
    def held_chars(self) -> int:
        """Characters pushed and not released yet (0: every text pushed so far is out)."""


StageFactory = Callable[[DeltaKind], TextStage | None]
