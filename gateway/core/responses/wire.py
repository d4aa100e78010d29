"""OpenAI Responses API wire shapes -> typed events, sans I/O.

One reader for both transports: a streamed `response.completed` carries the same `response` object a
non-stream call returns, so `response_events` reads either (usage, terminal status, failure; with
`with_output` also the output texts and function calls). Stream events are dispatched on the JSON `type`
(some compatible servers omit the SSE `event:` line), unknown types parse to no typed events and are
forwarded untouched.

Text is keyed by `TextKey` = (output_index, part, index): `part` is "content" for a message's
`content[]` (output_text, refusal) and a reasoning item's raw `content[]` (reasoning_text), "summary" for
a reasoning item's `summary[]`. A delta, its `*.done` event, its `content_part.*` event, its item in
`output_item.done` and its place in the final `response.output` all map to the same key, which is what
lets the masking rewrite keep them equal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.core.error_object import classify_error_object
from gateway.core.events import (
    DeltaKind,
    Failure,
    FailureKind,
    Finish,
    InbandError,
    OutputDelta,
    StreamEvent,
    ToolCallDelta,
    Usage,
)

TextKey = tuple[int, str, int]
"""(output_index, "content" | "summary", content_index | summary_index)."""

LIFECYCLE = frozenset({"response.created", "response.in_progress", "response.queued", "response.completed",
                       "response.incomplete", "response.failed"})
TERMINAL_OK = frozenset({"response.completed", "response.incomplete"})
ERROR_TYPES = frozenset({"error", "too_many_requests"})  # the second: an observed non-standard shape
# a tool call's streamed input is an output token (docs/extensions.md, "Streams"): a function's JSON arguments, or a
# custom tool's free-form input (openapi.yaml `ResponseCustomToolCallInputDeltaEvent`)
TOOL_DELTAS = frozenset({"response.function_call_arguments.delta", "response.custom_tool_call_input.delta"})
TOOL_ITEMS = {"function_call": "arguments", "custom_tool_call": "input"}  # item type -> its input field

# event type -> (text kind, "content"/"summary", index field, text field of the `*.done` event)
TEXT_DELTAS: dict[str, tuple[DeltaKind, str, str]] = {
    "response.output_text.delta": (DeltaKind.CONTENT, "content", "content_index"),
    "response.refusal.delta": (DeltaKind.REFUSAL, "content", "content_index"),
    "response.reasoning_text.delta": (DeltaKind.REASONING, "content", "content_index"),
    "response.reasoning_summary_text.delta": (DeltaKind.REASONING, "summary", "summary_index"),
}
TEXT_DONES: dict[str, tuple[DeltaKind, str, str, str]] = {
    "response.output_text.done": (DeltaKind.CONTENT, "content", "content_index", "text"),
    "response.refusal.done": (DeltaKind.REFUSAL, "content", "content_index", "refusal"),
    "response.reasoning_text.done": (DeltaKind.REASONING, "content", "content_index", "text"),
    "response.reasoning_summary_text.done": (DeltaKind.REASONING, "summary", "summary_index", "text"),
}
# a part's `type` -> (kind, its text field); used for content parts, summary parts and final items
PART_TEXT: dict[str, tuple[DeltaKind, str]] = {
    "output_text": (DeltaKind.CONTENT, "text"),
    "refusal": (DeltaKind.REFUSAL, "refusal"),
    "reasoning_text": (DeltaKind.REASONING, "text"),
    "summary_text": (DeltaKind.REASONING, "text"),
}


def part_text(part: Any) -> tuple[DeltaKind, str] | None:
    """A content or summary part's kind and text field (`PART_TEXT`); None for another part, or a part
    whose `type` is no string (an upstream's `[]` must not be looked up: it is unhashable)."""
    ptype = part.get("type") if isinstance(part, dict) else None
    return PART_TEXT.get(ptype) if isinstance(ptype, str) else None
# Codes of `response.failed` that are the request's fault: passed through, never retried.
CLIENT_CODES = frozenset({"invalid_prompt", "invalid_image", "invalid_image_format", "invalid_base64_image",
                          "invalid_image_url", "image_too_large", "image_too_small", "image_parse_error",
                          "image_content_policy_violation", "invalid_image_mode", "image_file_too_large",
                          "unsupported_image_media_type", "empty_image_file", "failed_to_download_image",
                          "image_file_not_found"})


@dataclass(frozen=True, slots=True)
class ResponsesEvent:
    """One upstream stream event: its JSON (`obj`, None when unparseable or `[DONE]`), its own bytes
    (`raw`, forwarded when nothing changes), its typed events, and the text it concerns."""

    type: str
    obj: dict[str, Any] | None
    raw: bytes | None
    events: list[StreamEvent] = field(default_factory=list)
    key: TextKey | None = None
    kind: DeltaKind | None = None
    done: bool = False  # a `[DONE]` sentinel (compatible servers): stop reading

    def __init__(self, type: str, obj: dict[str, Any] | None, raw: bytes | None,
                 events: list[StreamEvent] | None = None, key: TextKey | None = None, kind: DeltaKind | None = None,
                 done: bool = False) -> None:
        # frozen: set as the generated __init__ sets them, here compiled (docs/compiled.md)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "obj", obj)
        object.__setattr__(self, "raw", raw)
        object.__setattr__(self, "events", [] if events is None else events)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "done", done)

    @property
    def failure(self) -> Failure | None:
        for e in self.events:
            if type(e) is InbandError:
                return e.failure
        return None

    @property
    def has_token(self) -> bool:
        return any(type(e) is OutputDelta or type(e) is ToolCallDelta for e in self.events)


