"""Builders of Anthropic Messages API answers (stream and body) for the fake upstream.

Shapes follow protocols.md §4: every event is `event: <type>` + `data: <json with the same type>`.
"""

from __future__ import annotations

from typing import Any

import orjson

from tests.fake_upstream import Part, Script, json_script

PATH = "/v1/messages"
MODEL = "claude-test-4-5-20251001"
USAGE_START = {"input_tokens": 20, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 10,
               "output_tokens": 1}
USAGE_END = {"output_tokens": 12}


def event(obj: dict[str, Any], *, named: bool = True, typed: bool = True) -> bytes:
    """One SSE event; `named=False` drops the `event:` line, `typed=False` the JSON `type`."""
    name = obj["type"]
    data = obj if typed else {k: v for k, v in obj.items() if k != "type"}
    head = b"event: " + name.encode() + b"\n" if named else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def message_start(mid: str = "msg_01", usage: dict[str, Any] | None = None,
                  model: str = MODEL) -> dict[str, Any]:
    return {"type": "message_start", "message": {
        "id": mid, "type": "message", "role": "assistant", "content": [], "model": model,
        "stop_reason": None, "stop_sequence": None, "usage": usage or USAGE_START}}


def ping() -> dict[str, Any]:
    return {"type": "ping"}


def text_block(index: int, pieces: list[str]) -> list[dict[str, Any]]:
    return [{"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
            *({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}}
              for p in pieces),
            {"type": "content_block_stop", "index": index}]


def thinking_block(index: int, pieces: list[str]) -> list[dict[str, Any]]:
    return [{"type": "content_block_start", "index": index,
             "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
            *({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": p}}
              for p in pieces),
            {"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta",
                                                                      "signature": "EqQBCgIYAhIM"}},
            {"type": "content_block_stop", "index": index}]


def tool_block(index: int, tool_id: str, name: str, json_pieces: list[str]) -> list[dict[str, Any]]:
    return [{"type": "content_block_start", "index": index,
             "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}}},
            {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": ""}},
            *({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": p}}
              for p in json_pieces),
            {"type": "content_block_stop", "index": index}]


def message_delta(stop_reason: str | None = "end_turn", usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": usage or USAGE_END}


def message_stop() -> dict[str, Any]:
    return {"type": "message_stop"}


def error_event(etype: str = "overloaded_error", message: str = "Overloaded") -> dict[str, Any]:
    return {"type": "error", "error": {"details": None, "type": etype, "message": message}}


def stream(events: list[dict[str, Any]], *, split: int = 0, tail: list[Part] | None = None) -> Script:
    return Script([event(e) for e in events] + (tail or []), split=split)


def text_stream(pieces: list[str], *, stop: str = "end_turn", usage_start: dict[str, Any] | None = None,
                usage_end: dict[str, Any] | None = None, mid: str = "msg_01", split: int = 0) -> Script:
    return stream([message_start(mid, usage_start), ping(), *text_block(0, pieces),
                   message_delta(stop, usage_end), message_stop()], split=split)


def message_body(content: list[dict[str, Any]], *, stop: str = "end_turn",
                 usage: dict[str, Any] | None = None, mid: str = "msg_body") -> Script:
    return json_script({"id": mid, "type": "message", "role": "assistant", "model": MODEL, "content": content,
                        "stop_reason": stop, "stop_sequence": None,
                        "usage": usage or {**USAGE_START, "output_tokens": 12}})


def error_body(status: int, etype: str, message: str = "upstream says no",
               headers: dict[str, str] | None = None) -> Script:
    return json_script({"type": "error", "error": {"type": etype, "message": message}, "request_id": "req_011"},
                       status, headers)
