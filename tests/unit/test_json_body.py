"""core.json_body: a body's depth bound, walked at once or a bounded number of values per step."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.apis.responses import input_slots
from gateway.core.json_body import (
    MAX_DEPTH,
    BodyError,
    DepthCheck,
    JsonText,
    LiteralSteps,
    copy_containers,
    depth_exceeds,
    encode,
    encoded_size,
    parse_object,
    parse_shallow,
)
from gateway.pipeline.request import LENT_TEXT_DEPTH
from tests.unit.json_literals import literal_of

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


def _containers(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [id(value), *(i for v in value.values() for i in _containers(v))]
    if isinstance(value, list):
        return [id(value), *(i for v in value for i in _containers(v))]
    return []


def test_a_copy_to_the_lent_text_depth_owns_every_container_a_prompt_text_is_masked_in() -> None:
    """WebSocket mode lends its request the objects it keeps for the next turn; input redaction masks the
    copy (`pipeline.request.LENT_TEXT_DEPTH`): every slot `apis.responses.input_slots` finds in the copy is
    an object of the copy's own, and masking them all leaves the lent body as it was."""
    lent = {"model": "m", "instructions": "be brief", "input": [
        {"type": "message", "role": "user", "content": "ticket ACME-1"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "key sk-1"},
                                                         {"type": "input_image", "image_url": {"url": "x"}}]},
        {"type": "function_call_output", "call_id": "c", "output": "done"},
        {"type": "function_call_output", "call_id": "d", "output": [{"type": "input_text", "text": "ok"}]}],
        "tools": [{"type": "function"}]}
    before = copy.deepcopy(lent)
    own = copy_containers(lent, LENT_TEXT_DEPTH)
    slots = input_slots(own)
    assert len(slots) == 5
    lent_ids = set(_containers(lent))
    for obj, key in slots:
        assert id(obj) not in lent_ids, (obj, key)
        obj[key] = "[REDACTED]"
    assert lent == before
    assert own["input"][1]["content"][1]["image_url"] is lent["input"][1]["content"][1]["image_url"]  # past the depth
    string_input = {"model": "m", "input": "hi"}
    copy_containers(string_input, LENT_TEXT_DEPTH)["input"] = "[REDACTED]"
    assert string_input["input"] == "hi"


def test_a_copy_to_a_depth_shares_what_lies_deeper_and_every_string() -> None:
    text = "x" * 100
    value = {"a": [{"b": [text]}]}
    for depth, shared in ((0, value), (1, value["a"]), (2, value["a"][0]), (3, value["a"][0]["b"])):
        copied = copy_containers(value, depth)
        path = [copied, copied["a"], copied["a"][0], copied["a"][0]["b"]][depth]
        assert path is shared, depth
    assert copy_containers(value, 9)["a"][0]["b"][0] is text


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=40), st.integers(1, 9))
def test_a_literal_written_in_slices_is_the_whole_texts(text: str, size: int) -> None:
    """JSON escapes each character on its own: the slices' escapes joined are orjson's of the whole text,
    control characters, quotes, backslashes and characters outside the BMP included."""
    steps = LiteralSteps(text, size)
    taken = 1
    while not steps.step():
        taken += 1
    assert taken == max(1, -(-len(text) // size))
    assert isinstance(steps.result, JsonText) and steps.result == text
    assert steps.result.json == orjson.dumps(text)
    assert encode({"t": steps.result}) == orjson.dumps({"t": text})



_TEXTS = st.text(alphabet="ab\"\\\n\u00e9\U0001f600", max_size=5)
_VALUES = st.recursive(st.none() | st.integers(-9, 9) | _TEXTS | _TEXTS.map(literal_of),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXTS, inner, max_size=3),
                       max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_the_encoded_size_is_the_encodings_length_literals_counted_not_copied(value: Any) -> None:
    assert encoded_size(value) == len(encode(value))
