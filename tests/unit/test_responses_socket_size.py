"""A WebSocket-mode turn's body size, counted without encoding the kept conversation again
(`Conversation.body_size`): byte for byte what `encode` writes of the whole body HTTP would have carried
(the 413 bound and the log's `body_bytes`), however the turns came."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.body_scan import NOTHING
from gateway.core.json_body import encode
from gateway.core.responses.socket import Conversation, joined_size
from tests.unit.json_literals import literal_of

_TEXT = st.text(alphabet="ab\"\\\n\u00e9\u4e2d", max_size=6)
_LEAF = st.none() | st.booleans() | st.integers(-99, 99) | _TEXT | _TEXT.map(literal_of)
_PART = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=10)
_INPUT = st.none() | _TEXT | st.lists(_PART, max_size=3)
# a turn: its input, its output items, whether it names the last response, whether it is a warm-up
_TURN = st.tuples(_INPUT, st.lists(_PART, max_size=2), st.booleans(), st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.lists(_TURN, min_size=1, max_size=5))
def test_the_size_of_every_turn_is_its_whole_body_encoded(turns: list[tuple[Any, list[Any], bool, bool]]) -> None:
    conv = Conversation()
    for i, (given_input, output, continued, warm_up) in enumerate(turns):
        body: dict[str, Any] = {"model": "m", "stream": True, "input": given_input,
                                **({"previous_response_id": f"r{i - 1}"} if continued else {})}
        if given_input is None:
            del body["input"]
        whole, _ = conv.expand(body, NOTHING, NOTHING)
        if warm_up:  # answered without a model call, its size never asked; kept all the same
            conv.keep(f"r{i}", whole, [], NOTHING)
            continue
        assert conv.body_size(body) == len(encode(body))
        conv.keep(f"r{i}", whole, output, NOTHING)
        assert conv.joined == joined_size(conv.items)


def test_a_continued_turn_encodes_its_new_items_only() -> None:
    """What the count saves: the kept items are not encoded again. An item that cannot be encoded, kept
    from before, would fail a whole encode; the count never touches it."""
    conv = Conversation()
    first: dict[str, Any] = {"model": "m", "input": [{"role": "user", "content": "one"}]}
    whole, _ = conv.expand(first, NOTHING, NOTHING)
    assert conv.body_size(first) == len(encode(first))
    conv.keep("r0", whole, [{"type": "message", "content": "two"}], NOTHING)
    conv.items[0] = object()  # stands for the kept items: counted already, not encoded again
    second: dict[str, Any] = {"model": "m", "input": [{"role": "user", "content": "three"}],
                              "previous_response_id": "r0"}
    conv.expand(second, NOTHING, NOTHING)
    encoded = encode({**second, "input": [{"role": "user", "content": "one"}, *second["input"][1:]]})
    assert conv.body_size(second) == len(encoded)


def test_a_string_input_is_kept_without_encoding_its_message_again() -> None:
    """A string `input` is kept as the one user message it means; its size was counted with the body's, so
    keeping it encodes it no more (a 10 MiB text was encoded twice). An item that cannot be encoded, standing
    for it, shows that `keep` does not encode it."""
    conv = Conversation()
    body: dict[str, Any] = {"model": "m", "input": 'say "hi" é'}
    whole, _ = conv.expand(body, NOTHING, NOTHING)
    assert conv.body_size(body) == len(encode(body))
    message = whole[0]
    whole[0] = object()
    conv.keep("r0", whole, [], NOTHING)
    assert conv.joined == joined_size([message])


def test_forget_starts_the_count_again() -> None:
    conv = Conversation()
    body: dict[str, Any] = {"input": ["x"]}
    whole, _ = conv.expand(body, NOTHING, NOTHING)
    conv.body_size(body)
    conv.keep("r0", whole, ["y"], NOTHING)
    assert conv.joined == len(b'"x","y"')
    conv.forget()
    assert conv.joined == 0 and conv.items == []
