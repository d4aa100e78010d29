"""Verdicts of `terms` and `regex` guardrails (docs/reference.md, "`guardrails`"), one-shot or streamed.

``TextGuard.check`` serves the input stage and the hold and audit modes; ``TextGuard.window()``
serves stream mode. Both run the segment machine of `core.redact.engine`, so a stream blocks exactly
where a one-shot check of the same text does, and releases only the text before the violating
match: a stream-mode window holds back the words that could still become part of a violation
(a multi-word term such as "project nightingale" holds "project" until the next word arrives).

Mask markers: guardrails run after redaction, so their input contains ``[REDACTED:<rule>]``. A
match that overlaps a marker is ignored: a term "email" or "redacted" must not fire on the
gateway's own marker, and the masked secret is not the guardrail's to see. Terms still match
around a marker ("leak [REDACTED:email] now" matches "leak").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.core.redact.engine import ScanSpec, SegmentWindow
from gateway.core.redact.regex import caseless

_MARKER = re.compile(r"\[REDACTED:[^\]\s]{1,64}\]")


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    guardrail: str
    reason: str  # safe to show a client: never the matched text


def _term_pattern(term: str) -> tuple[re.Pattern[str], str]:
    """Case-insensitive, whole words, any whitespace between the words of the term."""
    words = term.split()
    if not words:
        raise ValueError("a blocked term must not be empty")
    body = r"\s+".join(re.escape(w) for w in words)
    pattern = re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)
    # Hint: the first word, whatever its case (see `caseless`).
    return pattern, caseless(words[0])


@dataclass(frozen=True, slots=True)
class TextGuard:
    """A compiled `terms` or `regex` guardrail. Immutable and safe to share across requests."""

    name: str
    kind: Literal["terms", "regex"]
    patterns: tuple[re.Pattern[str], ...]
    spec: ScanSpec

    @classmethod
    def compile(
        cls, name: str, kind: Literal["terms", "regex"], terms: Sequence[str], patterns: Sequence[str]
    ) -> TextGuard:
        rules: list[tuple[re.Pattern[str], str | None]]
        if kind == "terms":
            rules = [_term_pattern(t) for t in terms]
        elif kind == "regex":
            try:
                rules = [(re.compile(p), None) for p in patterns]
            except re.error as exc:
                raise ValueError(f'guardrail "{name}": invalid regular expression: {exc.msg}') from None
        else:
            raise ValueError(f'guardrail "{name}": type {kind!r} is not checked in-process')
        if not rules:
            raise ValueError(f'guardrail "{name}": nothing to check')
        return cls(name, kind, tuple(p for p, _h in rules), ScanSpec.build(rules))

    def check(self, text: str) -> Verdict:
        """One-shot verdict (input stage, hold and audit modes)."""
        window = self.window()
        _released, verdict = window.push(text)
        if verdict is None:
            _released, verdict = window.flush()
        return verdict if verdict is not None else self.passed()

    def window(self) -> GuardWindow:
        return GuardWindow(self)

    def steps(self, text: str, slice_chars: int) -> GuardSteps:
        """`check(text)` cut into steps of `slice_chars` characters (the loop's scheduler runs them)."""
        return GuardSteps(self, text, slice_chars)

    def passed(self) -> Verdict:
        return Verdict(True, self.name, "")

    def blocked(self) -> Verdict:
        what = "a blocked term" if self.kind == "terms" else "a blocked pattern"
        return Verdict(False, self.name, f'the text contains {what} (guardrail "{self.name}")')

    def violation(self, segment: str) -> int:
        """Start of the first match in a closed segment that does not touch a mask marker, or -1."""
        markers = [m.span() for m in _MARKER.finditer(segment)] if "[REDACTED:" in segment else []
        first = -1
        for pattern in self.patterns:
            pos = 0
            while (
                pos <= len(segment)
                and (m := pattern.search(segment, pos)) is not None
                and (first < 0 or m.start() < first)
            ):
                if m.end() > m.start() and not any(a < m.end() and m.start() < b for a, b in markers):
                    first = m.start()
                    break
                pos = m.start() + 1  # an empty or marker match: look again one further on
        return first


class GuardSteps:
    """`TextGuard.check` a slice per `step()`: the window decides on the text alone, never on how it
    was split, so `verdict`, once `step()` has returned True, is exactly the one-shot verdict. It stops
    at the first violation, as `check` does."""

    __slots__ = ("_guard", "_pos", "_slice", "_text", "_window", "verdict")

    def __init__(self, guard: TextGuard, text: str, slice_chars: int) -> None:
        if slice_chars < 1:
            raise ValueError("slice_chars must be positive")
        self._guard, self._text, self._slice = guard, text, slice_chars
        self._pos = 0
        self._window = guard.window()
        self.verdict: Verdict | None = None  # set once the work is over

    def step(self) -> bool:
        if self.verdict is not None:
            return True
        end = min(self._pos + self._slice, len(self._text))
        verdict: Verdict | None = None
        if end > self._pos:
            _released, verdict = self._window.push(self._text[self._pos:end])
        self._pos = end
        if verdict is None and end == len(self._text):
            _released, verdict = self._window.flush()
            verdict = verdict or self._guard.passed()
        self.verdict = verdict
        return verdict is not None


class GuardWindow(SegmentWindow):
    """Stream mode: releases only text no rule can still match; stops at a violation."""

    __slots__ = ("_guard", "_verdict")

    def __init__(self, guard: TextGuard) -> None:
        super().__init__(guard.spec)
        self._guard = guard
        self._verdict: Verdict | None = None

    def push(self, text: str) -> tuple[str, Verdict | None]:
        """Feed a delta: (text safe to release, the violation or None).

        After a violation nothing of the violating match is ever released: the text before it
        comes with the verdict, and every later call returns ("", the same verdict).
        """
        return self._feed(text, False), self._verdict

    def flush(self) -> tuple[str, Verdict | None]:
        return self._feed("", True), self._verdict

    def _close(self, segment: str, out: list[str]) -> bool:
        start = self._guard.violation(segment)
        if start < 0:
            out.append(segment)
            return True
        out.append(segment[:start])
        self._verdict = self._guard.blocked()
        return False
