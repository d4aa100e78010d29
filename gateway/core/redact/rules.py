"""Built-in redaction rules and rule sets (docs/extensions.md, "Redaction in every script").

A rule is a regular expression matched inside one segment (see `core.redact.engine`): a
whitespace-free run, or several runs while a rule that may contain whitespace could still match
across them. Patterns follow three conventions so the windows stay exact and cheap:

* boundaries are lookarounds over non-whitespace classes, so a run behaves the same scanned
  alone or inside a longer text;
* where only part of a match is secret, the group ``s`` marks it (``Bearer <s>``): the rest stays
  readable and only ``s`` becomes ``[REDACTED:<rule>]``;
* no back-references (the window derives "could this still match?" from the pattern).

Loose candidates are narrowed by `refine` functions (Luhn, IBAN mod-97, digit counts).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gateway.core.redact.checks import (
    IBAN_LENGTHS,
    Span,
    refine_card,
    refine_iban,
    refine_phone,
)
from gateway.core.redact.regex import caseless

Refine = Callable[[re.Match[str]], Iterator[Span]]


@dataclass(frozen=True, slots=True)
class BuiltinRule:
    name: str
    pattern: str
    # Fires inside the first word of every match, and of every partial match that goes on into
    # whitespace; each top-level alternative starts with a literal (see `factor_hints`), a rare
    # one where it can (see `_late`).
    hint: str
    refine: Refine | None = None
    token_check: bool = False  # the masked text must mix letters and digits
    # The hint, and all it looks at, lies within the first `hint_by` characters of every match and
    # of every string the rule's non-empty-prefix form matches (0: not known). A forced cut then
    # looks for a growing candidate near the end and near a hint only (`core.redact.cuts.tail_start`).
    hint_by: int = 0
    # Lowercase words, one of which every match of the hint holds in any case (`core.redact.gate.Hint`):
    # for hints `re` cannot skip to at C speed (a class of two cases first).
    words: tuple[str, ...] = ()


def _late(lead: str, rest: str) -> str:
    """The hint `lead` + `rest`, found where `rest` starts.

    The fast path's search stops at every character that can start a hint, and each stop costs
    far more than a skipped character, so a hint should start at a character that ordinary text
    rarely has ("sk-" at "k", "eyJ" at "J"). The lookbehind, tried only once the rest has matched,
    keeps the hint exact; the match still starts in the same word, which is all the window uses.
    `lead` and `rest` must contain no whitespace and have a fixed width.
    """
    return f"{rest}(?<={lead}{rest})"


def _late_caseless(lead: str, rest: str) -> str:
    """`_late` for a case-insensitive literal: `lead` + `rest` under (?i), found at `rest`."""
    return caseless(rest) + f"(?i:(?<={re.escape(lead + rest)}))"


_TOK = "A-Za-z0-9_-"  # base64url and most vendor token alphabets
_B = rf"(?<![{_TOK}])"  # token start: not inside a longer token
_E = rf"(?![{_TOK}])"  # token end

_PEM_LABEL = r"[ ](?:[A-Z0-9]+[ ]){0,3}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----"  # RSA, ENCRYPTED, OPENSSH...
_PEM_SEP = r"(?:[ \t]*(?:\r?\n|\\r\\n|\\n))+[ \t]*"  # real newlines, or \n escaped in JSON
# Armor headers ("Proc-Type: 4,ENCRYPTED", RFC 1421 / RFC 4880 6.2: printable ASCII) come only
# right after the BEGIN line: a "Name: value" line after the base64 of a truncated block is prose
# ("here: the model said"), not the key. Then whole lines of base64 (never the start of the next
# word, "sk-ant-..."): full-length lines, padded last lines, a PGP checksum. A short unpadded last
# line only counts right before the END line, so words after a truncated block stay readable.
# Every class here is ASCII, so no CJK or other non-Latin character is one this rule looks at
# (see `core.redact.breaks`).
_B64 = "[A-Za-z0-9+/]"
_PEM_WORD_END = r"(?![!-\[\]-~])"  # not followed by printable ASCII (a backslash starts "\n")
_PEM_HEADER = r"[A-Za-z][A-Za-z0-9-]*:[ \t][ \t!-\[\]-~]*"
_PEM_LINE = rf"(?:{_B64}{{16,}}={{0,2}}|{_B64}*={{1,2}}|={_B64}{{4}}){_PEM_WORD_END}"
_PEM_END = rf"(?:{_PEM_SEP}{_B64}{{1,15}}{_PEM_WORD_END})?{_PEM_SEP}-----END{_PEM_LABEL}"

_IBAN_CC = "|".join(sorted(IBAN_LENGTHS))
_CARD_IIN4 = (
    r"4[0-9]{3}|5[1-5][0-9]{2}|2(?:2[2-9][0-9]|[3-6][0-9]{2}|7[01][0-9]|720)|3[47][0-9]{2}"
    r"|3(?:0[0-5]|[68][0-9])[0-9]|35(?:2[89]|[3-8][0-9])|6(?:011|5[0-9]{2}|4[4-9][0-9]|2[0-9]{2})"
)
# A number that is not part of a version, date, path, id or time. ASCII classes: a number right
# after Japanese text ("電話090-1234-5678") is a number, and the rule looks at no CJK character.
_NUM_B = r"(?<![A-Za-z0-9_.,:/+-])"
_NUM_E = r"(?![A-Za-z0-9_-]|[.,:/][0-9])"

SECRETS: tuple[BuiltinRule, ...] = (
    BuiltinRule(
        "anthropic_key",
        pattern=rf"{_B}sk-ant-(?:api|admin|sid|oat)[0-9]{{2}}-[{_TOK}]{{20,}}{_E}",
        hint=_late("s", "k-ant-"), hint_by=7,
    ),
    BuiltinRule(
        "openai_key",
        pattern=rf"{_B}sk-(?!ant-)(?:(?:proj|svcacct|admin)-)?[{_TOK}]{{20,}}{_E}",
        hint=_late("s", "k-"), hint_by=3,
        token_check=True,
    ),
    BuiltinRule(
        "aws_access_key_id",
        pattern=r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)[A-Z0-9]{16}"
        r"(?![A-Za-z0-9])",
        hint=r"A(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|PKA|ROA)", hint_by=4,
    ),
    BuiltinRule(
        "aws_secret_access_key",  # only in context: a bare 40-char string is too common
        pattern=r"(?<![A-Za-z0-9_])(?i:aws[_-]?secret(?:[_-]?access)?[_-]?key|secret[_-]?access[_-]?key)"
        r"""["']?(?:[ \t]*(?::=|=>|[:=])[ \t]*|[ \t]+)["']?(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])""",
        hint=_late_caseless("a", "ws") + "|" + _late_caseless("se", "cret"), hint_by=6,
        token_check=True, words=("aws", "secret"),
    ),
    BuiltinRule(
        "github_token",
        pattern=r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{40,251})"
        r"(?![A-Za-z0-9_])",
        hint=_late("gh[pousr]", "_") + "|" + _late("github", "_pat_"), hint_by=11,
    ),
    BuiltinRule(
        "slack_token",
        pattern=rf"{_B}(?:xox[a-z]-[A-Za-z0-9-]{{10,}}|xapp-[0-9]-[A-Za-z0-9-]{{10,}}){_E}",
        hint=r"xox[a-z]-|xapp-", hint_by=5,
        token_check=True,
    ),
    BuiltinRule(
        "slack_webhook",
        pattern=r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{10,}"
        r"(?![A-Za-z0-9_/-])",
        hint=_late(r"https://hoo", r"ks\.slack\.com/"), hint_by=24,
    ),
    BuiltinRule("google_api_key", pattern=rf"{_B}AIza[{_TOK}]{{35}}{_E}", hint=r"AIza", hint_by=4),
    BuiltinRule("jwt", pattern=rf"{_B}eyJ[{_TOK}]{{5,}}\.[{_TOK}]{{5,}}\.[{_TOK}]*{_E}", hint=_late("ey", "J"),
                hint_by=3),
    BuiltinRule(
        "private_key",  # the whole block; without its END line, up to the last base64 line
        pattern=rf"-----BEGIN{_PEM_LABEL}(?:{_PEM_SEP}{_PEM_HEADER})*(?:{_PEM_SEP}{_PEM_LINE})*(?:{_PEM_END})?",
        # The space after BEGIN stays out of the lookbehind: `factor_hints` drops lookarounds
        # that could look at whitespace.
        hint=_late("-----BE", "GIN") + " ", hint_by=11,
    ),
    BuiltinRule(
        "bearer_token",  # "Authorization: Bearer <s>" or "Bearer <s>" in prose; the scheme stays
        pattern=rf"{_B}(?i:bearer)[ \t]+(?P<s>[A-Za-z0-9._~+/-]{{15,}}[A-Za-z0-9_~+/-]=*)"
        r"(?![A-Za-z0-9_~+/=-]|\.[A-Za-z0-9])",
        hint=caseless("bearer"), hint_by=6,
        token_check=True, words=("bearer",),
    ),
)

