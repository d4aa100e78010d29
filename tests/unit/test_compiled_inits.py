"""The values the compiled core builds per event or per request write their `__init__` out (docs/compiled.md,
"A dataclass's own `__init__` is bytecode"): the one `dataclass` generates is interpreted even in the compiled
build, 4-10x the cost of a compiled one. These tests hold each written-out `__init__` to what the generated
one would have been: every field, in field order, its default or a fresh value of its factory."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gateway.core.chat.stream import ChatChunk
from gateway.core.events import DeltaKind, Finish, OutputDelta, ToolCallDelta, Usage
from gateway.core.eventstream import EventMessage
from gateway.core.http1 import ResponseHead
from gateway.core.http1_request import RequestHead
from gateway.core.messages.wire import MessagesEvent
from gateway.core.redact.window import RedactionResult
from gateway.core.responses.wire import ResponsesEvent
from gateway.core.sse import SSEEvent

# every field of each class, none at its default: (class, field values in field order)
EXAMPLES: tuple[tuple[type, dict[str, Any]], ...] = (
    (OutputDelta, {"choice": 2, "kind": DeltaKind.REASONING, "text": "t"}),
    (ToolCallDelta, {"choice": 1, "index": 3, "id": "call_1", "name": "f", "arguments": "{}"}),
    (Finish, {"choice": 1, "reason": "stop"}),
    (Usage, {"input": 1, "output": 2, "cached_input": 3, "cache_creation_input": 4, "reasoning": 5,
             "cache_creation_input_1h": 6}),
    (SSEEvent, {"data": b"d", "event": "e", "id": "i"}),
    (ChatChunk, {"events": [Finish(0, "stop")], "obj": {"a": 1}, "raw": b"{}", "done": True}),
    (MessagesEvent, {"type": "ping", "obj": {"type": "ping"}, "raw": b"r", "events": [Finish(0, "x")], "index": 2,
                     "kind": DeltaKind.CONTENT}),
    (ResponsesEvent, {"type": "t", "obj": {"b": 2}, "raw": b"r", "events": [Finish(0, "x")], "key": (0, "m", 1),
                      "kind": DeltaKind.REFUSAL, "done": True}),
    (ResponseHead, {"status": 201, "headers": {"a": "b"}, "keep_alive": False}),
    (RequestHead, {"method": "POST", "path": "/p", "query": "q=1", "headers": {"h": "v"}, "keep_alive": False,
                   "http10": True, "content_length": 5, "expects_continue": True, "upgrade": "websocket"}),
    (RedactionResult, {"text": "x", "counts": {"email": 1}}),
    (EventMessage, {"headers": {":event-type": "chunk"}, "payload": b"p"}),
)
IDS = [cls.__name__ for cls, _ in EXAMPLES]


def _generated(cls: type) -> bool:
    """Whether `cls.__init__` is the one `dataclass` wrote (exec'd source, file name "<string>")."""
    code = getattr(cls.__init__, "__code__", None)
    return code is not None and code.co_filename == "<string>"


@pytest.mark.parametrize(("cls", "values"), EXAMPLES, ids=IDS)
def test_the_init_is_written_out(cls: type, values: dict[str, Any]) -> None:
    assert not _generated(cls)


@pytest.mark.parametrize(("cls", "values"), EXAMPLES, ids=IDS)
def test_every_field_by_keyword_and_in_field_order(cls: type, values: dict[str, Any]) -> None:
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    assert list(values) == names  # the example covers every field, in order
    by_keyword, by_position = cls(**values), cls(*values.values())
    for name, value in values.items():
        assert getattr(by_keyword, name) is value
        assert getattr(by_position, name) is value
    assert by_keyword == by_position


@pytest.mark.parametrize(("cls", "values"), EXAMPLES, ids=IDS)
def test_defaults_are_the_fields_own(cls: type, values: dict[str, Any]) -> None:
    fields = [f for f in dataclasses.fields(cls) if f.init]
    required = {f.name: values[f.name] for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    one, two = cls(**required), cls(**required)
    for f in fields:
        if f.name in required:
            continue
        if f.default_factory is not dataclasses.MISSING:
            assert getattr(one, f.name) == f.default_factory()
            assert getattr(one, f.name) is not getattr(two, f.name)  # a fresh value each, never shared
        else:
            assert getattr(one, f.name) == f.default


def test_frozen_ones_stay_frozen() -> None:
    for cls, values in EXAMPLES:
        if cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            first = next(iter(values))
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(cls(**values), first, values[first])
