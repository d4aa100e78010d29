"""Regular-expression surgery for the streaming windows.

Python's `re` cannot tell whether a piece of text is the *beginning* of a match (no partial
matching), and a streaming window needs exactly that to know what it may release. So we rewrite
each rule's pattern from its parse tree (the stdlib's own `re._parser`, pinned by Python 3.11+)
into two derived patterns:

* ``detect_source``: a *superset* of the pattern that behaves the same whether a whitespace-free
  run is scanned alone or inside a longer text: anchors become whitespace lookarounds and
  lookarounds that could look at whitespace are dropped. One search of the alternation of these
  over a whole region proves that no run in it holds a match.
* ``prefix_source``: the language of all non-empty prefixes of matches (P1). Anchored at the end
  of the held text it answers "could a match that starts here still grow?". Lookaheads are
  dropped (they may need text not yet seen), lookbehinds and ``\\b`` are kept (they only look at
  text already seen).

Both are over-approximations; the windows use them only to decide what to hold back, never to
decide what a match is, so an imprecise rewrite costs latency, not correctness.
"""

from __future__ import annotations

import functools
import importlib
import re
from typing import Any

_parser: Any = importlib.import_module("re._parser")
_c: Any = importlib.import_module("re._constants")

# Every code point for which `str.isspace()` (and the `\s` of a str pattern) is true.
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)

_DETECT, _PREFIX = 0, 1
_GROUPREFS = ("GROUPREF", "GROUPREF_EXISTS")
_NOT_PLAIN = ("AT", "ASSERT", "ASSERT_NOT", *_GROUPREFS)
_NOT_BEHIND = ("AT", "ASSERT_NOT", *_GROUPREFS)
_FLAG_LETTERS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"), (re.ASCII, "a"))
_CATEGORIES = {
    "CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W",
}
# Anchors: the start and end of a run look like these to a scan of the region, where `{g}` is the
# body of the class of gap characters (whitespace, and the characters no rule can match).
_AT_DETECT = {
    "AT_BEGINNING": r"(?<![^{g}])", "AT_BEGINNING_STRING": r"(?<![^{g}])", "AT_END": r"(?![^{g}])",
    "AT_END_STRING": r"(?![^{g}])", "AT_BOUNDARY": r"\b", "AT_NON_BOUNDARY": r"\B",
}


def _flag_prefix(add: int, delete: int = 0) -> str:
    on = "".join(letter for bit, letter in _FLAG_LETTERS if add & bit)
    off = "".join(letter for bit, letter in _FLAG_LETTERS[:3] if delete & bit)
    return on + ("-" + off if off else "")


def _scoped(flags: int, body: str, delete: int = 0) -> str:
    letters = _flag_prefix(flags, delete)
    return f"(?{letters}:{body})" if letters else f"(?:{body})"


def _char(code: int) -> str:
    return re.escape(chr(code))


def _in_class(items: list[tuple[Any, Any]]) -> str:
    parts: list[str] = []
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            parts.insert(0, "^")
        elif name == "LITERAL":
            parts.append(_char(av))
        elif name == "RANGE":
            parts.append(f"{_char(av[0])}-{_char(av[1])}")
        elif name == "CATEGORY":
            parts.append(_CATEGORIES[str(av)])
        else:
            raise ValueError(f"unsupported character-class item {name}")
    return "[" + "".join(parts) + "]"


def _quantifier(lo: int, hi: int, lazy: bool) -> str:
    top = "" if hi == _c.MAXREPEAT else str(hi)
    text = f"{{{lo},{top}}}" if top != str(lo) else f"{{{lo}}}"
    return text + ("?" if lazy else "")


