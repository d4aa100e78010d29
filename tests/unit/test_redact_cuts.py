"""The forced cut's tail search (`cuts.tail_start`): it tries the rules with a hint bound near the end
and near the first hint only, and finds exactly what trying every rule at every position finds."""

from __future__ import annotations

import random
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.redact.cuts import run_cut, tail_start
from gateway.core.redact.engine import CUT_KEEP, RUN_LIMIT
from gateway.core.redact.regex import prefix_source, sees_only_behind
from gateway.core.redact.rules import BUILTIN
from gateway.core.redact.window import Redactor
from tests.unit.test_redact_window import (
    NEAR_MISSES,
    REDACTOR,
    SECRETS,
    WORDS,
    _deltas,
    forced_slow,
    pushed_in_groups,
)

_PLAIN = Redactor.compile(["secrets", "pii"], [])


def _full_tail(redactor: Redactor) -> re.Pattern[str]:
    """Every rule's prefix form tried at every position: what `tail_start` must find."""
    g = redactor.spec.gaps.cls
    forms = [f for r in redactor.rules if (f := prefix_source(r.regex, g)) is not None]
    return re.compile("(?:" + "|".join(forms) + r")\Z")


_FULL = {id(r): _full_tail(r) for r in (REDACTOR, _PLAIN)}

# Rule starts, hints, long runs without a hint (longer than any bound), and what ends a token.
_PIECES = ["s", "k", "-", "sk-", "sk-ant-", "A", "AKIA", "aws", "secret", "ghp_", "github_pat_", "xoxb-",
           "https://hooks.slack.com/", "AIza", "eyJ", "-----BEGIN ", "Bearer ", "@", "user.name", "+", "(",
           "415", "-555-", "0", "4111", "DE89", "ACME-", "00", ",", ".", ":", '"', "=", "_", "/", " ",
           "theofandto", "a" * 70, "x" * 130, "q1" * 40, "日本語"]


@st.composite
def _texts(draw: st.DrawFn) -> tuple[str, int]:
    parts = draw(st.lists(st.sampled_from(_PIECES) | st.sampled_from([v for _r, v in SECRETS][:40]),
                          min_size=1, max_size=14))
    text = "".join(parts)
    return text, draw(st.integers(0, max(0, len(text) - 1)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_texts(), st.sampled_from([REDACTOR, _PLAIN]))
def test_tail_start_finds_what_every_rule_at_every_position_finds(case: tuple[str, int], redactor: Redactor) -> None:
    text, low = case
    m = _FULL[id(redactor)].search(text, low, len(text))
    assert tail_start(redactor.spec, text, low, len(text)) == (-1 if m is None else m.start()), (text, low)


def test_a_candidate_far_from_the_end_is_found_through_its_hint() -> None:
    text = "x" * 300 + "," + "a" * 40 + "@" + "mail." * 20 + "exa"  # an e-mail still growing at the end
    assert _FULL[id(_PLAIN)].search(text, 200).start() == 301  # type: ignore[union-attr]
    assert tail_start(_PLAIN.spec, text, 200, len(text)) == 301
    assert tail_start(_PLAIN.spec, "x" * 300, 0, 300) == -1  # no hint, nothing near the end


def test_only_builtin_rules_are_bounded() -> None:
    spec = REDACTOR.spec  # the custom rule keeps the search at every position
    assert spec.near is not None and spec.tail is not None and spec.near_chars == 65
    assert _PLAIN.spec.tail is None
    assert all(rule.hint_by > 0 for rule in BUILTIN.values())


_BOUNDED = [(name, rule.hint_by, prefix_source(re.compile(rule.pattern), _PLAIN.spec.gaps.cls))
            for name, rule in BUILTIN.items()]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_every_long_prefix_holds_a_hint_within_the_rules_bound(data: st.DataObject) -> None:
    """`BuiltinRule.hint_by`: whatever a rule's prefix form matches, once longer than the bound, has a
    hint (the factored trigger) that ends within the bound."""
    trigger = _PLAIN.spec.trigger
    assert trigger is not None
    for name, bound, form in _BOUNDED:
        assert form is not None
        prefix = data.draw(st.from_regex(form, fullmatch=True), label=name)
        if len(prefix) > bound:
            assert trigger.search(prefix, 0, bound) is not None, (name, prefix)


_GLUE = ["", "", ",", ":", '"', "=", "/", "."]
_NOSPACE = [w for w in NEAR_MISSES + WORDS if w.isascii() and not any(c.isspace() for c in w)] + ["theofandto" * 50]
_NOSPACE_SECRETS = [v for _r, v in SECRETS if not any(c.isspace() for c in v)]


@st.composite
def _long_runs(draw: st.DrawFn) -> str:
    """Text without whitespace past RUN_LIMIT (cut more than once), secrets and near misses glued in."""
    rnd = random.Random(draw(st.integers(0, 2**32)))
    secret_share = draw(st.sampled_from([0.0, 0.05, 0.3]))
    parts: list[str] = []
    size = rnd.randint(RUN_LIMIT, 3 * RUN_LIMIT)
    while sum(map(len, parts)) < size:
        pool = _NOSPACE_SECRETS if rnd.random() < secret_share else _NOSPACE
        parts += (rnd.choice(pool), rnd.choice(_GLUE))
    return "".join(parts)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_long_runs(), st.lists(st.integers(1, 40), min_size=1, max_size=6), st.lists(st.integers(1, 80), min_size=1,
                                                                                    max_size=4))
def test_a_run_past_the_limit_pushed_together_releases_what_one_by_one_releases(text: str, sizes: list[int],
                                                                                groups: list[int]) -> None:
    """`push_together` holds a run without a gap in one copy up to the limit (`_to_limit`): after every
    group it has released and holds what pushing the deltas one by one does, and the whole is the
    one-shot redaction."""
    assert pushed_in_groups(_deltas(text, sizes), groups) == REDACTOR.redact(text).text
    assert REDACTOR.redact(text).text == forced_slow(REDACTOR).redact(text).text


def test_one_search_for_hints_tells_the_cut_and_whether_the_run_needs_masking() -> None:
    spec = _PLAIN.spec
    assert spec.clean_scan
    text = "theofandto" * 410
    assert run_cut(spec, text, 0, 0, RUN_LIMIT, CUT_KEEP) == (RUN_LIMIT, True)
    dirty = "x@y.example," + text
    assert run_cut(spec, dirty, 0, 0, RUN_LIMIT, CUT_KEEP)[1] is False
    # A custom rule without a hint (a residual form) can match anywhere: never known clean.
    assert not Redactor.compile(["secrets"], [("caps", "[A-Z]{12}")]).spec.clean_scan


def test_sees_only_behind() -> None:
    assert sees_only_behind(re.compile(r"k-(?<=sk-)|A(?:KIA|SIA)|[bB](?i:earer)"))
    for pattern in (r"a(?=b)", r"(?<!x)a", r"\ba", r"a$", r"(a)\1", r"(?:a(?!b))+"):
        assert not sees_only_behind(re.compile(pattern)), pattern
