r"""Redaction: a profile's rules compiled once, applied one-shot or through a streaming window.

``Redactor.compile`` runs at config load; a ``Redactor`` is immutable and shared by every request.
``Redactor.window()`` makes one ``RedactionWindow`` per (choice, text kind) of a stream. The window
and ``redact()`` are the same machine (see `core.redact.engine`), so the concatenated output of a stream
is exactly the one-shot redaction of its text, however the upstream split it, and a Responses
``response.completed`` object redacted with ``redact()`` carries the same text as its deltas.

What a user can rely on (docs/extensions.md, "Redaction in every script"):

* a match becomes ``[REDACTED:<rule>]``; for the context rules (``bearer_token``,
  ``aws_secret_access_key``) only the secret part is masked: ``Authorization: Bearer [REDACTED:...]``;
* matches are found inside one *segment*: a run, or several runs while a rule that can contain
  whitespace could still match across them (a phone number in groups, a PEM block,
  ``project\s+x`` in a custom rule). Runs end at whitespace and at characters outside ASCII that no
  rule can match (CJK, kana, Hangul, Thai... for ``secrets`` and ``pii``; see `core.redact.breaks`), so
  text without spaces streams. ``^``/``$`` in a custom pattern anchor at the edges of a run, a match
  never spans a gap of more than 64 characters or more than 8192 characters in all, and a run that
  reaches 4096 characters is cut, before a candidate within its last 1024 that could still grow;
* the window holds back only the unfinished run and an open multi-word candidate, never more
  than ``MAX_HELD_CHARS`` characters;
* when two rules match overlapping text, the leftmost match wins, then the longest, then the
  built-in rule order (specific vendor formats before ``bearer_token``), then custom rules.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from gateway.core.redact.checks import Span, has_letter_and_digit
from gateway.core.redact.cuts import may_match
from gateway.core.redact.engine import MAX_HELD_CHARS, ScanSpec, SegmentWindow
from gateway.core.redact.gate import Gate, search, start_gate, union_gate
from gateway.core.redact.needs import Hint, has_digit
from gateway.core.redact.regex import literal_hint
from gateway.core.redact.rules import BUILTIN, expand

COMPILED_KEPT = 8  # compiled profiles kept for reuse (each a few MiB at most): the latest configs' profiles
# A closed segment this long is masked rule by rule (`Redactor.mask`); a shorter one (a word of prose)
# is rejected by one search of `ScanSpec.detect`, cheaper there than a search per rule's hint.
BY_RULE_FROM = 64

__all__ = ["MAX_HELD_CHARS", "RedactionResult", "RedactionWindow", "Redactor", "mask_marker"]


def mask_marker(rule: str) -> str:
    return f"[REDACTED:{rule}]"


@dataclass(frozen=True, slots=True)
class RedactionResult:
    text: str
    counts: Mapping[str, int]  # rule name -> number of masks

    def __init__(self, text: str, counts: Mapping[str, int]) -> None:
        object.__setattr__(self, "text", text)  # frozen, compiled (docs/compiled.md)
        object.__setattr__(self, "counts", counts)


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    regex: re.Pattern[str]
    find: Callable[[re.Match[str]], Iterator[Span]]
    hint: str | None  # None: derived from the pattern (see ScanSpec.build)
    hint_by: int  # see BuiltinRule.hint_by (0: not known)
    # The rule's own hint, given or derived as ScanSpec.build does (None: none known, every
    # segment is searched), and its `start_gate(regex, first=True)` (None: a match may start anywhere).
    fires: Hint | None
    gate: Gate | None


def _whole(m: re.Match[str]) -> Iterator[Span]:
    if m.end() > m.start():
        yield m.span()


def _secret_group(m: re.Match[str]) -> Iterator[Span]:
    yield m.span("s")


def _checked(inner: Callable[[re.Match[str]], Iterator[Span]]) -> Callable[[re.Match[str]], Iterator[Span]]:
    def find(m: re.Match[str]) -> Iterator[Span]:
        text = m.string
        return (s for s in inner(m) if has_letter_and_digit(text[s[0] : s[1]]))

    return find


def _builtin(name: str) -> _Rule:
    rule = BUILTIN[name]
    regex = re.compile(rule.pattern)
    find = rule.refine or (_secret_group if "s" in regex.groupindex else _whole)
    return _Rule(name, regex, _checked(find) if rule.token_check else find, rule.hint, rule.hint_by,
                 Hint.of(rule.hint, rule.words), start_gate(regex, True))


def _custom(name: str, pattern: str) -> _Rule:
    if name in BUILTIN:
        raise ValueError(f'custom redaction rule "{name}" has the name of a built-in rule')
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f'custom redaction rule "{name}": invalid regular expression: {exc.msg}') from None
    hint = literal_hint(regex)
    return _Rule(name, regex, _whole, None, 0, None if hint is None else Hint.of(hint), start_gate(regex, True))


def _at_start(rule: _Rule, segment: str) -> Iterator[Span]:
    """`_find_all` of a rule with a gate, in a segment where its gate stops nowhere: only a match at the
    start is possible (then nothing after it either)."""
    m = rule.regex.match(segment)
    return rule.find(m) if m is not None else iter(())


def _find_all(rule: _Rule, segment: str, gated: bool = False) -> Iterator[Span]:
    """Like finditer, but a candidate that its check rejects or trims does not hide a match that
    starts inside it ("2024 4111 1111 1111 1111": the card starts at the second group). `gated`: the
    rule is tried only where its gate lets a match start (the same matches, see `core.redact.gate`)."""
    gate = rule.gate if gated else None
    pos = 0
    while pos <= len(segment) and (m := search(rule.regex, gate, segment, pos)) is not None:
        end = m.start() + 1
        for span in rule.find(m):
            yield span
            end = max(end, span[1])
        pos = end


@dataclass(frozen=True, slots=True)
class Redactor:
    """A compiled redaction profile. Immutable and safe to share across requests."""

    rules: tuple[_Rule, ...]
    spec: ScanSpec
    by_rule_from: int = BY_RULE_FROM  # see BY_RULE_FROM
    # Stops wherever the gate of some rule does (`union_gate`): a segment of letters and digits, where
    # none stops, leaves each rule with a gate one place to try, the start.
    gates: re.Pattern[str] | None = None

    @classmethod
    def compile(cls, rules: Sequence[str], custom: Sequence[tuple[str, str]]) -> Redactor:
        """`rules`: rule-set or single rule names; `custom`: (name, pattern). Unknown -> ValueError.
        The same rules give the same (immutable) profile: a reload that keeps a profile's rules reuses it
        instead of compiling ~130 patterns again (~40 ms of CPU for `secrets`+`pii`, which a reload's worker
        thread spent holding the GIL half the time while the loop served streams)."""
        return _compiled(tuple(rules), tuple(custom))

    @classmethod
    def _compile(cls, rules: Sequence[str], custom: Sequence[tuple[str, str]]) -> Redactor:
        compiled = [_builtin(r.name) for r in expand(list(rules))]
        names = {r.name for r in compiled}
        for name, pattern in custom:
            if name in names:
                raise ValueError(f'duplicate redaction rule "{name}"')
            names.add(name)
            compiled.append(_custom(name, pattern))
        spec = ScanSpec.build([(r.regex, r.hint) for r in compiled], [r.hint_by for r in compiled],
                              [r.fires.words if r.fires is not None else () for r in compiled])
        gates = union_gate([g for r in compiled if (g := start_gate(r.regex)) is not None])
        return cls(tuple(compiled), spec, gates=gates)

    @property
    def rule_names(self) -> tuple[str, ...]:
        """Every rule name this profile can count (label values for the redactions metric)."""
        return tuple(r.name for r in self.rules)

    def redact(self, text: str) -> RedactionResult:
        """One-shot redaction (non-stream bodies, final objects): equal to any streaming of `text`."""
        window = self.window()
        out = window.push(text) + window.flush()
        return RedactionResult(out, MappingProxyType(window.take_counts()))

    def window(self) -> RedactionWindow:
        return RedactionWindow(self)

    def mask(self, segment: str, counts: dict[str, int]) -> str:
        """Mask every match in one closed segment; leftmost first, then longest, then rule order."""
        spec = self.spec
        # The hints first: much cheaper per character than `detect` (they skip at C speed), which matters
        # for long runs without whitespace (4096 characters: ~0.05 ms against ~0.6 ms in `detect`).
        if spec.detect is None or not may_match(spec.trigger, spec.residual, segment):
            return segment
        spans: list[tuple[int, int, int]] = []
        if len(segment) < self.by_rule_from:
            if spec.detect.search(segment) is None:
                return segment  # one scan instead of one per rule: most closed segments are clean
            for order, rule in enumerate(self.rules):
                spans.extend((a, b, order) for a, b in _find_all(rule, segment))
        else:
            # `detect` tries every rule at every character (~130 ns each) wherever the hints fire, as they
            # do all over digits, hex or base64: a rule whose own hint does not fire cannot match here
            # (its hint lies inside each of its matches), and the others are tried where they can start.
            only_start = self.gates is not None and self.gates.search(segment) is None
            digits = has_digit(segment)  # one look for the rules whose hints need one (phone, card, iban)
            for order, rule in enumerate(self.rules):
                if only_start and rule.gate is not None:
                    spans.extend((a, b, order) for a, b in _at_start(rule, segment))
                elif rule.fires is None or rule.fires.search(segment, digits=digits) is not None:
                    spans.extend((a, b, order) for a, b in _find_all(rule, segment, True))
        if not spans:
            return segment
        spans.sort(key=lambda s: (s[0], s[0] - s[1], s[2]))
        pieces: list[str] = []
        last = 0
        for start, end, order in spans:
            if start < last or start == end:
                continue
            name = self.rules[order].name
            pieces += (segment[last:start], mask_marker(name))
            counts[name] = counts.get(name, 0) + 1
            last = end
        pieces.append(segment[last:])
        return "".join(pieces)


class RedactionWindow(SegmentWindow):
    """The streaming window of one text stream (one choice x one text kind)."""

    __slots__ = ("_counts", "_redactor")

    def __init__(self, redactor: Redactor) -> None:
        super().__init__(redactor.spec)
        self._redactor = redactor
        self._counts: dict[str, int] = {}

    # Feed a delta; return the masked text that is safe to release now ("" if all is held). It is
    # `_feed(text, False)` without the stop check: this window never stops (its `_close` always
    # succeeds), and this runs once per delta of every stream. A method, not `push = SegmentWindow._push`:
    # a compiled class does not bind a method stored as a class attribute (docs/compiled.md).
    def push(self, delta: str) -> str:
        return self._push(delta)

    def flush(self) -> str:
        """End of stream: release everything still held, masked."""
        return self._feed("", True)

    def take_counts(self) -> dict[str, int]:
        """Masks made since the last call, by rule name (for `llm_gateway_redactions_total`)."""
        counts, self._counts = self._counts, {}
        return counts

    def _close(self, segment: str, out: list[str]) -> bool:
        out.append(self._redactor.mask(segment, self._counts))
        return True


@functools.lru_cache(maxsize=COMPILED_KEPT)
def _compiled(rules: tuple[str, ...], custom: tuple[tuple[str, str], ...]) -> Redactor:
    return Redactor._compile(rules, custom)
