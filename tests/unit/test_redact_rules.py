"""Rule names, compile errors, checksums, and the regex rewrites the windows rely on."""

from __future__ import annotations

import dataclasses
import itertools
import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.redact.checks import card_ok, iban_ok, luhn_ok
from gateway.core.redact.cuts import may_match
from gateway.core.redact.engine import ScanSpec
from gateway.core.redact.regex import (
    WHITESPACE,
    caseless,
    detect_source,
    factor_hints,
    literal_hint,
    prefix_source,
    spans_whitespace,
)
from gateway.core.redact.rules import BUILTIN, builtin_rule_names, is_known_rule
from gateway.core.redact.window import Redactor, _find_all
from tests.unit.test_redact_window import REDACTOR, SECRETS


def test_rule_names() -> None:
    names = builtin_rule_names()
    for required in ("openai_key", "anthropic_key", "aws_access_key_id", "aws_secret_access_key",
                     "github_token", "slack_token", "slack_webhook", "google_api_key", "jwt",
                     "private_key", "bearer_token", "email", "phone", "card_number", "iban"):
        assert required in names
        assert is_known_rule(required)
    assert is_known_rule("secrets") and is_known_rule("pii")
    assert not is_known_rule("Secrets") and not is_known_rule("ssn") and not is_known_rule("")


def test_compile_rejects_unknown_and_clashing_rules() -> None:
    with pytest.raises(ValueError, match='unknown redaction rule or rule set "passwords"'):
        Redactor.compile(["secrets", "passwords"], [])
    with pytest.raises(ValueError, match="invalid regular expression"):
        Redactor.compile([], [("ticket", "ACME-[0-9")])
    with pytest.raises(ValueError, match="built-in"):
        Redactor.compile([], [("email", "x+")])
    with pytest.raises(ValueError, match="duplicate"):
        Redactor.compile([], [("t", "a"), ("t", "b")])


def test_rule_sets_expand_once_in_a_fixed_order() -> None:
    both = Redactor.compile(["pii", "email", "secrets"], [("ticket", "T-[0-9]+")])
    assert both.rule_names == (*BUILTIN, "ticket")


def test_checksums() -> None:
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert card_ok("378282246310005")
    assert not card_ok("1234567812345670")  # Luhn-valid, but no issuer starts with 1
    assert not card_ok("411111111111")  # too short
    assert iban_ok("GB82WEST12345698765432")
    assert not iban_ok("GB82WEST12345698765433")  # checksum
    assert not iban_ok("GB82WEST1234569876543")  # length for GB is 22
    assert not iban_ok("ZZ82WEST12345698765432")  # no such country


def test_numbers_that_are_not_pii() -> None:
    redactor = Redactor.compile(["pii"], [])
    for text in ["version 1.22.333", "on 2024-06-11 at 10:30:00", "from 192.168.100.200:8080",
                 "ts=1718092800 and 1718092800123", "1234 5678 9012 3456", "uuid 550e8400-e29b-41d4-a716-446655440000",
                 "call 555-0132", "pi is 3.14159265358979", "ISBN 978-1-4493-7332-0", "chmod 0755 file",
                 "1,234,567 rows", "npm i lodash@4.17.21", "icon@2x.png", "git@github.com:org/repo.git",
                 "postgresql://user@db.internal:5432/app", "cron 0 3 * * 1-5", "MAC 00:1A:2B:3C:4D:5E"]:
        assert redactor.redact(text).text == text, text


WORDS = ["", "a", "b", "ab", "ba", "aab", "a b", "ab ", " a", "abab", "a  b", "b a", "aaa"]


@pytest.mark.parametrize("pattern", [r"ab", r"a+b", r"(?:ab|b a)+", r"a\s+b", r"(?<!b)a{2,3}b?",
                                     r"a(?=b)b", r"(?i)AB", r"[ab]{2}(?: b)?", r"(a)\1"])
def test_prefix_source_accepts_every_prefix_of_a_match(pattern: str) -> None:
    regex = re.compile(pattern)
    prefix = prefix_source(regex)
    assert prefix is not None
    live = re.compile(prefix)
    strings = {"".join(p) for n in range(1, 6) for p in itertools.product("ab ", repeat=n)}
    for s in strings:
        is_prefix = any(regex.fullmatch(s + rest) for rest in strings | {""})
        if is_prefix:  # an over-approximation is allowed, a miss is not
            assert live.fullmatch(s), (pattern, s)
    assert not live.fullmatch("")


