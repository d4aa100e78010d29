r"""Run boundaries: whitespace, and the characters that no rule can match.

A window holds a run of text back until it ends, because a rule could match across it. Scripts
written without spaces (Japanese, Chinese, Thai) would then be held a whole line at a time, yet no
rule of ``secrets`` or ``pii`` can contain one of their characters. So the characters that no rule
can match end a run like whitespace does. They are derived from the compiled rules themselves, by
testing every character against every character test of every rule (what a rule consumes, and
what its lookarounds and ``\b`` look at): a character that none of them matches can never be part
of a match, nor change whether a match next to it holds, so cutting there changes no match. A
custom rule that can match such a character (a term in Japanese, a ``.``) keeps it inside runs.

Only characters outside ASCII are candidates: ASCII punctuation keeps today's runs, and the
per-delta path decides with one C-speed ``str.isascii()`` that a delta holds no such boundary.
"""

from __future__ import annotations

import array
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.redact.regex import _scoped, _Tree


def inspected_chars(pattern: re.Pattern[str]) -> list[str] | None:
    """One regex per character test in `pattern` (consumed, or looked at by a lookaround or by
    ``\\b``), each under its flags. None when any character could matter (a back-reference)."""
    tree = _Tree(pattern)
    out: list[str] = []
    return out if _collect(tree, tree.items, tree.flags, out) else None


def _collect(tree: _Tree, items: list[tuple[Any, Any]], flags: int, out: list[str]) -> bool:
    for op, av in items:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
            if not _ascii_only(name, av, flags):
                test = _scoped(flags, tree.char_node(name, av))
                out.append(_FOLDED + test if _ascii_only(name, av, 0) else test)
        elif name in ("GROUPREF", "GROUPREF_EXISTS"):
            return False
        elif name == "AT" and str(av) in ("AT_BOUNDARY", "AT_NON_BOUNDARY"):
            out.append(_scoped(flags, r"\w"))
        else:
            subs: list[tuple[Any, int]] = []
            if name == "BRANCH":
                subs = [(b, flags) for b in av[1]]
            elif name == "SUBPATTERN":
                subs = [(av[3], (flags | av[1]) & ~av[2])]
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                subs = [(av[2], flags)]
            elif name in ("ASSERT", "ASSERT_NOT"):
                subs = [(av[1], flags)]
            elif name == "ATOMIC_GROUP":
                subs = [(av, flags)]
            if not all(_collect(tree, list(sub.data), f, out) for sub, f in subs):
                return False
    return True


# Marks a test of ASCII characters under IGNORECASE (`(?i:k)`): the only characters outside ASCII it can
# match are those that case-match some ASCII character (the Kelvin sign, the long s, the dotted I...),
# a few found by one scan, so it is tried on those alone (tests/unit/test_redact_rules.py checks this
# against the full scan for every ASCII character).
_FOLDED = "\0folded:"


def _ascii_only(name: str, av: Any, flags: int) -> bool:
    """A test that matches no character outside ASCII, plainly (most of them: skip the pass)."""
    if flags & re.IGNORECASE:
        return False  # "k" also matches the Kelvin sign, "s" the long s
    if name == "LITERAL":
        return int(av) < 0x80
    if name != "IN":
        return False
    return all((str(op) == "LITERAL" and v < 0x80) or (str(op) == "RANGE" and v[1] < 0x80) for op, v in av)


@functools.cache
def _non_ascii() -> str:
    """Every code point from U+0080 up, surrogates included, as one string: built from its UTF-32 form
    (4.4 MB), not from a million one-character strings (which peaked at ~90 MB while joined)."""
    return array.array("I", range(0x80, 0x110000)).tobytes().decode("utf-32-le", "surrogatepass")


@functools.cache
def _ascii_partners() -> tuple[str, tuple[int, ...]]:
    """The characters outside ASCII that some ASCII character matches under IGNORECASE, and their
    code points."""
    found = [m.start() + 0x80 for m in re.finditer(r"(?i:[\x00-\x7f])", _non_ascii())]
    return "".join(map(chr, found)), tuple(found)


