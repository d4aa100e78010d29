"""A long closed segment is masked rule by rule, each rule tried only where its hint fires and where
its gate lets a match start (`core.redact.gate`): exactly what the full search of every rule masks,
on text without whitespace of every kind (digits, hex, base64, e-mail-like, mixed), however a
stream cuts it. The cuts of long runs search rule by rule too (`core.redact.cuts`). Each case compares
two real paths of the same profile: `by_rule_from=0` takes the rule-by-rule path for every segment;
a huge `by_rule_from` and no `ScanSpec.by_rule` take the full searches everywhere."""

from __future__ import annotations

import dataclasses
import random
import re
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.redact.cuts import keep_start, tail_start
from gateway.core.redact.gate import Gate, search, start_gate
from gateway.core.redact.needs import DIGITS, Hint, has_digit, needs_one_of
from gateway.core.redact.regex import hint_pattern
from gateway.core.redact.rules import BUILTIN
from gateway.core.redact.window import Redactor
from tests.unit.redaction_corpus import positives

PROFILE = Redactor.compile(["secrets", "pii"], [("ticket-id", r"(?<![A-Za-z0-9])ACME-[0-9]{6}(?![0-9])"),
                                                 ("project", r"project\s+x"), ("plain", r"zz[0-9]{3}"),
                                                 ("no-hint", r"[Qq]uux[0-9]{2}")])
BY_RULE = dataclasses.replace(PROFILE, by_rule_from=0)
FULL = dataclasses.replace(PROFILE, by_rule_from=1 << 30, spec=dataclasses.replace(PROFILE.spec, by_rule=()))
KINDS = {
    "digits": string.digits,
    "hex": string.digits + "abcdef",
    "base64": string.ascii_letters + string.digits + "+/=",
    "email-like": "ab.@-_:/",
    "mixed": string.ascii_letters + string.digits + "-_.:/@+()",
}
# Values that mask on their own; `;` around them is a boundary for every rule.
SECRETS = sorted({value for case in positives() for rule, value in case.secrets
                  if rule not in ("bearer_token", "aws_secret_access_key")}
                 | {"ACME-004211", "zz123", "Quux42", "project  x"})
_MARKER = re.compile(r"\[REDACTED:[^\]]+\]")


def glued(rnd: random.Random, alphabet: str, size: int, secrets: list[str]) -> str:
    """`size` characters of `alphabet` with `secrets` put in at random places between `;`."""
    text = "".join(rnd.choices(alphabet, k=size))
    for value in secrets:
        at = rnd.randrange(len(text) + 1)
        text = f"{text[:at]};{value};{text[at:]}"
    return text


@st.composite
def segments(draw: st.DrawFn) -> str:
    alphabet = draw(st.sampled_from(sorted(KINDS.values())))
    secrets = draw(st.lists(st.sampled_from(SECRETS), max_size=3))
    return glued(random.Random(draw(st.integers(0, 1 << 30))), alphabet, draw(st.integers(0, 1200)), secrets)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments())
def test_a_segment_masked_rule_by_rule_equals_the_full_search(segment: str) -> None:
    by_rule: dict[str, int] = {}
    full: dict[str, int] = {}
    assert BY_RULE.mask(segment, by_rule) == FULL.mask(segment, full)
    assert by_rule == full


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_text_without_whitespace_cut_at_every_split_masks_what_the_full_search_masks(kind: str) -> None:
    rnd = random.Random(kind)
    secrets = rnd.sample(SECRETS, 3)
    text = glued(rnd, KINDS[kind], 700, secrets)
    expected = FULL.redact(text).text
    for value in secrets:
        assert value not in _MARKER.sub(" ", expected)  # the reference masks them: no secret gets through
    assert BY_RULE.redact(text).text == expected
    for i in range(len(text) + 1):
        window = BY_RULE.window()
        assert window.push(text[:i]) + window.push(text[i:]) + window.flush() == expected, i


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("seed", range(3))
def test_each_cut_of_a_long_run_is_where_the_full_searches_put_it(kind: str, seed: int) -> None:
    rnd = random.Random(f"{kind}{seed}")
    text = glued(rnd, KINDS[kind], 4096, rnd.sample(SECRETS, 4))
    for end in range(1500, len(text), 97):
        for low in (end - 1024, end - 300, end - 40):
            assert tail_start(BY_RULE.spec, text, low, end) == tail_start(FULL.spec, text, low, end), (end, low)
            q = tail_start(FULL.spec, text, low, end)
            if q >= 0:
                assert (keep_start(BY_RULE.spec, text, 0, q, low, end)
                        == keep_start(FULL.spec, text, 0, q, low, end)), (end, low, q)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_runs_past_the_run_limit_of_each_kind_mask_what_the_full_search_masks(kind: str) -> None:
    rnd = random.Random(kind + "long")
    secrets = rnd.sample(SECRETS, 8)
    text = glued(rnd, KINDS[kind], 12_000, secrets)
    expected = FULL.redact(text).text
    for value in secrets:
        assert value not in _MARKER.sub(" ", expected)
    assert BY_RULE.redact(text).text == expected
    window = PROFILE.window()  # the default threshold, by reads of 8-character deltas as a relay hands them
    deltas = [text[i:i + 8] for i in range(0, len(text), 8)]
    out = [piece for k in range(0, len(deltas), 50) for piece in window.push_together(deltas[k:k + 50])]
    assert "".join(out) + window.flush() == expected


