"""Where a window cuts text it may not hold any longer: before whatever could still become a match.

A run that reaches `RUN_LIMIT` characters and a segment that would pass `SEG_LIMIT` characters or
`SEG_RUNS` runs must be cut so that memory stays bounded. Cutting blindly splits a secret that lies
across the cut into two pieces that neither match (a key inside a long URL or a line of minified
JSON). So the cut goes before the leftmost candidate that could still grow past it, and the text
from there starts the next run or segment: the secret is matched whole there.

`tail` and `near` are the alternations of the rules' non-empty-prefix forms (see `core.redact.regex`)
anchored at the end of the searched text: `tail_start` finds the leftmost q >= a where text[q:b]
could be the start of a match. A whole match that starts before the chosen start and runs across
it would be split by the cut too, so the start moves back to it (a few times at most). `detect` (a superset of
the matches, see `ScanSpec`) finds those in one pass, when the hints show that text[first:end] may
hold a match at all (`may_match`: a match lies in one segment, and its hint inside it; the hints skip
at C speed where `detect` tries every rule at every character, ten times slower on a long run). A
match that would have to be kept from before `low` is too long to keep, and then the cut stays where
it was (-1).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gateway.core.redact.gate import search
from gateway.core.redact.needs import has_digit

if TYPE_CHECKING:
    from gateway.core.redact.spec import RuleScan, ScanSpec

TRIES = 8  # how often a match across the kept start may move it back before we give up
# `near` is searched rule by rule (`_near_by_rule`) over more than this many characters, or where no gate
# stops: over fewer (no hint until the end of the run, the usual case in prose) one search of it (~0.7 µs
# a character) costs less than a search of each rule's hint.
NEAR_BY_RULE = 64


def may_match(trigger: re.Pattern[str] | None, residual: re.Pattern[str] | None, segment: str) -> bool:
    """Whether some rule could match inside `segment` (on its own): a hint (`trigger`) or a residual
    form fires in it; the fast path's proof (see `ScanSpec.first_hit`)."""
    if trigger is not None and trigger.search(segment) is not None:
        return True
    return residual is not None and residual.search(segment) is not None


def keep_start(spec: ScanSpec, text: str, first: int, keep: int, low: int, end: int) -> int:
    """The start, in [low, keep], of the text to keep when `keep` starts a candidate to keep,
    text[first:keep] goes out and text[:end] is known; -1 when a match across it starts before `low`."""
    detect = spec.detect
    if detect is None or not may_match(spec.trigger, spec.residual, text[first:end]):
        return keep
    if spec.by_rule:
        spans = _spans_by_rule(spec, text, first, keep, end)
    else:
        spans = []
        pos = first
        while pos < keep and (m := detect.search(text, pos, end)) is not None and m.start() < keep:
            spans.append(m.span())
            pos = m.start() + 1
    for _ in range(TRIES + 1):
        across = [a for a, b in spans if a < keep < b]
        if not across:
            return keep
        keep = min(across)
        if keep < low:
            return -1
    return -1


def _quiet(gates: re.Pattern[str] | None, text: str, pos: int, end: int) -> bool:
    """Whether no rule with a gate can start a match in text[pos:end]: no gate stops in it or right
    before it, and it does not start the text."""
    return pos > 0 and gates is not None and gates.search(text, pos - 1, end) is None


def _spans_by_rule(spec: ScanSpec, text: str, first: int, keep: int, end: int) -> list[tuple[int, int]]:
    """The spans the loop over `detect` finds that can cross `keep` (the first rule's match at each start
    before it), rule by rule: each only when its own hint fires in text[first:end], where its gate lets a
    match start, and, when its matches have a bound, close enough before `keep` to reach past it."""
    spans: dict[int, int] = {}
    rules = spec.by_rule
    quiet = _quiet(spec.detect_gates, text, first, keep)
    digits = has_digit(text, first, end)
    for i, rule in enumerate(rules):
        if quiet and rule.detect_gate is not None:
            continue
        if rule.fires is not None and rule.fires.search(text, first, end, digits) is None:
            continue
        pos = max(first, keep - rule.detect_width) if rule.detect_width else first
        while pos < keep and (m := search(rule.detect, rule.detect_gate, text, pos, end)) is not None:
            if m.start() >= keep:
                break
            if m.start() not in spans:
                spans[m.start()] = _first_end(rules[:i], text, m.start(), end, m.end())
            pos = m.start() + 1
    return list(spans.items())