class _Tree:
    """One parsed pattern, serialisable in the two rewritten forms."""

    def __init__(self, pattern: re.Pattern[str], gap: str = r"\s") -> None:
        self.gap = gap
        parsed = _parser.parse(pattern.pattern, pattern.flags)
        self.flags = int(parsed.state.flags) & ~(re.VERBOSE | re.UNICODE | re.DEBUG)
        self.items: list[tuple[Any, Any]] = list(parsed.data)

    # -- plain serialisation (detect mode, or the consumed part of a prefix) --------------------

    def seq(self, items: list[tuple[Any, Any]], mode: int, flags: int) -> str:
        return "".join(self.item(op, av, mode, flags) for op, av in items)

    def item(self, op: Any, av: Any, mode: int, flags: int) -> str:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
            return self.char_node(name, av)
        if name == "BRANCH":
            return "(?:" + "|".join(self.seq(list(b.data), mode, flags) for b in av[1]) + ")"
        if name == "SUBPATTERN":
            _group, add, delete, sub = av
            return _scoped(add, self.seq(list(sub.data), mode, (flags | add) & ~delete), delete)
        # A possessive repeat or an atomic group of plain items stays one in detect mode: it takes what the
        # pattern's does (the same items on the same text), and a failed try does not backtrack through it.
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = av
            keep = name == "POSSESSIVE_REPEAT" and mode == _DETECT and _plain(list(sub.data))
            body = self.seq(list(sub.data), mode, flags)
            return f"(?:{body})" + _quantifier(lo, hi, name == "MIN_REPEAT") + ("+" if keep else "")
        if name == "ATOMIC_GROUP":
            keep = mode == _DETECT and _plain(list(av.data))
            return ("(?>" if keep else "(?:") + self.seq(list(av.data), mode, flags) + ")"
        if name == "AT":
            return _AT_DETECT[str(av)].replace("{g}", self.gap)
        if name in ("ASSERT", "ASSERT_NOT"):
            return self.assertion(name, av, mode, flags)
        if name == "GROUPREF":
            return "(?s:.*?)"  # what a back-reference repeats is unknown here: anything
        if name == "GROUPREF_EXISTS":
            _group, yes, no = av
            alts = [self.seq(list(yes.data), mode, flags)]
            alts.append(self.seq(list(no.data), mode, flags) if no is not None else "")
            return "(?:" + "|".join(alts) + ")"
        raise ValueError(f"unsupported regular-expression construct {name}")

    def char_node(self, name: str, av: Any) -> str:
        if name == "LITERAL":
            return _char(av)
        if name == "NOT_LITERAL":
            return "[^" + _char(av) + "]"
        if name == "ANY":
            return "."
        return _in_class(list(av))

    def assertion(self, name: str, av: Any, mode: int, flags: int) -> str:
        direction, sub = av
        items = list(sub.data)
        # A lookahead in the consumed part of a prefix may need text that has not arrived.
        if mode == _PREFIX and direction == 1:
            return ""
        # Whitespace-sensitive or back-referencing lookarounds differ between a run scanned alone
        # and the same run inside a region: drop them (a superset is all the windows need).
        if _can_match_ws(self, items, flags) or _has_groupref(items):
            return ""
        body = self.seq(items, mode, flags)
        head = ("(?=" if direction == 1 else "(?<=") if name == "ASSERT" else (
            "(?!" if direction == 1 else "(?<!")
        return head + body + ")"

    # -- non-empty prefixes ---------------------------------------------------------------------

    def prefix_seq(self, items: list[tuple[Any, Any]], flags: int) -> str | None:
        """P1(x1 rest) = P1(x1) | x1 P1(rest), right-nested so the size stays linear."""
        if not items:
            return None
        run = 0
        while run < len(items) and str(items[run][0]) == "LITERAL":
            run += 1
        if run:
            text = "".join(chr(av) for _op, av in items[:run])
            head_full = re.escape(text)
            head_p1: str | None = "|".join(re.escape(text[:i]) for i in range(len(text), 0, -1))
            rest = items[run:]
        else:
            op, av = items[0]
            head_full = self.item(op, av, _PREFIX, flags)
            head_p1 = self.prefix_item(op, av, flags)
            rest = items[1:]
        rest_p1 = self.prefix_seq(rest, flags)
        alts = [head_p1] if head_p1 is not None else []
        if rest_p1 is not None:
            alts.append(f"{head_full}(?:{rest_p1})")
        return "(?:" + "|".join(alts) + ")" if alts else None

    def prefix_item(self, op: Any, av: Any, flags: int) -> str | None:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
            return self.char_node(name, av)
        if name == "BRANCH":
            alts = [p for b in av[1] if (p := self.prefix_seq(list(b.data), flags)) is not None]
            return "(?:" + "|".join(alts) + ")" if alts else None
        if name == "SUBPATTERN":
            _group, add, delete, sub = av
            inner = self.prefix_seq(list(sub.data), (flags | add) & ~delete)
            return None if inner is None else _scoped(add, inner, delete)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            return self.prefix_repeat(av, flags)
        if name == "ATOMIC_GROUP":
            return self.prefix_seq(list(av.data), flags)
        if name in ("AT", "ASSERT", "ASSERT_NOT"):
            return None  # zero width: no non-empty prefix of its own
        if name == "GROUPREF":
            return "(?s:.+)"
        if name == "GROUPREF_EXISTS":
            _group, yes, no = av
            alts = [p for s in (yes, no) if s is not None and (p := self.prefix_seq(list(s.data), flags))]
            return "(?:" + "|".join(alts) + ")" if alts else None
        raise ValueError(f"unsupported regular-expression construct {name}")

    def prefix_repeat(self, av: Any, flags: int) -> str | None:
        _lo, hi, sub = av
        inner = self.prefix_seq(list(sub.data), flags)
        if inner is None or hi == 0:
            return None
        if hi == 1:
            return inner
        full = self.seq(list(sub.data), _PREFIX, flags)
        return f"(?:{full}){_quantifier(0, hi if hi == _c.MAXREPEAT else hi - 1, False)}(?:{inner})"