@pytest.mark.parametrize("value", SECRETS)
def test_a_value_alone_is_masked_as_the_full_search_masks_it(value: str) -> None:
    """A segment where no gate stops (a card number's digits alone) leaves each gated rule the start."""
    for segment in (value, value + ";", "x;" + value, value * 2):
        masked = BY_RULE.mask(segment, {})
        assert masked == FULL.mask(segment, {}), segment
    assert value not in BY_RULE.mask(value, {})


def test_the_gate_of_each_builtin_rule_lets_every_match_start() -> None:
    for case in positives():
        for name, rule in BUILTIN.items():
            regex = re.compile(rule.pattern)
            gate = start_gate(regex)
            if gate is None:
                continue
            for m in regex.finditer(case.text):
                assert m.start() == 0 or gate.stop.match(case.text, m.start() - 1), (name, m.group())
                assert search(regex, gate, case.text, m.start()) is not None


@pytest.mark.parametrize(("pattern", "gated"), [
    (r"(?<![A-Za-z0-9])ACME-[0-9]{6}", True),
    (r"(?<![0-9a-z])\+[0-9]+|(?<![a-z])0[0-9]+", True),  # every way has one: what all exclude (a-z)
    (r"(?<![0-9])\+[0-9]+|(?<![a-z])0[0-9]+", False),  # they exclude nothing in common: no gate
    (r"(?<![0-9])\+[0-9]+|0[0-9]+", False),  # a way without: a match may start anywhere
    (r"(?<!ab)x", False),  # two characters back: not a one-character test
    (r"\b(?<![a-z])x", True),  # zero-width items before it leave the start where it is
    (r"(?i)(?<![k])x", True),
])
def test_a_gate_needs_a_one_character_lookbehind_in_every_way_to_match(pattern: str, gated: bool) -> None:
    assert (start_gate(re.compile(pattern)) is not None) is gated


def test_a_case_insensitive_lookbehind_excludes_both_cases_and_stops_at_the_kelvin_sign() -> None:
    gate = start_gate(re.compile(r"(?i)(?<![k])x"))
    assert gate is not None
    assert gate.stop.match("k") is None and gate.stop.match("K") is None
    assert gate.stop.match("\u212a") is not None  # KELVIN SIGN: the gate may stop where the lookbehind would not
    regex = re.compile(r"(?i)(?<![k])x")
    for text in ("kx", "Kx", "\u212ax", "ax", "x", "kxax"):
        found, full = search(regex, gate, text, 0), regex.search(text)
        assert (found and found.span()) == (full and full.span()), text


GATED = [r"(?<![a-z])[0-9]+", r"(?<![a-z])x?y[0-9]", r"(?<![a-z0-9])x*", r"(?i)(?<![k])(?:ab|c+d)",
         r"(?<![a-z])\+[0-9]|(?<![a-z0-9])(?:0[0-9]|[(][0-9])", r"\b(?<![.])[a-z]+@[a-z]+(?=\.)",
         r"(?<![a-z])(x|y)[0-9]\1", r"(?<![k])(?i:x)[0-9]*+y", r"(?<![kx])(?>x+|y)\Z"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(GATED), st.text(alphabet="ab xy0+9.(@kK\u212a", max_size=40), st.booleans(),
       st.sampled_from([0, re.IGNORECASE]))
def test_a_search_by_the_gate_finds_what_a_plain_search_finds(pattern: str, text: str, first: bool,
                                                               flags: int) -> None:
    """By the lead (one C search) and by the stops one at a time (a pattern with its global flags at its
    start has no lead), at every start and two ends."""
    regex = re.compile(pattern, flags)
    gate = start_gate(regex, first)
    assert gate is not None
    assert (gate.lead is None) is pattern.startswith("(?i)")
    for way in (gate, Gate(gate.stop, None)):
        for pos in range(len(text) + 1):
            for end in (len(text), max(pos, len(text) - 3)):
                found, plain = search(regex, way, text, pos, end), regex.search(text, pos, end)
                assert (found and found.span()) == (plain and plain.span()), (pos, end)
                assert found is None or found.groups() == plain.groups()  # type: ignore[union-attr]


