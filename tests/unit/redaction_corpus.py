"""Loads the redaction corpus in tests/fixtures/redaction (shared by the tests and the bench)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "redaction"
_MARK = re.compile(r"⟦([a-z_]+)\|(.*?)⟧", re.DOTALL)


@dataclass(frozen=True)
class Case:
    title: str
    text: str  # what the model wrote
    expected: str  # the same text with every secret replaced by its marker
    secrets: tuple[tuple[str, str], ...]  # (rule, value)


def positives() -> list[Case]:
    raw = (FIXTURES / "positives.txt").read_text(encoding="utf-8")
    cases: list[Case] = []
    for block in raw.split("\n=== ")[1:]:
        title, _, body = block.partition("\n")
        body = body.removesuffix("\n")
        cases.append(Case(
            title=title,
            text=_MARK.sub(lambda m: m.group(2), body),
            expected=_MARK.sub(lambda m: f"[REDACTED:{m.group(1)}]", body),
            secrets=tuple((m.group(1), m.group(2)) for m in _MARK.finditer(body)),
        ))
    return cases


def negatives() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((FIXTURES / "negatives").iterdir())}
