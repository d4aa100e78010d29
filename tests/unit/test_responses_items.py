"""Output item ids (docs/responses-bridge.md, Ownership): which input items name a stored item
(`item_reference`, with or without its `type`), and the output item ids a streamed or whole answer gave
its caller, read off what its stream core keeps (`core.responses.items`, `apis.responses`)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.apis.responses import body_items, referenced, stream_items
from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.items import output_ids, references
from gateway.core.responses.stream import ResponsesStream
from gateway.errors import InvalidRequest
from gateway.providers.convert.responses_pass_through import OpenAIResponsesStreamParser
from tests.responses_scripts import Answer, frame
from tests.unit.reads import pump_reads, splits, the_end


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_a_reference_is_named_by_its_type_or_by_an_id_without_one() -> None:
    """openai's `ItemReference` param: `id` required, `type` optional (`item_reference` or null): an input
    item with an `id` and no `type` is read by OpenAI as a reference too."""
    body = {"input": [
        user("hi"),
        {"type": "item_reference", "id": "msg_typed"},
        {"id": "msg_untyped"},
        {"type": None, "id": "fc_null_type"},
        {"role": "user", "content": "a message without a type"},
        {"type": "function_call", "id": "fc_inline", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "item_reference"},  # no id: named as None, refused by the API's check
        "not an object",
    ]}
    assert references(body) == ["msg_typed", "msg_untyped", "fc_null_type", None]


@pytest.mark.parametrize("value", [None, "a string input", {"type": "item_reference", "id": "x"}])
def test_an_input_that_is_no_list_names_nothing(value: Any) -> None:
    assert references({"input": value}) == []
    assert references({}) == []


def test_the_api_refuses_a_reference_without_a_string_id() -> None:
    assert referenced({"input": [{"type": "item_reference", "id": "msg_1"}]}) == ["msg_1"]
    for bad in ({"type": "item_reference"}, {"type": "item_reference", "id": 7}, {"id": ["msg_1"]}):
        with pytest.raises(InvalidRequest) as info:
            referenced({"input": [user("hi"), bad]})
        assert info.value.param == "input"


def test_output_ids_are_each_once_in_order_strings_only() -> None:
    announced = [{"id": "rs_0", "type": "reasoning"}, {"id": "msg_1"}, {"type": "message"}, {"id": 5}, "x"]
    final = [{"id": "rs_0"}, {"id": "msg_1"}, {"id": "fc_2"}, {"id": ""}]
    assert output_ids(announced, final) == ["rs_0", "msg_1", "fc_2"]
    assert output_ids([], None) == []


def answer() -> Answer:
    return Answer("resp_items", items="x").reasoning(["think"]).message(["Hel", "lo."]).function_call(
        "f", "call_1", ['{"a"', ": 1}"])


def test_a_whole_answer_gives_its_output_items() -> None:
    assert body_items(answer().body()) == ["rs_x0", "msg_x1", "fc_x2"]
    assert body_items({"id": "resp_none", "output": "not a list"}) == []


def test_a_stream_gives_every_item_it_announced_in_any_split() -> None:
    """Read off the assembler's items and the terminal event, once at the end, whatever the reads."""
    body = b"".join(frame(e) for e in answer().stream_events())
    for reads in splits(body)[:: max(1, len(splits(body)) // 40)]:
        stream = ResponsesStream(OpenAIResponsesStreamParser(), "dep")
        filt = ResponsesOutputFilter(None)
        pump_reads(stream, filt, reads, must_commit=True)
        the_end(stream, filt)
        assert stream_items(stream) == ["rs_x0", "msg_x1", "fc_x2"]


def test_a_stream_cut_before_its_end_gives_the_items_announced_so_far() -> None:
    """No terminal event: the items the client was told of (their `output_item.added`) are its own."""
    events = answer().stream_events(end="none")
    cut = next(i for i, e in enumerate(events) if e["type"] == "response.function_call_arguments.delta")
    stream = ResponsesStream(OpenAIResponsesStreamParser(), "dep")
    pump_reads(stream, ResponsesOutputFilter(None), [b"".join(frame(e) for e in events[:cut])], must_commit=True)
    assert stream_items(stream) == ["rs_x0", "msg_x1", "fc_x2"]