def test_the_lead_keeps_its_class_case_sensitive_under_a_case_insensitive_pattern() -> None:
    """The lookbehind is case-sensitive, so the gate excludes `k` only: under IGNORECASE a lead class
    spelled plainly would exclude `K` too, and miss the match after it."""
    regex = re.compile(r"(?-i:(?<![k]))x", re.IGNORECASE)
    gate = start_gate(regex)
    assert gate is not None and gate.lead is not None
    for text in ("Kx", "kxKX", "\u212ax"):
        found, plain = search(regex, gate, text, 0), regex.search(text)
        assert (found and found.span()) == (plain and plain.span()), text


def test_a_two_character_gate_needs_the_first_character_of_every_way_to_match() -> None:
    assert start_gate(re.compile(r"(?<![a-z])x?y"), True).stop.pattern.endswith(r"[xy\x80-\U0010ffff]")  # type: ignore[union-attr]
    for pattern in (r"(?<![a-z])x*", r"(?<![a-z])(?:x|)"):  # may be empty: the one-character gate
        assert start_gate(re.compile(pattern), True) == start_gate(re.compile(pattern))


@pytest.mark.parametrize(("pattern", "needs"), [
    (r"[0-9]", True), (r"a[0-9]{2}", True), (r"(?:1|2)x", True), (r"(?:[0-3]x|y5)+", True), (r"(?>7|8)", True),
    (r"[0-9]?", False), (r"(?:1|a)", False), (r"(?<=1)a", False), (r"a(?=1)", False), (r"\d", False),
    (r"[0-9a]", False), (r"[^a]", False), (r"(?:[0-9]){0,2}", False),
])
def test_a_hint_needs_a_digit_when_every_match_consumes_one(pattern: str, needs: bool) -> None:
    """`\\d` is any Unicode digit (`٣`), which `has_digit` does not look for; lookarounds may look outside."""
    assert needs_one_of(re.compile(pattern), DIGITS) is needs


@given(st.text(alphabet="ab9é٣0", max_size=12), st.integers(0, 12), st.integers(0, 12))
def test_has_digit_looks_between_its_bounds(text: str, pos: int, end: int) -> None:
    assert has_digit(text, pos, end) == any(ch in "0123456789" for ch in text[pos:end])


WORDED = [rule for rule in BUILTIN.values() if rule.words]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="awsecrtbAWSECRTB _-=:x\u017f\u212a", max_size=30), st.integers(0, 30), st.integers(0, 30))
def test_a_hint_with_words_finds_what_its_regex_finds(text: str, pos: int, end: int) -> None:
    """The words are a claim about each rule's hint (in every match, in any case); the search that relies on
    them answers as the hint's regex does, at every start and end, a word begun before the start and the
    case folds `re` makes beyond ASCII (the long s, the Kelvin sign) included."""
    assert [r.name for r in WORDED] == ["aws_secret_access_key", "bearer_token"]
    for rule in WORDED:
        hint = Hint.of(rule.hint, rule.words)
        found, plain = hint.search(text, pos, end), hint.regex.search(text, pos, end)
        assert (found and found.span()) == (plain and plain.span()), rule.name


@pytest.mark.parametrize("text", ["aws", "xAWSx", "secret", "a sEcReT", "Bearer x", "aws_secret"])
def test_a_hint_with_words_answers_as_its_regex_at_every_start_and_end(text: str) -> None:
    """A start inside a word: the hint's lookbehind sees the word's beginning before the start."""
    for rule in WORDED:
        hint = Hint.of(rule.hint, rule.words)
        for pos in range(len(text) + 1):
            for end in range(pos, len(text) + 1):
                found, plain = hint.search(text, pos, end), hint.regex.search(text, pos, end)
                assert (found and found.span()) == (plain and plain.span()), (rule.name, pos, end)


@pytest.mark.parametrize("text", ["AWS", "xaWs", "SECRET_ACCESS_KEY", "my secret", "Authorization: BEARER x",
                                  "bEaReR", "\u017fecret", "a\u017fecret"])
def test_the_words_of_a_hint_are_in_every_text_it_fires_in(text: str) -> None:
    for rule in WORDED:
        if hint_pattern(rule.hint).search(text) is not None and text.isascii():
            assert any(word in text.lower() for word in rule.words), (rule.name, text)
    assert Hint.of(BUILTIN["aws_secret_access_key"].hint, ("aws", "secret")).search("\u017fecret")


@pytest.mark.parametrize(("pattern", "needs"), [
    (r"[A-Z]{2}[0-9]", True), (r"DE[0-9]{2}|GB[0-9]{2}", True), (r"(?i:DE)", False), (r"(?i)[A-Z]", False),
    (r"[A-Za-z]", False), (r"(?i)[0-9]x", False), (r"x(?-i:A)", True), (r"(?<=A)x", False),
])
def test_a_hint_needs_a_capital_when_every_match_consumes_one_case_sensitively(pattern: str, needs: bool) -> None:
    assert needs_one_of(re.compile(pattern), "ABCDEFGHIJKLMNOPQRSTUVWXYZ") is needs
