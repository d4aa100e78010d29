"""What a streaming window knows about its rules (`ScanSpec`), compiled once per rule list; the
window itself is `core.redact.engine`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.core.redact.breaks import Gaps
from gateway.core.redact.gate import Gate, max_width, start_gate, union_gate
from gateway.core.redact.needs import Hint
from gateway.core.redact.regex import (
    detect_source,
    factor_hints,
    literal_hint,
    prefix_source,
    sees_only_behind,
    spans_whitespace,
)

RUN_LIMIT = 4096  # a run reaching this many characters is cut (see `core.redact.cuts`)

_SPACES = Gaps.of("", RUN_LIMIT)


@dataclass(frozen=True, slots=True)
class RuleScan:
    """One rule's own searches, for the work on a long run where the hints fire all over (digits, hex,
    base64): a rule whose own hint does not fire is passed over, the others are tried where their gate
    lets a match start (`core.redact.gate`). See `Redactor.mask` and `core.redact.cuts`."""

    fires: Hint | None  # the rule's hint, factored (None: none known: always searched)
    hint_by: int  # `BuiltinRule.hint_by` of a given hint (0: not known)
    detect: re.Pattern[str]  # the rule's detect form (its part of `ScanSpec.detect`)
    detect_gate: Gate | None  # `start_gate(detect, first=True)`
    detect_width: int  # the longest match of `detect` (0: no bound)
    near: re.Pattern[str] | None  # its prefix form at the end, when it is part of `ScanSpec.near`
    near_gate: Gate | None  # `start_gate(near, first=True)`
    near_width: int  # the longest match of `near` (0: no bound)

    @classmethod
    def build(cls, hint: str | None, hint_by: int, detect: str, near: str | None,
              words: tuple[str, ...] = ()) -> RuleScan:
        detect_re = re.compile(detect)
        near_re = None if near is None else re.compile(near)
        return cls(None if hint is None else Hint.of(hint, words), hint_by, detect_re,
                   start_gate(detect_re, True), max_width(detect_re), near_re,
                   None if near_re is None else start_gate(near_re, True),
                   0 if near_re is None else max_width(near_re))


@dataclass(frozen=True, slots=True)
class ScanSpec:
    """What a window needs to know about its rules, compiled once per rule list."""

    passthrough: bool  # no rule at all: every delta is released as it comes
    trigger: re.Pattern[str] | None  # factored hints: any match or multi-word start fires it
    residual: re.Pattern[str] | None  # rules without a hint: their detect and prefix forms
    live: re.Pattern[str] | None  # non-empty prefixes of the rules that may span whitespace
    detect: re.Pattern[str] | None  # a superset of every rule's matches, for a quick reject
    gaps: Gaps = _SPACES  # what ends a run: whitespace, and the characters no rule can match
    tail: re.Pattern[str] | None = None  # non-empty prefixes of the rules without a hint bound, at the end
    near: re.Pattern[str] | None = None  # the same for the rules with one (see `core.redact.cuts.tail_start`)
    near_chars: int = 0  # the largest of those bounds (`BuiltinRule.hint_by`)
    by_rule: tuple[RuleScan, ...] = ()  # per rule, in order (empty: the combined searches only)
    # `union_gate` of the rules' detect gates, and of their near gates: where it finds no stop, a rule
    # with a gate has no place to start but the very start of the text.
    detect_gates: re.Pattern[str] | None = None
    near_gates: re.Pattern[str] | None = None
    # The per-delta path's one search: `first_hit` of a text shorter than RUN_LIMIT, when one
    # pattern does all its work (None: call first_hit). Derived, so `replace` keeps it in step.
    short_scan: re.Pattern[str] | None = field(init=False)
    # A search of `trigger` over a range that finds nothing proves every segment inside it clean (no
    # rule matches in it, see `core.redact.cuts.may_match`): no residual, and the hints look at nothing
    # but what they consume and what lies behind it (`sees_only_behind`). Derived too.
    clean_scan: bool = field(init=False)

    def __post_init__(self) -> None:
        scan = self.residual if self.trigger is None else self.trigger if self.residual is None else None
        object.__setattr__(self, "short_scan", scan)
        clean = self.residual is None and self.trigger is not None and sees_only_behind(self.trigger)
        object.__setattr__(self, "clean_scan", clean)

    @classmethod
    def build(cls, rules: Sequence[tuple[re.Pattern[str], str | None]], hint_by: Sequence[int] = (),
              words: Sequence[tuple[str, ...]] = ()) -> ScanSpec:
        """`rules`: (pattern, hint). A hint is a regex that fires inside the first word of every
        match and of every partial match that continues into whitespace (None: derive one).
        `hint_by`: per rule, where its given hint ends at the latest (`BuiltinRule.hint_by`; 0 or
        missing: not known); `words`: per rule, `BuiltinRule.words` of its given hint."""
        if not rules:
            return cls(True, None, None, None, None)
        gaps = Gaps.build([p for p, _hint in rules], RUN_LIMIT)
        g = gaps.cls
        hints, residual, prefixes = list[str](), list[str](), list[str]()
        by_rule: list[RuleScan] = []
        wholes = [prefix_source(p, g) for p, _hint in rules]
        for i, ((pattern, given), whole) in enumerate(zip(rules, wholes, strict=True)):
            prefix = whole if spans_whitespace(pattern) else None
            if prefix is not None:
                prefixes.append(prefix)
            hint = given if given is not None else literal_hint(pattern)
            by_rule.append(_rule_scan(pattern, given, hint, whole, g, hint_by[i:i + 1], words[i:i + 1]))
            if hint is not None:
                hints.append(hint)
            else:
                residual.append(detect_source(pattern, g))
                if prefix is not None:
                    residual.append(f"{prefix}(?<=\\S\\s)")
        live = "(?:" + "|".join(prefixes) + ")" if prefixes else None
        return cls(
            False,
            re.compile(factor_hints(hints)) if hints else None,
            re.compile("|".join(residual)) if residual else None,
            re.compile(live + r"\Z") if live else None,
            re.compile("|".join(detect_source(p, g) for p, _hint in rules)),
            gaps,
            *_tails([given for _p, given in rules], wholes, hint_by),
            tuple(by_rule),
            union_gate([gate for r in by_rule if (gate := start_gate(r.detect)) is not None]),
            union_gate([gate for r in by_rule if r.near is not None and (gate := start_gate(r.near)) is not None]),
        )

    def alive(self, held: str, seg_len: int, start: int) -> int:
        """Leftmost position >= `start` inside the segment (its first `seg_len` chars) where a
        match could begin that is still growing at the end of `held`; -1 when there is none.

        `held` only ever grows between two calls for one segment, and a start that is dead stays
        dead (a prefix of a match has only prefixes of a match before it), so the caller passes
        the previous answer as `start`: no position is searched twice, which keeps long segments
        of overlapping candidates ("Bearer Bearer Bearer ...") linear.
        """
        if self.live is None:
            return -1
        m = self.live.search(held, start)
        return m.start() if m is not None and m.start() < seg_len else -1

    def first_hit(self, text: str, pos: int, end: int) -> int:
        """Index of the first place in text[pos:end] (complete runs) that needs the slow path.

        Searches with pos/endpos rather than a slice: one-shot redaction of a large body goes back
        and forth between the paths, and slicing the rest each time would be quadratic. The detect
        forms treat a gap (whitespace, or a character no rule can match) like the edge of the text,
        so looking behind `pos` at one is the same as looking at nothing; the caller never starts
        right after a character of a run.
        """
        hit = end
        # Full searches, not bounded by an earlier hit: a bound would hide a match that starts
        # before it but ends after it.
        if self.trigger is not None and (m := self.trigger.search(text, pos, end)) is not None:
            hit = m.start()
        if self.residual is not None and (m := self.residual.search(text, pos, end)) is not None:
            hit = min(hit, m.start())
        # A run longer than RUN_LIMIT is cut: the slow path must see it. Only runs that start
        # before `hit` matter, and their first RUN_LIMIT characters end before hit + RUN_LIMIT.
        if end - pos >= RUN_LIMIT:
            m = self.gaps.long_run.search(text, pos, min(end, hit + RUN_LIMIT))
            if m is not None:
                hit = min(hit, m.start())
        return hit if hit < end else -1


def _tails(given: list[str | None], wholes: list[str | None], hint_by: Sequence[int]) \
        -> tuple[re.Pattern[str] | None, re.Pattern[str] | None, int]:
    """(`tail`, `near`, `near_chars`): the rules' prefix forms at the end of the text, apart for the
    rules whose given hint has a bound (`BuiltinRule.hint_by`)."""
    tails: list[str] = []
    near: list[str] = []
    near_chars = 0
    for i, whole in enumerate(wholes):
        bound = hint_by[i] if i < len(hint_by) and given[i] is not None else 0
        if whole is not None:
            (near if bound else tails).append(whole)
            near_chars = max(near_chars, bound)
    return _at_end(tails), _at_end(near), near_chars


def _at_end(prefixes: list[str]) -> re.Pattern[str] | None:
    return re.compile("(?:" + "|".join(prefixes) + r")\Z") if prefixes else None


def _rule_scan(pattern: re.Pattern[str], given: str | None, hint: str | None, whole: str | None, gaps: str,
               hint_by: Sequence[int], words: Sequence[tuple[str, ...]]) -> RuleScan:
    """One rule's own scan (`ScanSpec.by_rule`): its hint, its detect form and, where its given hint
    has a bound, the prefix form `tail_start` searches near the end. `hint_by`, `words`: the rule's own
    (`BuiltinRule`: its given hint's), or none."""
    bound = hint_by[0] if hint_by and given is not None else 0
    own_words = words[0] if words and given is not None else ()
    near = f"(?:{whole})\\Z" if whole is not None and bound else None
    return RuleScan.build(hint, bound, detect_source(pattern, gaps), near, own_words)
