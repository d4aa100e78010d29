"""`InputMemo`: a conversation whose requests send the same item objects again with new ones after them
(WebSocket mode) translates only the new ones, to the very messages a fresh translation gives, and
never changes what it gave an earlier request (a later call is merged into the last assistant message
of a copy)."""

from __future__ import annotations

import contextvars
import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.providers.convert.responses_chat_request import INPUT_MEMO, InputMemo, chat_body

MARK = {"type": "ephemeral"}
_TEXT = st.sampled_from(["hi", "so", ""])
_PART = st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text", "refusal", "other"]),
                               "text": _TEXT}, optional={"cache_control": st.just(MARK)})
_MESSAGE = st.fixed_dictionaries(
    {"type": st.just("message"), "role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]),
     "content": _TEXT | st.lists(_PART, max_size=3)}, optional={"cache_control": st.just(MARK)})
_CALL = st.fixed_dictionaries({"type": st.just("function_call"), "call_id": st.sampled_from(["c1", "c2"]),
                               "name": st.just("ls"), "arguments": st.just("{}")})
_CUSTOM = st.fixed_dictionaries({"type": st.just("custom_tool_call"), "call_id": st.just("c3"),
                                 "name": st.just("patch"), "input": _TEXT})
_OUTPUT = st.fixed_dictionaries({"type": st.sampled_from(["function_call_output", "custom_tool_call_output"]),
                                 "call_id": st.just("c1"), "output": _TEXT | st.lists(_PART, max_size=2)})
_ITEM = st.one_of(_MESSAGE, _CALL, _CUSTOM, _OUTPUT, st.just({"type": "reasoning", "summary": []}))


def fresh(items: list[Any]) -> list[dict[str, Any]]:
    """The translation with no memo (a context of its own: none set)."""
    return contextvars.Context().run(lambda: chat_body({"input": copy.deepcopy(items)})["messages"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_ITEM, max_size=4), min_size=1, max_size=6), st.data())
def test_a_kept_conversation_translates_as_a_fresh_one_turn_after_turn(turns: list[list[Any]], data: Any) -> None:
    memo, items, given_out = InputMemo(), [], []

    def translate(body: dict[str, Any]) -> list[dict[str, Any]]:
        INPUT_MEMO.set(memo)
        return chat_body(body)["messages"]

    for new in turns:
        if data.draw(st.booleans(), label="the client starts over"):
            items = []
        items = [*items, *new]  # the same objects again, then the new ones: as the connection keeps them
        got = contextvars.Context().run(translate, {"input": items})
        assert got == fresh(items)
        given_out.append((got, copy.deepcopy(got)))
    for got, as_given in given_out:
        assert got == as_given, "a later turn changed what an earlier one was given"


def test_items_that_are_not_the_kept_objects_are_translated_afresh() -> None:
    memo = InputMemo()
    first = [{"type": "message", "role": "assistant", "content": "a"}]
    assert memo.translated(first) == [{"role": "assistant", "content": "a"}]
    equal_not_same = [dict(first[0]), {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]
    out = memo.translated(equal_not_same)
    assert out == [{"role": "assistant", "content": "a", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]
    assert memo.translated(first) == [{"role": "assistant", "content": "a"}]  # shorter: not a continuation
