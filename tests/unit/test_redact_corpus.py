"""The redaction corpus: every positive masked exactly, with its rule; no false positive on ordinary
technical text (tests/fixtures/redaction)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gateway.core.redact.rules import builtin_rule_names
from gateway.core.redact.window import Redactor
from tests.unit.redaction_corpus import Case, negatives, positives

REDACTOR = Redactor.compile(["secrets", "pii"], [])
CASES = positives()


def _streamed(text: str, seed: int) -> str:
    rnd = random.Random(seed)
    window = REDACTOR.window()
    out, i = [], 0
    while i < len(text):
        size = rnd.randint(1, 6)
        out.append(window.push(text[i : i + size]))
        i += size
    return "".join(out) + window.flush()


def test_corpus_size_and_coverage(capsys: pytest.CaptureFixture[str]) -> None:
    per_rule = Counter(rule for case in CASES for rule, _value in case.secrets)
    negative_bytes = sum(len(t.encode()) for t in negatives().values())
    with capsys.disabled():
        print(f"\nredaction corpus: {sum(per_rule.values())} positives in {len(CASES)} cases, "
              f"{negative_bytes} bytes of negatives; per rule: {dict(sorted(per_rule.items()))}")
    assert sum(per_rule.values()) >= 60
    assert negative_bytes >= 20 * 1024
    assert set(per_rule) == set(builtin_rule_names())  # every built-in rule has positives


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.title)
def test_positive_is_masked_with_its_rule(case: Case) -> None:
    result = REDACTOR.redact(case.text)
    assert result.text == case.expected
    assert dict(result.counts) == dict(Counter(rule for rule, _value in case.secrets))
    assert _streamed(case.text, seed=len(case.text)) == case.expected


def test_each_rule_alone_masks_its_positives() -> None:
    """A profile with one rule masks that rule's values (rule names are selectable one by one)."""
    for name in builtin_rule_names():
        single = Redactor.compile([name], [])
        for case in CASES:
            for rule, value in case.secrets:
                if rule == name:
                    assert value not in single.redact(case.text).text, (name, case.title)


@pytest.mark.parametrize("name", sorted(negatives()))
def test_no_false_positive_on_ordinary_text(name: str) -> None:
    text = negatives()[name]
    result = REDACTOR.redact(text)
    assert dict(result.counts) == {}
    assert result.text == text
    assert _streamed(text, seed=7) == text


def test_false_positive_count_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    texts = negatives()
    false_positives = sum(sum(REDACTOR.redact(t).counts.values()) for t in texts.values())
    masked = sum(1 for c in CASES for rule, _v in c.secrets if f"[REDACTED:{rule}]" in
                 REDACTOR.redact(c.text).text)
    with capsys.disabled():
        print(f"\nredaction corpus: {masked} of {sum(len(c.secrets) for c in CASES)} positives masked, "
              f"{false_positives} false positives in {len(texts)} negative files")
    assert false_positives == 0
