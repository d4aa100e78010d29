"""Model aliases (CONTRACT §10): the glob matcher against the standard library's, the overlap check against
a brute-force search, and what a config with aliases compiles to or is refused with."""

from __future__ import annotations

import fnmatch
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import ConfigError, parse_config
from gateway.config.aliases import MAX_MATCHED, glob_match, globs_overlap

# a small alphabet makes matches and near-misses likely
GLOBS = st.text(alphabet="ab-*?", max_size=8)
NAMES = st.text(alphabet="ab-c", max_size=12)


@settings(max_examples=400, derandomize=True)
@given(GLOBS, NAMES)
def test_glob_match_agrees_with_fnmatch(pattern: str, name: str) -> None:
    """fnmatch's `*` and `?` are ours; our aliases have no `[`, its only other special character."""
    assert glob_match(pattern, name) == fnmatch.fnmatchcase(name, pattern)


def _brute_overlap(a: str, b: str, length: int) -> bool:
    """Some name of at most `length` characters from both globs' literals and one other matches both."""
    alphabet = sorted({c for c in a + b if c not in "*?"} | {"x"})
    return any(glob_match(a, w) and glob_match(b, w)
               for n in range(length + 1) for w in map("".join, itertools.product(alphabet, repeat=n)))


@settings(max_examples=300, derandomize=True)
@given(st.text(alphabet="ab*?", max_size=4), st.text(alphabet="ab*?", max_size=4))
def test_overlap_agrees_with_a_brute_force_search(a: str, b: str) -> None:
    """A shortest common name of two globs of n and m characters is at most n + m long."""
    assert globs_overlap(a, b) == _brute_overlap(a, b, len(a) + len(b))


@pytest.mark.parametrize(("a", "b", "overlap"), [
    ("claude-sonnet-*", "claude-opus-*", False),
    ("claude-*", "claude-sonnet-*", True),
    ("*-mini", "gpt-4o*", True),  # gpt-4o-mini
    ("gpt-4o-mini-??", "gpt-4o-mini-*-eu", False),  # 2 characters cannot hold "-eu"
    ("gpt-4o-mini-???", "gpt-4o-mini-*-eu", True),
    ("*-latest", "claude-sonnet-*", True),  # claude-sonnet--latest
    ("*", "anything", True),
])
def test_overlap_examples(a: str, b: str, overlap: bool) -> None:
    assert globs_overlap(a, b) is overlap and globs_overlap(b, a) is overlap


def test_a_long_name_is_matched_in_linear_time_and_not_against_globs_past_the_cap() -> None:
    assert glob_match("*a*a*a*a*a*b", "a" * 200) is False  # the two-pointer walk: no backtracking blow-up
    config = parse_config(_raw(("sonnet", ["claude-*"])), env={})
    assert config.resolve_model("claude-" + "x" * (MAX_MATCHED - 7)) is not None
    assert config.resolve_model("claude-" + "x" * MAX_MATCHED) is None


def _raw(*models: tuple[str, list[str]], keys: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    auth: dict[str, Any] = {"keys": keys} if keys else {"allow_unauthenticated": True}
    return {"auth": auth, "providers": {"p": {"type": "mock"}},
            "models": [{"name": n, "aliases": a, "deployments": [{"provider": "p", "model": "x"}]}
                       for n, a in models]}


def _errors(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, env={})
    return info.value.errors


def test_exact_names_win_over_globs_and_globs_reach_their_model() -> None:
    config = parse_config(_raw(("sonnet", ["claude-sonnet-*", "claude-3-7-sonnet-20250219"]),
                               ("haiku", ["claude-haiku-*", "claude-sonnet-4-0-legacy"]),
                               ("any", ["gpt-*-latest"])), env={})
    names = {n: m.name if (m := config.resolve_model(n)) else None for n in (
        "sonnet", "claude-sonnet-4-5-20250929", "claude-3-7-sonnet-20250219", "claude-sonnet-4-0-legacy",
        "claude-haiku-4-5", "gpt-5-latest", "claude-opus-4", "claude-sonnet-")}
    assert names == {"sonnet": "sonnet", "claude-sonnet-4-5-20250929": "sonnet",
                     "claude-3-7-sonnet-20250219": "sonnet",
                     "claude-sonnet-4-0-legacy": "haiku",  # exact beats sonnet's glob
                     "claude-haiku-4-5": "haiku", "gpt-5-latest": "any", "claude-opus-4": None,
                     "claude-sonnet-": "sonnet"}  # `*` matches nothing too


def test_overlapping_names_are_refused_at_load_with_both_paths() -> None:
    found = _errors(_raw(("a", ["claude-*", "same"]), ("b", ["claude-sonnet-*", "same", "a"])))
    assert found == [
        'models[1].aliases[0]: glob "claude-sonnet-*" overlaps "claude-*" of model "a" (models[0].aliases[0]): '
        "a name could match both",
        'models[1].aliases[1]: "same" is already a name of model "a" (models[0].aliases[1])',
        'models[1].aliases[2]: "a" is already a name of model "a" (models[0].name)',
    ]


def test_a_model_may_repeat_its_own_names_and_overlap_its_own_globs() -> None:
    config = parse_config(_raw(("a", ["a", "x-*", "x-y*", "b", "b"])), env={})
    assert config.resolve_model("x-yz") is config.models["a"]


@pytest.mark.parametrize("alias", ["", "has space", "claude-[0-9]", "x" * 129, "ünïcode"])
def test_a_malformed_alias_is_refused(alias: str) -> None:
    assert _errors(_raw(("a", [alias]))) == [
        "models[0].aliases[0]: must be letters, digits, _ . : - / @, with * or ? for a glob (max 128)"]


def test_a_keys_model_list_names_models_and_an_alias_there_says_so() -> None:
    """A key's list grants whole models, every name of them; an alias in it would suggest it grants one
    name only, so it is refused with the model to list instead."""
    keys = [{"name": "k", "key": "sk-1", "models": ["sonnet", "claude-sonnet-4-5", "nope"]}]
    assert _errors(_raw(("sonnet", ["claude-sonnet-*"]), keys=keys)) == [
        'auth.keys[0].models[1]: "claude-sonnet-4-5" is an alias of model "sonnet": list the model\'s name',
        'auth.keys[0].models[2]: unknown model "nope"']


def test_affinity_is_off_or_session() -> None:
    raw = _raw(("a", []))
    raw["models"][0]["affinity"] = "session"
    assert parse_config(raw, env={}).models["a"].affinity == "session"
    raw["models"][0]["affinity"] = "sticky"
    assert _errors(raw) == ['models[0].affinity: must be one of off, session, got "sticky"']
