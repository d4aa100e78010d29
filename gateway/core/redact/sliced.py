"""One-shot redaction cut into steps of a bounded size, sans I/O (docs/extensions.md,
"Costs a client or an upstream can impose": no stall of the loop).

`MaskSteps` masks a list of texts `slice_chars` characters per `step()`, each text through its own
redaction window. The window gives exactly the one-shot result however its input is split
(`core.redact.window`), so once `step()` has returned True, `texts` and `counts` are what
`Redactor.redact` gives for each text (counts summed over the texts). The I/O shell decides when to
call `step()` (`pipeline.slicer`); a guardrail's check has the same shape (`core.policy.guard.GuardSteps`).
"""

from __future__ import annotations

from typing import Protocol

from gateway.core.redact.window import RedactionWindow, Redactor


class Steps(Protocol):
    """Work done in bounded steps: `step()` does one and answers whether the work is over."""

    def step(self) -> bool: ...


class MaskSteps:
    """Mask `texts` in place, a slice per step; `counts` are the masks per rule so far."""

    __slots__ = ("_out", "_pos", "_slice", "_text", "_window", "counts", "redactor", "texts")

    def __init__(self, redactor: Redactor, texts: list[str], slice_chars: int) -> None:
        if slice_chars < 1:
            raise ValueError("slice_chars must be positive")
        self.redactor, self.texts, self._slice = redactor, texts, slice_chars
        self.counts: dict[str, int] = {}
        self._text, self._pos = 0, 0
        self._window: RedactionWindow = redactor.window()
        self._out: list[str] = []

    @property
    def done(self) -> bool:
        return self._text >= len(self.texts)

    def step(self) -> bool:
        """Mask the next slice; True once every text is masked (written back into `texts`)."""
        if self.done:
            return True
        text = self.texts[self._text]
        end = min(self._pos + self._slice, len(text))
        if end > self._pos:
            self._out.append(self._window.push(text[self._pos:end]))
        self._pos = end
        if end < len(text):
            return False
        self._out.append(self._window.flush())
        counts = self._window.take_counts()
        if counts:  # every mask is counted: a text with none is its own, not a copy joined from its slices
            self.texts[self._text] = "".join(self._out)  # (that join was ~20 ms for 10 MiB of non-ASCII text)
        for rule, n in counts.items():
            self.counts[rule] = self.counts.get(rule, 0) + n
        self._text, self._pos, self._out, self._window = self._text + 1, 0, [], self.redactor.window()
        return self.done
