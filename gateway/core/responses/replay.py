"""A final `response` object re-emitted as the stream OpenAI would have sent for it, sans I/O.

For the learn-once buffered fallback (docs/extensions.md, "Failure semantics"): an upstream that rejects `stream:
true`, or answers a stream request with a plain body, is asked for the body and the client still gets a
Responses stream — one lifecycle, every output item with its parts, one delta per text, `*.done`
events, and the terminal event carrying the object itself. The replayed events go through the same
parser and filter as upstream events.
"""

from __future__ import annotations

import copy
from typing import Any

from gateway.core.responses.wire import PART_TEXT, TOOL_ITEMS

_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}
# part type -> (delta event, done event); summary parts have their own part events
_PART_EVENTS = {
    "output_text": ("response.output_text.delta", "response.output_text.done"),
    "refusal": ("response.refusal.delta", "response.refusal.done"),
    "reasoning_text": ("response.reasoning_text.delta", "response.reasoning_text.done"),
    "summary_text": ("response.reasoning_summary_text.delta", "response.reasoning_summary_text.done"),
}


def replay_events(resp: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream of one `response` object, numbered from 0."""
    start = {**resp, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": start},
                                    {"type": "response.in_progress", "response": start}]
    output = resp.get("output")
    for oi, item in enumerate(output if isinstance(output, list) else ()):
        if isinstance(item, dict):
            events += _item_events(item, oi)
    status = resp.get("status")
    end = _TERMINAL.get(status if isinstance(status, str) else "", "response.completed")
    events.append({"type": end, "response": resp})
    return [{**e, "sequence_number": i} for i, e in enumerate(events)]


def _item_events(item: dict[str, Any], oi: int) -> list[dict[str, Any]]:
    added = copy.deepcopy(item)
    added["status"] = "in_progress"
    for key in ("content", "summary"):
        if isinstance(added.get(key), list):
            added[key] = []
    itype = added.get("type")
    if itype in TOOL_ITEMS:
        added[TOOL_ITEMS[itype]] = ""
    events: list[dict[str, Any]] = [{"type": "response.output_item.added", "output_index": oi, "item": added}]
    ids = {"item_id": item.get("id"), "output_index": oi}
    if itype == "function_call":
        args = item.get("arguments") if isinstance(item.get("arguments"), str) else ""
        if args:
            events.append({"type": "response.function_call_arguments.delta", **ids, "delta": args})
        events.append({"type": "response.function_call_arguments.done", **ids, "name": item.get("name"),
                       "arguments": args})
    elif itype == "custom_tool_call":
        value = item.get("input") if isinstance(item.get("input"), str) else ""
        if value:
            events.append({"type": "response.custom_tool_call_input.delta", **ids, "delta": value})
        events.append({"type": "response.custom_tool_call_input.done", **ids, "input": value})
    for key, index_field, part_events in (("summary", "summary_index", "response.reasoning_summary_part"),
                                          ("content", "content_index", "response.content_part")):
        parts = item.get(key)
        for i, part in enumerate(parts if isinstance(parts, list) else ()):
            if isinstance(part, dict):
                events += _part_events(part, {**ids, index_field: i}, part_events)
    events.append({"type": "response.output_item.done", "output_index": oi, "item": item})
    return events


def _part_events(part: dict[str, Any], ids: dict[str, Any], part_events: str) -> list[dict[str, Any]]:
    ptype = part.get("type")
    spec = PART_TEXT.get(ptype) if isinstance(ptype, str) else None
    if spec is None or not isinstance(ptype, str):
        return [{"type": f"{part_events}.added", **ids, "part": part}, {"type": f"{part_events}.done", **ids,
                                                                        "part": part}]
    field = spec[1]
    text = part.get(field) if isinstance(part.get(field), str) else ""
    delta_type, done_type = _PART_EVENTS[ptype]
    delta: dict[str, Any] = {"type": delta_type, **ids, "delta": text}
    done: dict[str, Any] = {"type": done_type, **ids, field: text}
    if ptype == "output_text":
        delta["logprobs"] = done["logprobs"] = []
    out: list[dict[str, Any]] = [{"type": f"{part_events}.added", **ids, "part": {**part, field: ""}}]
    return [*out, *([delta] if text else []), done, {"type": f"{part_events}.done", **ids, "part": part}]