@pytest.mark.parametrize("pattern", [r"^ACME-\d+$", r"(?<=\s)x\d", r"\bfoo\b", r"(?<![a-z])sk-\w+",
                                     r"(?i)key=(\w+)\1", r"a(?!\s)b"])
def test_detect_source_is_a_superset_on_a_word_and_inside_a_region(pattern: str) -> None:
    regex, detect = re.compile(pattern), re.compile(detect_source(re.compile(pattern)))
    for word in ["ACME-42", "x1", "foo", "sk-abc", "KEY=abab", "ab", "zsk-a", "foo-bar"]:
        if regex.search(word):
            assert detect.search(word), (pattern, word)
            assert detect.search(f"text {word} more"), (pattern, word)


def test_spans_whitespace() -> None:
    assert spans_whitespace(re.compile(r"a\s+b"))
    assert spans_whitespace(re.compile(r"a.b"))
    assert spans_whitespace(re.compile(r"[^x]"))
    assert not spans_whitespace(re.compile(r"sk-[A-Za-z0-9]+(?!\s)"))
    assert not spans_whitespace(re.compile(r"\S+@\S+"))


def test_hints() -> None:
    assert literal_hint(re.compile(r"(?<!\w)ACME-\d+")) == r"ACME\-"
    assert literal_hint(re.compile(r"Project X\d")) == "Project"
    assert literal_hint(re.compile(r"[A-Z]+")) is None
    assert re.fullmatch(caseless("secret"), "\u017fECRET")  # (?i) "s" also matches the long s
    merged = re.compile(factor_hints(["sk-", "sk-ant-", "A(?:KIA|SIA)", "[0-9][0-9]{2}-"]))
    assert [m.group() for m in merged.finditer("sk-x AKIA 415-1 ASIA")] == ["sk-", "AKIA", "415-", "ASIA"]
    with pytest.raises(ValueError):
        factor_hints([r"\d+"])


def test_whitespace_table_and_case_folding_assumptions() -> None:
    assert "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()) == WHITESPACE
    # `caseless` scans the BMP only: no astral character is a case variant of a BMP one.
    bmp = "".join(map(chr, range(0x10000)))
    astral_cased = [c for c in map(chr, range(0x10000, sys.maxunicode + 1)) if c.lower() != c.upper()]
    assert astral_cased
    for c in astral_cased:
        assert re.search(re.escape(c), bmp, re.IGNORECASE) is None


# The hints as they read before `_late` moved them to a rarer character.
_PLAIN_HINTS = {
    "anthropic_key": "sk-ant-", "openai_key": "sk-",
    "aws_secret_access_key": caseless("aws") + "|" + caseless("secret"),
    "github_token": "gh[pousr]_|github_pat_", "slack_webhook": r"https://hooks\.slack\.com/",
    "jwt": "eyJ", "private_key": "-----BEGIN ",
    "phone": r"\+[0-9]|\([0-9]{3}\)|0[0-9]|[0-9][0-9]{2}[.-][0-9]{3}",
}
_LATE = Redactor.compile(["secrets", "pii"], []).spec
_PLAIN = dataclasses.replace(_LATE, trigger=re.compile(factor_hints(
    [_PLAIN_HINTS.get(name, rule.hint) for name, rule in BUILTIN.items()])))
_PIECES = ["s", "k", "-", "sk-", "ant-", "a", "A", "w", "W", "s", "S", "\u017f", "e", "c", "C", "ret",
           "secret", "aws", "g", "h", "p", "_", "github", "pat", "https://hoo", "ks.slack.com/", "ey",
           "J", "-----BE", "GIN", "BEGIN", "(", "5", "55", ")", "+", "0", "x", "b", "B", "earer", "@",
           "DE", "89", " ", " ", "\n", "\t"]