def _char_matches_ws(tree: _Tree, name: str, av: Any, flags: int) -> bool:
    if name == "LITERAL":
        return chr(av).isspace()  # case folding never turns a letter into whitespace
    if name == "NOT_LITERAL":
        return True
    node = re.compile(_scoped(flags, tree.char_node(name, av)))
    return any(node.fullmatch(ch) for ch in WHITESPACE)


def _can_match_ws(tree: _Tree, items: list[tuple[Any, Any]], flags: int) -> bool:
    """True when some character-consuming node (outside lookarounds) can consume whitespace."""
    for op, av in items:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
            if _char_matches_ws(tree, name, av, flags):
                return True
        elif name == "BRANCH":
            if any(_can_match_ws(tree, list(b.data), flags) for b in av[1]):
                return True
        elif name == "SUBPATTERN":
            if _can_match_ws(tree, list(av[3].data), (flags | av[1]) & ~av[2]):
                return True
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            if av[1] > 0 and _can_match_ws(tree, list(av[2].data), flags):
                return True
        elif name == "ATOMIC_GROUP":
            if _can_match_ws(tree, list(av.data), flags):
                return True
        elif name in ("GROUPREF", "GROUPREF_EXISTS"):
            return True  # unknown text: assume the worst
    return False


def _plain(items: list[tuple[Any, Any]]) -> bool:
    """No lookaround, anchor or back-reference in `items`: their detect form is the pattern's own."""
    return all(str(op) not in _NOT_PLAIN and all(_plain(list(s.data)) for s in _subs(str(op), av)) for op, av in items)


def _has_groupref(items: list[tuple[Any, Any]]) -> bool:
    return any(str(op) in _GROUPREFS or any(_has_groupref(list(s.data)) for s in _subs(str(op), av))
               for op, av in items)


def _subs(name: str, av: Any) -> list[Any]:
    """The sub-patterns of a parse-tree node (branches, group bodies, repeated and asserted parts)."""
    if name == "BRANCH":
        return list(av[1])
    if name == "SUBPATTERN":
        return [av[3]]
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        return [av[2]]
    if name in ("ASSERT", "ASSERT_NOT"):
        return [av[1]]
    return [av] if name == "ATOMIC_GROUP" else []


def sees_only_behind(pattern: re.Pattern[str]) -> bool:
    """True when whether `pattern` matches at a position depends only on what it consumes and on
    positive lookbehinds: no lookahead, negative lookbehind, anchor or boundary. Then a search over a
    range that finds nothing also finds nothing in any slice of that range."""
    return _only_behind(list(_parser.parse(pattern.pattern, pattern.flags).data))


def _only_behind(items: list[tuple[Any, Any]]) -> bool:
    return not any(str(op) in _NOT_BEHIND or (str(op) == "ASSERT" and av[0] == 1)
                   or not all(_only_behind(list(sub.data)) for sub in _subs(str(op), av)) for op, av in items)


def detect_source(pattern: re.Pattern[str], gap: str = r"\s") -> str:
    """A superset of `pattern` that finds the same matches in a run alone or inside a region;
    `gap`: the body of the class of characters that end a run."""
    tree = _Tree(pattern, gap)
    return _scoped(tree.flags, tree.seq(tree.items, _DETECT, tree.flags))


