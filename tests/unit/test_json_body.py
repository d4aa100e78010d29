"""core.json_body: a body's depth bound, walked at once or a bounded number of values per step."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.json_body import MAX_DEPTH, BodyError, DepthCheck, depth_exceeds, parse_object, parse_shallow

JSON = st.recursive(st.none() | st.integers() | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner, max_size=4),
                    max_leaves=60)


def depth(value: Any) -> int:
    """The reference: how deep containers nest (a scalar: 0), recursively."""
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(JSON, st.integers(0, 8), st.integers(1, 7))
def test_a_walk_in_steps_answers_as_the_recursive_reference(value: Any, limit: int, budget: int) -> None:
    check = DepthCheck(value, limit, budget)
    while not check.step():
        pass
    assert check.exceeded == (depth(value) > limit) == depth_exceeds(value, limit)
    assert check.step(), "over stays over"


@pytest.mark.parametrize("wide", [[0] * 10_000, [[] for _ in range(10_000)]], ids=["scalars", "containers"])
def test_each_step_visits_at_most_its_budget_of_values(wide: list[Any]) -> None:
    check = DepthCheck({"w": wide}, MAX_DEPTH, 100)
    steps = 1
    while not check.step():
        steps += 1
    assert not check.exceeded and 10_000 // 100 <= steps <= 10_000 // 100 * 2 + 2


@pytest.mark.parametrize(("nesting", "refused"), [(MAX_DEPTH - 1, False), (MAX_DEPTH, True), (1000, True)])
def test_the_body_bound(nesting: int, refused: bool) -> None:
    raw = b'{"x": ' + b"[" * nesting + b"]" * nesting + b"}"  # the body itself is one level
    if refused:
        with pytest.raises(BodyError):
            parse_object(raw)
    else:
        assert parse_object(raw)["x"] is not None


def test_a_body_with_more_brackets_than_the_container_bound_is_refused_before_parsing() -> None:
    from gateway.core.json_body import CONTAINERS_MESSAGE, MAX_CONTAINERS
    at_bound = b'{"x": [' + b",".join([b"[]"] * (MAX_CONTAINERS - 2)) + b"]}"  # the object, the list, the rest
    assert len(parse_shallow(at_bound)["x"]) == MAX_CONTAINERS - 2
    over = b'{"x": "' + b"{" * MAX_CONTAINERS + b'"}'  # brackets in a string count too: a bound, not a parse
    with pytest.raises(BodyError, match=CONTAINERS_MESSAGE):
        parse_shallow(over)