def _int(d: Any, key: str) -> int:
    if not isinstance(d, dict):
        return 0
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _index(obj: dict[str, Any], key: str) -> int:
    v = obj.get(key, 0)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def parse_usage(u: Any) -> Usage | None:
    """`ResponseUsage` normalised: input includes cached tokens, output includes reasoning."""
    if not isinstance(u, dict):
        return None
    details = u.get("input_tokens_details")
    return Usage(input=_int(u, "input_tokens"), output=_int(u, "output_tokens"),
                 cached_input=_int(details, "cached_tokens"),
                 cache_creation_input=_int(details, "cache_write_tokens"),
                 reasoning=_int(u.get("output_tokens_details"), "reasoning_tokens"))


def classify_stream_error(obj: dict[str, Any]) -> Failure:
    """An `error` event (nested `error:{...}` or flat `code`/`message`) or a `response.failed`.
    The code is read from `error.code`, then the flat `code`, then `response.error.code`."""
    nested = obj.get("error")
    resp = obj.get("response")
    failed = resp.get("error") if isinstance(resp, dict) else None
    src = nested if isinstance(nested, dict) else failed if isinstance(failed, dict) else obj
    err = {k: src.get(k) for k in ("code", "type", "message", "param")}
    if src is obj:
        err["type"] = None  # the flat shape's `type` names the event, not the error
    elif err["code"] is None:
        err["code"] = obj.get("code")
    if err["type"] is None and err["code"] in CLIENT_CODES:
        err["type"] = "invalid_request_error"
    if err["message"] is None and isinstance(nested, str):
        err["message"] = nested
    failure = classify_error_object(err, None)
    if failure.kind is FailureKind.HTTP_4XX and failure.status is None:
        return Failure(failure.kind, failure.message, 400, failure.code, failure.type, failure.param)
    return failure


def response_events(resp: Any, *, with_output: bool) -> list[StreamEvent]:
    """The typed events of a `response` object: its output (when asked), usage, and its end."""
    if not isinstance(resp, dict):
        return [InbandError(Failure(FailureKind.MALFORMED, "upstream sent a response that is not an object"))]
    out: list[StreamEvent] = []
    if with_output:
        output = resp.get("output")
        for oi, item in enumerate(output if isinstance(output, list) else ()):
            if isinstance(item, dict):
                _item_events(item, oi, out)
    usage = parse_usage(resp.get("usage"))
    if usage is not None:
        out.append(usage)
    status = resp.get("status")
    if status == "failed":
        out.append(InbandError(classify_stream_error({"response": resp})))
    elif isinstance(status, str) and status in ("completed", "incomplete"):
        out.append(Finish(0, status))
    return out