@functools.cache
def _matched(test: str) -> tuple[tuple[int, int], ...]:
    """The code point ranges [a, b) outside ASCII that `test` matches (cached: rule sets share
    most tests, and one pass over the million code points takes a few milliseconds)."""
    if test.startswith(_FOLDED):
        text, points = _ascii_partners()
        return tuple((points[m.start()], points[m.start()] + 1) for m in re.finditer(test[len(_FOLDED):], text))
    return tuple((m.start() + 0x80, m.end() + 0x80) for m in re.finditer(f"(?:{test})+", _non_ascii()))


@functools.cache
def _break_class(tests: tuple[str, ...]) -> str:
    """The class body of the non-ASCII, non-whitespace characters that no test matches ("" if none)."""
    ranges: list[str] = []
    low = 0x80
    for a, b in sorted(r for t in (r"\s", *tests) for r in _matched(t)):
        if a > low:
            ranges.append(_range(low, a - 1))
        low = max(low, b)
    if low < 0x110000:
        ranges.append(_range(low, 0x10FFFF))
    return "".join(ranges)


def _range(a: int, b: int) -> str:
    return f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}"


def break_class(patterns: Sequence[re.Pattern[str]]) -> str:
    """The class body of the characters that end a run for these rules, besides whitespace."""
    tests: dict[str, None] = {}
    for p in patterns:
        found = inspected_chars(p)
        if found is None:
            return ""
        tests.update(dict.fromkeys(found))
    try:
        return _break_class(tuple(tests))
    finally:
        _non_ascii.cache_clear()  # 4 MB of code points: only while a profile compiles


@dataclass(frozen=True, slots=True)
class Gaps:
    """The characters between runs (whitespace, and `breaks`) and the searches the windows make."""

    cls: str  # class body: r"\s" plus the break characters
    breaks: bool  # some character besides whitespace ends a run
    one: re.Pattern[str]  # one gap character
    unit: re.Pattern[str]  # a run of at most `run_limit` characters, or a gap
    long_run: re.Pattern[str]  # a run of `run_limit` characters
    last: re.Pattern[str]  # the last gap character of a text

    @classmethod
    def build(cls, patterns: Sequence[re.Pattern[str]], run_limit: int) -> Gaps:
        return cls.of(break_class(patterns), run_limit)

    @classmethod
    def of(cls, extra: str, run_limit: int) -> Gaps:
        """Whitespace and the characters of the class body `extra` ("": whitespace alone)."""
        g = r"\s" + extra
        return cls(g, bool(extra), re.compile(f"[{g}]"), re.compile(f"[^{g}]{{1,{run_limit}}}|[{g}]+"),
                   re.compile(f"[^{g}]{{{run_limit}}}"), re.compile(f"[{g}](?=[^{g}]*\\Z)"))

    def is_gap(self, ch: str) -> bool:
        return ch.isspace() or (self.breaks and not ch.isascii() and self.one.match(ch) is not None)

    def tail_start(self, text: str) -> int:
        """Where the unfinished run at the end of `text` starts (len(text) when it ends in a gap)."""
        if not text or text[-1].isspace():
            return len(text)
        rest = text.rsplit(None, 1)[-1]
        start = len(text) - len(rest)
        if self.breaks and not rest.isascii() and (m := self.last.search(text, start)) is not None:
            return m.end()
        return start

    def unit_start(self, text: str, i: int, low: int) -> int:
        """The start of the unit (run or gap) that holds text[i], not before `low`."""
        gap = self.is_gap(text[i])
        if not gap and i > low and not text[i - 1].isspace():
            # Back to the last whitespace at C speed (a run may be thousands of characters long);
            # a break character can only be in a piece outside ASCII.
            run = text[low:i].rsplit(None, 1)[-1]
            if not self.breaks or run.isascii():
                return i - len(run)
        while i > low and self.is_gap(text[i - 1]) == gap:
            i -= 1
        return i

    def runs(self, text: str, start: int, end: int) -> int:
        """How many runs text[start:end] holds (at most a few hundred: a segment's)."""
        return sum(not self.is_gap(text[m.start()]) for m in self.unit.finditer(text, start, end))