def _first_end(earlier: tuple[RuleScan, ...], text: str, start: int, end: int, found: int) -> int:
    """Where the match at `start` of the first rule ends (`detect` tries the rules in order): an earlier
    rule whose window left `start` out may match there too."""
    for rule in earlier:
        if (m := rule.detect.match(text, start, end)) is not None:
            return m.end()
    return found


def _near_by_rule(spec: ScanSpec, text: str, low: int, end: int, found: int) -> int:
    """`tail_start`'s search of `near`, rule by rule: a candidate of a rule longer than its `hint_by` holds
    that rule's own hint, so it starts less than `hint_by` before the rule's first hint from `low`; and
    one of a rule whose matches have a bound starts no further than that from the end."""
    quiet = _quiet(spec.near_gates, text, low, end)
    digits = has_digit(text, low, end)
    for rule in spec.by_rule:
        if rule.near is None or rule.fires is None or (quiet and rule.near_gate is not None):
            continue
        start = max(low, end - rule.near_width) if rule.near_width else low
        h = rule.fires.search(text, start, end, digits)
        start = max(start, (end if h is None else h.start()) - rule.hint_by)
        stop = end if found < 0 else found  # only a candidate left of the one found matters
        if start >= stop:
            continue
        if (m := search(rule.near, rule.near_gate, text, start, end)) is not None and m.start() < stop:
            found = m.start()
    return found


def tail_start(spec: ScanSpec, text: str, low: int, end: int, hint: int = -1) -> int:
    """The leftmost q in [low, end) where text[q:end] could be the start of a match, or -1. `hint`: the
    start of the first hint from some position at or before `low` (`end`: none), when the caller has
    searched for it; -1: not known.

    `tail` is tried at every position. `near` (the rules whose hint ends within the first
    `near_chars` characters of anything their prefix form matches, `BuiltinRule.hint_by`) only where
    it can hit: a candidate longer than `near_chars` holds its hint, and so starts less than
    `near_chars` before the first hint in text[low:end]; a shorter one starts in the last `near_chars`.
    On text where no hint fires that is a few dozen positions instead of `keep_chars`."""
    found = -1
    if spec.tail is not None and (m := spec.tail.search(text, low, end)) is not None:
        found = m.start()
    if spec.near is None:
        return found
    if spec.by_rule and _quiet(spec.near_gates, text, low, end):  # then only the few rules without a gate
        return _near_by_rule(spec, text, low, end, found)
    if hint < low:
        hint = end if spec.trigger is None or (h := spec.trigger.search(text, low, end)) is None else h.start()
    first = max(low, hint - spec.near_chars)
    if 0 <= found <= first:
        return found
    if spec.by_rule and end - first > NEAR_BY_RULE:
        return _near_by_rule(spec, text, first, end, found)
    if (m := spec.near.search(text, first, end)) is not None:
        return m.start() if found < 0 else min(found, m.start())
    return found


def run_cut(spec: ScanSpec, text: str, first: int, start: int, end: int, keep_chars: int) -> tuple[int, bool]:
    """Where the run text[start:end], which reached the run limit, is cut: before the leftmost
    candidate that starts within `keep_chars` of `end` and could still grow past it, or at `end`;
    and whether text[first:end] (`first`: the start of the open segment, or `start`) is clean
    (`ScanSpec.clean_scan`): then no segment in it needs masking. One search for hints serves both."""
    low = max(start + 1, end - keep_chars)
    hint = end
    if spec.trigger is not None and (m := spec.trigger.search(text, first, end)) is not None:
        hint = m.start()
    clean = spec.clean_scan and hint == end
    q = tail_start(spec, text, low, end, hint)
    if q < 0:
        return end, clean
    keep = q if clean else keep_start(spec, text, start, q, low, end)
    return (end if keep < 0 else keep), clean