def _item_events(item: dict[str, Any], oi: int, out: list[StreamEvent]) -> None:
    if item.get("type") in TOOL_ITEMS:
        args = item.get(TOOL_ITEMS[item["type"]])
        out.append(ToolCallDelta(0, oi, _str(item.get("call_id")), _str(item.get("name")),
                                 args if isinstance(args, str) else ""))
        return
    for _key, kind, text, _part in item_texts(item, oi):
        if text:
            out.append(OutputDelta(oi, kind, text))


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def item_texts(item: dict[str, Any], oi: int) -> list[tuple[TextKey, DeltaKind, str, dict[str, Any]]]:
    """Every text an output item carries: (key, kind, text, the part holding it)."""
    found: list[tuple[TextKey, DeltaKind, str, dict[str, Any]]] = []
    for part_name in ("summary", "content"):
        parts = item.get(part_name)
        if not isinstance(parts, list):
            continue
        for i, part in enumerate(parts):
            spec = part_text(part)
            if spec is not None and isinstance(part, dict):
                text = part.get(spec[1])
                if isinstance(text, str):
                    found.append(((oi, part_name, i), spec[0], text, part))
    return found


TextFn = Callable[[TextKey, DeltaKind, str], str]
"""Maps one text (by key and kind) to what the client may read."""


def map_item_texts(item: Any, oi: int, fn: TextFn) -> bool:
    """Rewrite every text of an output item in place with `fn`. True when something changed.
    A rewritten part's `logprobs` are emptied: their tokens would spell out the original text."""
    if not isinstance(item, dict):
        return False
    changed = False
    for key, kind, text, part in item_texts(item, oi):
        new = fn(key, kind, text)
        if new != text:
            part[PART_TEXT[part["type"]][1]] = new
            if part.get("logprobs"):
                part["logprobs"] = []
            changed = True
    return changed


def map_response_texts(resp: Any, fn: TextFn) -> bool:
    """Rewrite every text of a `response` object's output in place (its position is its output_index)."""
    output = resp.get("output") if isinstance(resp, dict) else None
    if not isinstance(output, list):
        return False
    changed = False
    for oi, item in enumerate(output):
        changed |= map_item_texts(item, oi, fn)
    return changed


class ResponsesParser:
    """Per stream: JSON event -> `ResponsesEvent`. Remembers item ids, so a server that leaves out
    `output_index` on a delta still lands it on the right item."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[str, int] = {}

    def parse(self, obj: Any, raw: bytes | None, name: str | None = None) -> ResponsesEvent:
        if not isinstance(obj, dict):
            bad = InbandError(Failure(FailureKind.MALFORMED, "upstream sent an event that is not an object"))
            return ResponsesEvent(name or "", None, raw, [bad])
        etype = obj.get("type")
        etype = etype if isinstance(etype, str) else (name or "")
        if etype in ERROR_TYPES or (isinstance(obj.get("error"), dict) and etype not in LIFECYCLE):
            return ResponsesEvent(etype, obj, raw, [InbandError(classify_stream_error(obj))])
        if etype in LIFECYCLE:
            events = response_events(obj.get("response"), with_output=False)
            if etype == "response.failed" and not any(type(e) is InbandError for e in events):
                events.append(InbandError(classify_stream_error(obj)))
            return ResponsesEvent(etype, obj, raw, events)
        oi = self._output_index(obj)
        spec = TEXT_DELTAS.get(etype)
        if spec is not None:
            kind, part, index_field = spec
            delta = obj.get("delta")
            token: list[StreamEvent] = [OutputDelta(oi, kind, delta)] if isinstance(delta, str) and delta else []
            return ResponsesEvent(etype, obj, raw, token, (oi, part, _index(obj, index_field)), kind)
        done = TEXT_DONES.get(etype)
        if done is not None:
            return ResponsesEvent(etype, obj, raw, [], (oi, done[1], _index(obj, done[2])), done[0])
        if etype in TOOL_DELTAS:
            delta = obj.get("delta")
            if isinstance(delta, str) and delta:
                return ResponsesEvent(etype, obj, raw, [ToolCallDelta(0, oi, arguments=delta)])
        return ResponsesEvent(etype, obj, raw)

    def _output_index(self, obj: dict[str, Any]) -> int:
        item = obj.get("item")
        oi = obj.get("output_index")
        item_id = obj.get("item_id")
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            item_id = item["id"]
        if isinstance(oi, int) and not isinstance(oi, bool):
            if isinstance(item_id, str):
                self._items[item_id] = oi
            return oi
        return self._items.get(item_id, 0) if isinstance(item_id, str) else 0
