"""Where a rule's match can start, found at C speed: the search of one rule over a long segment.

Most rules begin with a one-character negative lookbehind (a token or a number starts here: not
after a letter, a digit, ...; see `core.redact.rules`). `re` cannot skip ahead on a lookbehind, so a
plain search tries the whole pattern at every character, ~100 ns each: on a 4,096-character run of
digits or hex that is most of what a stream costs with redaction on (bench/README.md, "Goal 5"). A
*gate* is the class of characters that a match can start after: the ASCII characters that every
leading lookbehind of the pattern excludes, negated. Searching for the gate skips at C speed, and
the pattern is tried only right after a gate character (and at the start). That finds exactly what
a plain search finds: every match starts at such a position, the positions are tried in order, and
`Pattern.match(text, pos)` sees the characters before `pos` as `search` does. The gate may hold
characters that no lookbehind would let through (it stops at every one outside ASCII); those are
tries that fail, never a match missed. When every way to match begins with a character of a known set
(`phone`: `+`, `(` or a digit), the gate takes that character too (two characters, the match starting
at the second): fewer stops in minified JSON or base64, where the gate characters are common.

The stops are found and tried in one C call: the *lead* is the gate's class followed by the pattern,
and `re` skips to the characters of a pattern's leading class at C speed. A stop that fails costs the
pattern's own attempt, no Python call: in text dense in gate characters (`a@b.`, `-_.:/@`, minified
JSON) that was ~1.5 µs a stop (bench/README.md, "Goal 5").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gateway.core.redact.regex import _parser, _scoped, _Tree

# A gate's stops are tried one by one only while they come at most once every this many characters
# (and a few more); past that (text made of the characters a match may start after, "a@b.a@b."), a
# plain search from there costs less than a Python call per stop.
SPARSE = 16
_SLACK = 4 * SPARSE
_CHAR_NODES = ("LITERAL", "NOT_LITERAL", "ANY", "IN")


@dataclass(frozen=True, slots=True)
class Gate:
    """Where a pattern's match can start: right after a `stop` (a character of the gate's class, with,
    when known, the match's first character after it), and the `lead`: the class, then the pattern (None
    when the pattern does not compile inside another, as one with its global flags spelled at its start)."""

    stop: re.Pattern[str]
    lead: re.Pattern[str] | None


def start_gate(pattern: re.Pattern[str], first: bool = False) -> Gate | None:
    """The gate of `pattern` (one character class), or None when some way to match it does not begin
    with a one-character negative lookbehind (then every position is a start). With `first`, when every
    match begins with a character of a known set, the stop is two characters: a gate character, then
    one of those (a match starts at the second; `search` takes either form)."""
    tree = _Tree(pattern)
    tests = _leading_lookbehinds(tree, tree.items, tree.flags)
    if not tests:
        return None
    excluded = [ch for ch in map(chr, range(128)) if all(t.fullmatch(ch) for t in tests)]
    if not excluded:
        return None
    gate = "[^" + "".join(re.escape(ch) for ch in excluded) + "]"
    stop = gate
    found = _seq_first(tree, tree.items, tree.flags) if first else None
    if found is not None and not found[1]:
        starts = [ch for ch in map(chr, range(128)) if any(t.fullmatch(ch) for t in found[0])]
        if len(starts) < 128:  # and every character outside ASCII, which the tests were not tried on
            stop += "[" + "".join(re.escape(ch) for ch in starts) + "\\x80-\\U0010ffff]"
    return Gate(re.compile(stop), _lead(gate, pattern))


def _lead(gate: str, pattern: re.Pattern[str]) -> re.Pattern[str] | None:
    """The gate's class (case-sensitive, whatever the pattern's flags), then the pattern, unnumbered: its
    groups and back-references keep their numbers."""
    try:
        return re.compile(f"(?-i:{gate})(?:{pattern.pattern})", pattern.flags)
    except re.error:
        return None


def _seq_first(tree: _Tree, items: list[tuple[Any, Any]], flags: int) -> tuple[list[re.Pattern[str]], bool] | None:
    """Tests of the characters that a match of `items` can begin with, and whether it can be empty (then
    the next item's come too); None when not known (a back-reference)."""
    tests: list[re.Pattern[str]] = []
    for op, av in items:
        name = str(op)
        sub: tuple[list[re.Pattern[str]], bool] | None
        if name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue
        if name in _CHAR_NODES:
            sub = [re.compile(_scoped(flags, tree.char_node(name, av)))], False
        elif name == "SUBPATTERN":
            sub = _seq_first(tree, list(av[3].data), (flags | av[1]) & ~av[2])
        elif name == "ATOMIC_GROUP":
            sub = _seq_first(tree, list(av.data), flags)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            body = _seq_first(tree, list(av[2].data), flags)
            sub = None if body is None else (body[0], body[1] or av[0] == 0)
        elif name == "BRANCH":
            ways = [_seq_first(tree, list(b.data), flags) for b in av[1]]
            sub = None if any(w is None for w in ways) else (
                [t for w in ways if w is not None for t in w[0]], any(w is not None and w[1] for w in ways))
        else:
            return None
        if sub is None:
            return None
        tests += sub[0]
        if not sub[1]:
            return tests, False
    return tests, True


def union_gate(gates: list[Gate]) -> re.Pattern[str] | None:
    """A class that stops wherever one of `gates` does (None: no gate, or one that stops everywhere in
    ASCII). Where it finds no stop in a text, each of those rules can match only at the text's start."""
    excluded = [ch for ch in map(chr, range(128)) if gates and all(g.stop.match(ch) is None for g in gates)]
    return re.compile("[^" + "".join(re.escape(ch) for ch in excluded) + "]") if excluded else None


def max_width(pattern: re.Pattern[str]) -> int:
    """The most characters a match of `pattern` consumes; 0 when it has no bound under 65,536."""
    most = int(_parser.parse(pattern.pattern, pattern.flags).getwidth()[1])
    return most if most < 1 << 16 else 0


def _leading_lookbehinds(tree: _Tree, items: list[tuple[Any, Any]], flags: int) -> list[re.Pattern[str]] | None:
    """One class per way to match `items`: what its leading negative lookbehind excludes right before the
    start. None when some way has none. Other zero-width items before it leave the start where it is."""
    for op, av in items:
        name = str(op)
        if name == "ASSERT_NOT" and av[0] < 0:
            sub = list(av[1].data)
            if len(sub) == 1 and str(sub[0][0]) in _CHAR_NODES:
                return [re.compile(_scoped(flags, tree.char_node(str(sub[0][0]), sub[0][1])))]
            continue
        if name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue
        if name == "SUBPATTERN":
            _group, add, delete, body = av
            return _leading_lookbehinds(tree, list(body.data), (flags | add) & ~delete)
        if name == "BRANCH":
            out: list[re.Pattern[str]] = []
            for branch in av[1]:
                found = _leading_lookbehinds(tree, list(branch.data), flags)
                if found is None:
                    return None
                out += found
            return out
        return None
    return None


def search(regex: re.Pattern[str], gate: Gate | None, text: str, pos: int,
           end: int | None = None) -> re.Match[str] | None:
    """`regex.search(text, pos, end)`; with a `gate` (its `start_gate`), `regex` is tried only where the
    gate lets a match start: at `pos` when it can start there, then right after each gate character, by
    the lead's search. The lead's hit is matched again for the match itself (same pattern, same place,
    same end): only when there is one."""
    end = len(text) if end is None else end
    if gate is None:
        return regex.search(text, pos, end)
    if gate.lead is None:
        return _by_stops(regex, gate.stop, text, pos, end)
    if (pos == 0 or gate.stop.match(text, pos - 1) is not None) and (m := regex.match(text, pos, end)) is not None:
        return m
    hit = gate.lead.search(text, pos, end)
    return None if hit is None else regex.match(text, hit.start() + 1, end)


def _by_stops(regex: re.Pattern[str], gate: re.Pattern[str], text: str, pos: int, end: int) -> re.Match[str] | None:
    """The stops one by one, until they come too densely (then a plain search from there on: no match
    starts before the stop where it takes over, all of them tried)."""
    for tries, start in enumerate(_starts(gate, text, pos, end), 1):
        if (m := regex.match(text, start, end)) is not None:
            return m
        if tries * SPARSE > start - pos + _SLACK:
            return regex.search(text, start, end)
    return None


def _starts(gate: re.Pattern[str], text: str, pos: int, end: int) -> Iterator[int]:
    if pos == 0 or gate.match(text, pos - 1) is not None:
        yield pos
    while (g := gate.search(text, pos, end)) is not None:
        pos = g.start() + 1  # a one-character gate ends there; a two-character one, one further
        yield pos