PII: tuple[BuiltinRule, ...] = (
    BuiltinRule(
        "email",
        # Possessive where giving back cannot help (the next character is one the repeat does not take:
        # the `@` after the local part, the dot after a label, the lookahead's letter after the TLD), so
        # a failed try stops at once instead of backtracking over up to 63 characters; a label is
        # 1-63 of [A-Za-z0-9-], not ending with "-". The same matches (tests/unit/test_redact_rules.py).
        pattern=r"(?<![A-Za-z0-9_.%+-])(?<!//)[A-Za-z0-9][A-Za-z0-9_.%+-]{0,63}+@(?![0-9]+x\.)"
        r"(?:[A-Za-z0-9][A-Za-z0-9-]{0,62}+(?<!-)\.)+[A-Za-z]{2,24}+"
        # Not after "//" (URL user info), not "host:path" (an scp/ssh remote), not "icon@2x.png".
        r"(?![A-Za-z0-9-]|\.[A-Za-z0-9]|:[!-~])",
        hint=r"@", hint_by=65,
    ),
    BuiltinRule(
        "phone",  # E.164 with +, US (xxx) xxx-xxxx / xxx-xxx-xxxx, European trunk-0 forms
        pattern=r"(?<![A-Za-z0-9_+])\+[0-9]{1,3}(?:[ .-]?(?:\([0-9]{1,4}\)|[0-9]{1,5})){1,6}"
        rf"{_NUM_E}|{_NUM_B}(?:\([0-9]{{3}}\)[ ]?[0-9]{{3}}[ .-][0-9]{{4}}"
        r"|(?:1-)?[0-9]{3}-[0-9]{3}-[0-9]{4}|[0-9]{3}\.[0-9]{3}\.[0-9]{4}"
        rf"|0[0-9](?:\.[0-9]{{2}}){{4}}|0[0-9]{{1,4}}(?:[ -][0-9]{{2,8}}){{1,4}}){_NUM_E}",
        hint=r"\+[0-9]|" + _late(r"\(", r"[0-9][0-9]{2}\)") + r"|0[0-9]|[0-9][0-9]{2}[.-][0-9]{3}", hint_by=9,
        refine=refine_phone,
    ),
    BuiltinRule(
        "card_number",  # issuer prefixes, 13-19 digits, plain or in groups, Luhn-checked
        pattern=rf"{_NUM_B}(?:{_CARD_IIN4})(?:[0-9]{{9,15}}|(?:[ -][0-9]{{4,6}}){{2,3}}(?:[ -][0-9]{{1,4}})?)"
        rf"{_NUM_E}",
        hint=_CARD_IIN4, hint_by=4,
        refine=refine_card,
    ),
    BuiltinRule(
        "iban",  # country code, check digits, groups of four; length and mod-97 checked
        pattern=rf"(?<![A-Za-z0-9])(?:{_IBAN_CC})[0-9]{{2}}(?:[ ]?[A-Z0-9]{{4}}){{2,7}}(?:[ ]?[A-Z0-9]{{1,3}})?"
        r"(?![A-Za-z0-9])",
        hint="|".join(f"{cc}[0-9]{{2}}" for cc in sorted(IBAN_LENGTHS)), hint_by=4,
        refine=refine_iban,
    ),
)

RULE_SETS: dict[str, tuple[BuiltinRule, ...]] = {"secrets": SECRETS, "pii": PII}
BUILTIN: dict[str, BuiltinRule] = {r.name: r for r in SECRETS + PII}


def builtin_rule_names() -> tuple[str, ...]:
    return tuple(BUILTIN)


def is_known_rule(name: str) -> bool:
    """True for a rule-set name ("secrets", "pii") and for every single built-in rule name."""
    return name in RULE_SETS or name in BUILTIN


def expand(names: tuple[str, ...] | list[str]) -> list[BuiltinRule]:
    """Rule-set and rule names -> the distinct built-in rules, in order. Unknown names raise."""
    out: dict[str, BuiltinRule] = {}
    for name in names:
        if name in RULE_SETS:
            out.update((r.name, r) for r in RULE_SETS[name])
        elif name in BUILTIN:
            out[name] = BUILTIN[name]
        else:
            raise ValueError(f'unknown redaction rule or rule set "{name}"')
    # Fixed priority (specific vendor formats before the generic bearer rule), whatever the order
    # of the configured names: a tie between two rules on the same text resolves the same way.
    return [r for r in BUILTIN.values() if r.name in out]