def _hit_word(spec: ScanSpec, text: str, pos: int, end: int) -> int:
    """Start of the word where the fast path hands over to the slow path, or -1."""
    hit = spec.first_hit(text, pos, end)
    while hit > pos and not text[hit - 1].isspace():
        hit -= 1
    return hit


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=16).map("".join))
def test_late_hints_stop_the_fast_path_at_the_same_words_as_the_plain_ones(text: str) -> None:
    starts = [0, *(i for i in range(1, len(text)) if text[i - 1].isspace())]
    ends = [len(text), *(i for i in range(1, len(text)) if text[i - 1].isspace())]
    for pos in starts:
        for end in ends:
            if end > pos:
                assert _hit_word(_LATE, text, pos, end) == _hit_word(_PLAIN, text, pos, end), (text, pos, end)


_SECRET_VALUES = [value for _rule, value in SECRETS]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.sampled_from(_SECRET_VALUES[:40]), max_size=12).map("".join),
       st.integers(0, 8), st.integers(0, 8))
def test_a_segment_the_hints_pass_over_holds_no_match(text: str, cut_left: int, cut_right: int) -> None:
    """`Redactor.mask` skips `detect` and the rules for a segment where no hint or residual form fires
    (cuts.may_match; also before a cut's `detect` pass): then no rule matches in it, even cut anywhere."""
    redactor = REDACTOR
    segment = text[cut_left:len(text) - cut_right]
    if not may_match(redactor.spec.trigger, redactor.spec.residual, segment):
        assert all(not list(_find_all(rule, segment)) for rule in redactor.rules), segment
        counts: dict[str, int] = {}
        assert redactor.mask(segment, counts) == segment and not counts


# The email rule as it was written before its repeats were made possessive (bench/README.md, "Goal 5"):
# the rewrite must find exactly what this finds, at every start.
EMAIL_BACKTRACKING = re.compile(
    r"(?<![A-Za-z0-9_.%+-])(?<!//)[A-Za-z0-9][A-Za-z0-9_.%+-]{0,63}@(?![0-9]+x\.)"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}"
    r"(?![A-Za-z0-9-]|\.[A-Za-z0-9]|:[!-~])")
_EMAILISH = st.one_of(st.sampled_from(["a", "b", "Z", "0", "9", "-", ".", "_", "%", "+", "@", "/", ":", "x", " ",
                                       "é", "co", "uk", "2x.", "a" * 62, "b" * 63, "c" * 64, "d" * 25]))


@settings(max_examples=600, deadline=None)
@given(st.lists(_EMAILISH, max_size=40).map("".join))
def test_the_possessive_email_rule_matches_what_the_backtracking_one_did(text: str) -> None:
    email = re.compile(BUILTIN["email"].pattern)
    for pos in range(len(text) + 1):
        old, new = EMAIL_BACKTRACKING.match(text, pos), email.match(text, pos)
        assert (old and old.span()) == (new and new.span()), pos


@pytest.mark.parametrize("text", ["ann.lee@mail.example.co.uk", "a@b-c.de", "x@" + "a" * 63 + ".io",
                                  "x@" + "a" * 64 + ".io", "x@a-.io", "x@-a.io", "icon@2x.png", "x@a.b.c.",
                                  "x@a.com.-", "x@a.com.1", "u@h:path", "x@a." + "b" * 24, "x@a." + "b" * 25,
                                  "a" * 64 + "@b.io", "a" * 65 + "@b.io"])
def test_the_email_rule_at_its_edges(text: str) -> None:
    old = [m.span() for m in EMAIL_BACKTRACKING.finditer(text)]
    assert [m.span() for m in re.finditer(BUILTIN["email"].pattern, text)] == old, text


@pytest.mark.parametrize(("pattern", "kept"), [(r"a*+b", True), (r"(?>a|ab)b", True), (r"(?:a(?!\s))*+a\s", False),
                                               (r"(?<![b])a{1,3}+(?!\s)", True)])
def test_detect_source_keeps_a_possessive_repeat_only_where_it_takes_what_the_pattern_does(pattern: str,
                                                                                           kept: bool) -> None:
    """Possessive repeats and atomic groups of plain items stay so (no backtracking through them); one whose
    items hold a lookaround that the detect form drops would take more there, and miss ("aa " below)."""
    regex = re.compile(pattern)
    source = detect_source(regex)
    assert ("}+" in source or "(?>" in source) is kept, source
    detect = re.compile(source)
    for n in range(1, 7):
        for chars in itertools.product("ab ", repeat=n):
            if regex.search(text := "".join(chars)):
                assert detect.search(text), (pattern, text)