def prefix_source(pattern: re.Pattern[str], gap: str = r"\s") -> str | None:
    """Every non-empty prefix of a match of `pattern`, or None when it only matches ''."""
    tree = _Tree(pattern, gap)
    body = tree.prefix_seq(tree.items, tree.flags)
    return None if body is None else _scoped(tree.flags, body)


def spans_whitespace(pattern: re.Pattern[str]) -> bool:
    """True when a match of `pattern` may contain whitespace, i.e. may span several words."""
    tree = _Tree(pattern)
    return _can_match_ws(tree, tree.items, tree.flags)


def literal_hint(pattern: re.Pattern[str]) -> str | None:
    """A hint for a pattern: its leading literal text up to the first whitespace.

    Any match, and any partial match that goes on into whitespace, contains that text inside its
    first word, which is all the fast path needs. None when the pattern starts otherwise.
    """
    tree = _Tree(pattern)
    items = tree.items
    while items and str(items[0][0]) in ("AT", "ASSERT", "ASSERT_NOT"):
        items = items[1:]  # zero-width: dropping it only widens the hint
    text = ""
    for op, av in items:
        if str(op) != "LITERAL" or chr(av).isspace():
            break
        text += chr(av)
    return None if not text else re.escape(text) if not tree.flags & re.IGNORECASE else caseless(text)


@functools.cache
def _case_variants(ch: str) -> str:
    """Every character that `(?i)` matches with `ch` (e.g. "s" also matches U+017F)."""
    global _BMP
    if not _BMP:  # no astral character folds to a BMP one; tests check this
        _BMP = "".join(map(chr, range(0x10000)))
    folded = re.compile(re.escape(ch), re.IGNORECASE)
    found = dict.fromkeys(m.group() for m in folded.finditer(_BMP))
    # An astral character's variants are astral too: its own lower/upper/title forms.
    found.update((v, None) for v in (ch, ch.lower(), ch.upper(), ch.title()) if len(v) == 1 and folded.fullmatch(v))
    return "".join(found)


_BMP = ""


def caseless(text: str) -> str:
    """A factorable hint for a case-insensitive literal: first character as a class of all its
    case variants (literal branches let `re` skip ahead at C speed), the rest under (?i)."""
    first = "[" + "".join(re.escape(c) for c in _case_variants(text[0])) + "]"
    return first + (f"(?i:{re.escape(text[1:])})" if text[1:] else "")


def _first_chars(op: Any, av: Any) -> list[str] | None:
    name = str(op)
    if name == "LITERAL":
        return [chr(av)]
    if name != "IN":
        return None
    chars: list[str] = []
    for item_op, item_av in av:
        if str(item_op) == "LITERAL":
            chars.append(chr(item_av))
        elif str(item_op) == "RANGE" and item_av[1] - item_av[0] < 64:
            chars.extend(chr(c) for c in range(item_av[0], item_av[1] + 1))
        else:
            return None
    return chars


def hint_pattern(hint: str) -> re.Pattern[str]:
    """One rule's hint as the trigger has it (`factor_hints`): every branch starts with a literal, so a
    search skips at C speed where it cannot fire, as it does over most segments."""
    return re.compile(factor_hints([hint]))


def factor_hints(hints: list[str]) -> str:
    """Merge hints into one alternation whose every branch starts with a distinct literal.

    For such a pattern `re` computes the set of possible first characters and skips every other
    position at C speed: the one search per region then costs about as much as a `str.find`.
    Each hint's top-level alternatives must start with a literal or a small character class.
    """
    by_char: dict[str, list[str]] = {}
    for hint in hints:
        tree = _Tree(re.compile(hint))
        if tree.flags:
            raise ValueError(f"hint {hint!r} must not set global flags")
        alternatives = [list(b.data) for b in tree.items[0][1][1]] if (
            len(tree.items) == 1 and str(tree.items[0][0]) == "BRANCH") else [tree.items]
        for alt in alternatives:
            chars = _first_chars(*alt[0]) if alt else None
            if chars is None:
                raise ValueError(f"hint {hint!r}: every alternative must start with a literal")
            rest = tree.seq(alt[1:], _DETECT, 0)
            for ch in chars:
                by_char.setdefault(ch, []).append(rest)
    branches = []
    for ch, rests in by_char.items():
        body = "" if "" in rests else "(?:" + "|".join(dict.fromkeys(rests)) + ")"
        branches.append(re.escape(ch) + body)
    return "|".join(branches)
