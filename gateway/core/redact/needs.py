"""What every match of a rule's hint needs, checked at memchr speed before the hint is searched.

`re` skips at C speed only to a literal; a hint that begins with a class (`[0-9]`, `[Bb]earer`, the
capitals of IBAN country codes) is scanned at ~5 ns a character where it does not fire, and tried at
every character of the class where it does (~170 ns each): 20-75 µs a 4,096-character run of base64,
minified JSON or `a@b.`, twice a run, the mask's and the cut's (bench/README.md, "Goal 5"). What some
hints need is cheaper to look for: a digit (ten `str.find`s), one of its words (`str.lower` and `in`).
Each need is read from the hint's parse tree or named by its rule, and holds for every match: a text
without it holds none. (A capital is not worth looking for: `str.islower` walks a run at ~4 ns a
character, as `re` scans the IBAN hint's class of capitals.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.core.redact.regex import _Tree, hint_pattern

DIGITS = "0123456789"


@dataclass(frozen=True, slots=True)
class Hint:
    """A rule's own hint (`regex`); `digit`: every match consumes an ASCII digit (`needs_one_of`); `words`
    (lowercase ASCII, `BuiltinRule.words`): one of them, in any case, is in every text it fires in. An ASCII
    text without one is passed over (~2-7 µs a run, where `re` stops at every `b` of it to try "bearer");
    other text is searched (`re` folds case beyond ASCII: U+017F, the long s, matches `s`)."""

    regex: re.Pattern[str]
    words: tuple[str, ...] = ()
    digit: bool = False

    @classmethod
    def of(cls, source: str, words: tuple[str, ...] = ()) -> Hint:
        regex = hint_pattern(source)
        return cls(regex, words, needs_one_of(regex, DIGITS))

    def search(self, text: str, pos: int = 0, end: int | None = None, digits: bool = True) -> re.Match[str] | None:
        """`regex.search(text, pos, end)`; `digits`: whether text[pos:end] may hold a digit (False: the
        caller's `has_digit` found none, looked for once for all the rules of a run)."""
        if self.digit and not digits:
            return None
        end = len(text) if end is None else end
        if self.words:
            # a word can begin before `pos`: a hint's lookbehind looks there (`_late` in core.redact.rules)
            seen = text[max(0, pos - max(map(len, self.words))):end]
            if seen.isascii() and not any(word in seen.lower() for word in self.words):
                return None
        return self.regex.search(text, pos, end)


def has_digit(text: str, pos: int = 0, end: int | None = None) -> bool:
    end = len(text) if end is None else end
    return any(text.find(d, pos, end) >= 0 for d in DIGITS)


def needs_one_of(pattern: re.Pattern[str], chars: str) -> bool:
    """Whether every match of `pattern` consumes one of `chars` (ASCII; a digit: a phone's, a card's, an
    IBAN's hint). What lookarounds look at is not counted (it may lie outside the match), nor is a letter
    matched without regard to case (its other case, or a character beyond ASCII, may match it)."""
    tree = _Tree(pattern)
    return _consumes(list(tree.items), chars, tree.flags)


def _consumes(items: list[tuple[Any, Any]], chars: str, flags: int) -> bool:
    return any(_item_consumes(str(op), av, chars, flags) for op, av in items)


def _item_consumes(name: str, av: Any, chars: str, flags: int) -> bool:
    if name == "LITERAL":
        return _within(av, av, chars, flags)
    if name == "IN":
        return all((str(op) == "LITERAL" and _within(a, a, chars, flags))
                   or (str(op) == "RANGE" and _within(a[0], a[1], chars, flags)) for op, a in av)
    if name == "SUBPATTERN":
        return _consumes(list(av[3].data), chars, (flags | av[1]) & ~av[2])
    if name == "ATOMIC_GROUP":
        return _consumes(list(av.data), chars, flags)
    if name == "BRANCH":
        return all(_consumes(list(b.data), chars, flags) for b in av[1])
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        return bool(av[0] >= 1 and _consumes(list(av[2].data), chars, flags))
    return False  # lookarounds, anchors, back-references, any other character class


def _within(lo: int, hi: int, chars: str, flags: int) -> bool:
    if hi - lo >= len(chars):
        return False
    span = [chr(c) for c in range(lo, hi + 1)]
    if flags & re.IGNORECASE and any(ch.lower() != ch.upper() for ch in span):
        return False
    return all(ch in chars for ch in span)
