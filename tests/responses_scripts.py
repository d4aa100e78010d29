"""Builders of OpenAI Responses API upstream answers (protocols.md §3), for unit and integration tests.

`Answer` builds one consistent lifecycle as OpenAI streams it — `response.created`, `in_progress`, per
output item `output_item.added`, parts, deltas, `*.done`, `output_item.done`, then `response.completed`
with the full `response` object — and the same `response` object a non-stream call returns, so a
stream and a body of the same answer can be compared.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

from tests.fake_upstream import Part, Script, json_script

MODEL = "up-model-2025-01-01"
USAGE = {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 3}, "output_tokens": 7,
         "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 18}


class Answer:
    def __init__(self, rid: str = "resp_up", usage: dict[str, Any] | None = None, items: str = "") -> None:
        self.rid = rid
        self.items = items  # in its output items' ids (`msg_<items>0`): another answer's are other ids
        self.usage = usage or USAGE
        self.output: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = [
            {"type": "response.created", "response": self._response("in_progress", [], None)},
            {"type": "response.in_progress", "response": self._response("in_progress", [], None)},
        ]

    def _response(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        return {"id": self.rid, "object": "response", "created_at": 1_700_000_000, "status": status,
                "error": None, "incomplete_details": None, "model": MODEL, "output": copy.deepcopy(output),
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": usage,
                "text": {"format": {"type": "text"}}, "store": False, "temperature": 1.0, "top_p": 1.0}

    def _add(self, item: dict[str, Any]) -> int:
        oi = len(self.output)
        self.events.append({"type": "response.output_item.added", "output_index": oi,
                            "item": {**copy.deepcopy(item), "status": "in_progress"}})
        return oi

    def _done(self, oi: int, item: dict[str, Any]) -> None:
        self.events.append({"type": "response.output_item.done", "output_index": oi, "item": copy.deepcopy(item)})
        self.output.append(item)

    def message(self, pieces: list[str], *, refusal: bool = False) -> Answer:
        mid = f"msg_{self.items}{len(self.output)}"
        oi = self._add({"id": mid, "type": "message", "role": "assistant", "content": []})
        ptype, field = ("refusal", "refusal") if refusal else ("output_text", "text")
        empty = {"type": ptype, field: ""} | ({} if refusal else {"annotations": [], "logprobs": []})
        ids = {"item_id": mid, "output_index": oi, "content_index": 0}
        self.events.append({"type": "response.content_part.added", **ids, "part": copy.deepcopy(empty)})
        dtype = "response.refusal" if refusal else "response.output_text"
        for p in pieces:
            extra = {} if refusal else {"logprobs": [], "obfuscation": "xYz"}
            self.events.append({"type": f"{dtype}.delta", **ids, "delta": p, **extra})
        text = "".join(pieces)
        self.events.append({"type": f"{dtype}.done", **ids, field: text} | ({} if refusal else {"logprobs": []}))
        part = {**empty, field: text}
        self.events.append({"type": "response.content_part.done", **ids, "part": copy.deepcopy(part)})
        self._done(oi, {"id": mid, "type": "message", "role": "assistant", "status": "completed", "content": [part]})
        return self

    def reasoning(self, pieces: list[str]) -> Answer:
        rid = f"rs_{self.items}{len(self.output)}"
        oi = self._add({"id": rid, "type": "reasoning", "summary": []})
        ids = {"item_id": rid, "output_index": oi, "summary_index": 0}
        self.events.append({"type": "response.reasoning_summary_part.added", **ids,
                            "part": {"type": "summary_text", "text": ""}})
        for p in pieces:
            self.events.append({"type": "response.reasoning_summary_text.delta", **ids, "delta": p,
                                "obfuscation": "ab"})
        text = "".join(pieces)
        self.events.append({"type": "response.reasoning_summary_text.done", **ids, "text": text})
        self.events.append({"type": "response.reasoning_summary_part.done", **ids,
                            "part": {"type": "summary_text", "text": text}})
        self._done(oi, {"id": rid, "type": "reasoning", "summary": [{"type": "summary_text", "text": text}],
                        "encrypted_content": "gAAAA-opaque"})
        return self

    def function_call(self, name: str, call_id: str, arg_pieces: list[str]) -> Answer:
        fid = f"fc_{self.items}{len(self.output)}"
        item = {"id": fid, "type": "function_call", "call_id": call_id, "name": name, "arguments": ""}
        oi = self._add(item)
        for p in arg_pieces:
            self.events.append({"type": "response.function_call_arguments.delta", "item_id": fid,
                                "output_index": oi, "delta": p})
        args = "".join(arg_pieces)
        self.events.append({"type": "response.function_call_arguments.done", "item_id": fid, "output_index": oi,
                            "name": name, "arguments": args})
        self._done(oi, {**item, "arguments": args, "status": "completed"})
        return self

    def body(self, status: str = "completed") -> dict[str, Any]:
        """The `response` object of the blocking call (and of `response.completed`)."""
        return self._response(status, self.output, self.usage)

    def stream_events(self, end: str = "completed") -> list[dict[str, Any]]:
        """The whole lifecycle, numbered from 0. `end`: completed, incomplete, or none."""
        events = [*self.events]
        if end != "none":
            events.append({"type": f"response.{end}", "response": self.body(end)})
        return number(events)


def number(events: list[dict[str, Any]], start: int = 0) -> list[dict[str, Any]]:
    return [{**e, "sequence_number": start + i} for i, e in enumerate(events)]


def frame(event: dict[str, Any], named: bool = True) -> bytes:
    data = orjson.dumps(event)
    return (b"event: " + event["type"].encode() + b"\n" if named else b"") + b"data: " + data + b"\n\n"


def stream_script(events: list[dict[str, Any]], *, split: int = 0, tail: list[Part] | None = None,
                  named: bool = True) -> Script:
    return Script([frame(e, named) for e in events] + (tail or []), split=split)


def body_script(answer: Answer, status: str = "completed") -> Script:
    return json_script(answer.body(status))


def rate_limit_error(seq: int, nested: bool = True) -> dict[str, Any]:
    """The in-band errors of protocols.md §3.6: the observed nested shape, or the documented flat one."""
    if nested:
        return {"type": "error", "sequence_number": seq,
                "error": {"type": "tokens", "code": "rate_limit_exceeded", "message": "Rate limit reached",
                          "param": None}}
    return {"type": "error", "sequence_number": seq, "code": "rate_limit_exceeded",
            "message": "Rate limit reached", "param": None}


def failed(seq: int, code: str = "server_error", rid: str = "resp_up") -> dict[str, Any]:
    return {"type": "response.failed", "sequence_number": seq,
            "response": {"id": rid, "object": "response", "status": "failed", "model": MODEL, "output": [],
                         "error": {"code": code, "message": "The model failed to generate a response."},
                         "usage": None}}
