"""A big WebSocket message parsed in steps (`core.json_split`, then `read_split`) reads as `read_message`
reads the same message whole: the same `response.create`, or the same error's words."""

from __future__ import annotations

import orjson
import pytest

from gateway.core.json_body import BodyError
from gateway.core.json_split import SplitParse
from gateway.core.responses.socket import Create, SocketMessageError, read_message, read_split, split_error

SIZES = (8, 8, 8)  # every string of 8 bytes or more is a long literal, cut in pieces of 8
LONG = 'é\n"中😀\\ and more text'


def stepped(raw: bytes) -> Create | str:
    split = SplitParse(raw, sizes=SIZES)
    try:
        while not split.step():
            pass
    except BodyError as exc:
        return str(split_error(exc))
    try:
        return read_split(split, raw)
    except SocketMessageError as exc:
        return str(exc)


def whole(raw: bytes) -> Create | str:
    try:
        return read_message(raw.decode())
    except SocketMessageError as exc:
        return str(exc)


@pytest.mark.parametrize("message", [
    {"type": "response.create", "model": "m", "input": LONG, "generate": False, "background": True},
    {"type": "response.create", "response": {"model": "m", "input": [{"type": "message", "role": "user",
                                                                         "content": LONG}]}},
    {"type": "response.create", "model": "m", "input": LONG * 3, "generate": "yes"},
    {"type": "session.update", "session": LONG},
    {"type": "response.create", "model": "m", "input": ["x"] * 5000},  # too many brackets to split
])
def test_a_message_in_steps_is_the_message_whole(message: object) -> None:
    raw = orjson.dumps(message)
    assert stepped(raw) == whole(raw)


@pytest.mark.parametrize("raw", [
    b'{"type": "response.create", "input": "' + b"x" * 20 + b'"',  # cut short
    b'["response.create", "' + b"x" * 20 + b'"]',  # not an object
    b'"' + b"x" * 20 + b'"',
    b'{"type": "response.create", "input": "' + b"x" * 20 + b'\\q"}',  # a bad escape in a long literal
])
def test_a_message_refused_in_steps_is_refused_in_the_words_of_a_whole_read(raw: bytes) -> None:
    got = stepped(raw)
    assert isinstance(got, str) and got == whole(raw)
