"""The cache key: same answer-relevant request -> same key; anything that may change the answer -> new key."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.state.cache_key import cache_key

BASE: dict[str, Any] = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0.2,
}


def test_key_is_a_sha256_hex_digest() -> None:
    assert re.fullmatch(r"[0-9a-f]{64}", cache_key("chat", BASE))


def test_key_order_does_not_matter_at_any_depth() -> None:
    reordered = {
        "temperature": 0.2,
        "messages": [{"content": "hi", "role": "user"}],
        "model": "gpt-4o-mini",
    }
    assert cache_key("chat", reordered) == cache_key("chat", BASE)


@pytest.mark.parametrize(
    "delivery",
    [
        {"stream": True},
        {"stream": True, "stream_options": {"include_usage": True}},
        {"user": "alice"},
        {"metadata": {"trace": "x"}},
    ],
)
def test_delivery_fields_are_ignored(delivery: dict[str, Any]) -> None:
    assert cache_key("chat", {**BASE, **delivery}) == cache_key("chat", BASE)


@pytest.mark.parametrize(
    "change",
    [
        {"model": "gpt-4o"},
        {"messages": [{"role": "user", "content": "hi!"}]},
        {"temperature": 0.3},
        {"top_p": 0.9},
        {"max_tokens": 10},
        {"seed": 7},
        {"stop": ["\n"]},
        {"n": 2},
        {"response_format": {"type": "json_object"}},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"tool_choice": "required"},
        {"reasoning_effort": "high"},  # a field the gateway has no special knowledge of
    ],
)
def test_every_answer_relevant_field_changes_the_key(change: dict[str, Any]) -> None:
    assert cache_key("chat", {**BASE, **change}) != cache_key("chat", BASE)


def test_the_api_is_part_of_the_key() -> None:
    assert cache_key("responses", BASE) != cache_key("chat", BASE)


def test_integral_floats_equal_ints_as_in_json() -> None:
    assert cache_key("chat", {**BASE, "temperature": 1}) == cache_key("chat", {**BASE, "temperature": 1.0})
    assert cache_key("chat", {**BASE, "temperature": 1}) != cache_key("chat", {**BASE, "temperature": True})
    assert cache_key("chat", {**BASE, "max_tokens": 1e300})  # huge floats stay floats, still hashable
