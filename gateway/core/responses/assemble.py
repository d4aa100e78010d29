"""Fold Responses events into what the pipeline needs to know about an answer, sans I/O.

The assembler knows when the first output token has come, whether the answer ended (`response.completed`
or `response.incomplete`: the protocol's terminal signal, not the end of the bytes), the last usage,
and the text per key and kind for guardrails that judge the whole answer. The final `response` object
(streamed in `response.completed`, or a non-stream body) is read by `feed_response`, the same code for
both; text already seen as deltas is not counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.core.events import (
    DeltaKind,
    Failure,
    Finish,
    InbandError,
    OutputDelta,
    StreamEvent,
    ToolCallDelta,
    Usage,
)
from gateway.core.responses.wire import TOOL_DELTAS, TOOL_ITEMS, ResponsesEvent, TextKey, item_texts, response_events


@dataclass(slots=True)
class ToolCall:
    call_id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class ResponsesAssembler:
    __slots__ = ("_kinds", "_texts", "done_items", "error", "first_token", "items", "meta", "status", "tools",
                 "usage")

    def __init__(self) -> None:
        self._texts: dict[TextKey, list[str]] = {}
        self._kinds: dict[TextKey, DeltaKind] = {}
        self.tools: dict[int, ToolCall] = {}  # by output_index
        self.usage: Usage | None = None
        self.status: str | None = None  # "completed" or "incomplete" once the answer has ended
        self.error: Failure | None = None
        self.first_token = False
        self.meta: dict[str, Any] = {}  # the `response` object the lifecycle began with
        self.items: dict[int, dict[str, Any]] = {}  # output_index -> the item as last announced
        self.done_items: set[int] = set()  # output indexes whose `output_item.done` came

    @property
    def finished(self) -> bool:
        return self.status is not None

    def feed(self, ev: ResponsesEvent) -> None:
        """One stream event."""
        obj = ev.obj
        if ev.key is not None and ev.kind is not None:
            for e in ev.events:
                if type(e) is OutputDelta:
                    self._add_text(ev.key, ev.kind, e.text)
                    self.first_token = True
        elif ev.type in ("response.output_item.added", "response.output_item.done") and obj is not None:
            item, oi = obj.get("item"), obj.get("output_index")
            if isinstance(item, dict):
                self._item(item, ev.events, oi)
                if isinstance(oi, int):
                    self.items[oi] = item
                    if ev.type == "response.output_item.done":
                        self.done_items.add(oi)
        elif ev.type in TOOL_DELTAS and obj is not None:
            for e in ev.events:
                if type(e) is ToolCallDelta:
                    self._tool(e.index).arguments.append(e.arguments)
                    self.first_token = True
        elif ev.type in ("response.completed", "response.incomplete", "response.failed") and obj is not None:
            self.feed_response(obj.get("response"))
        elif ev.type in ("response.created", "response.in_progress") and obj is not None and not self.meta:
            resp = obj.get("response")
            self.meta = resp if isinstance(resp, dict) else {}
        self._meta(ev.events)

    def feed_response(self, resp: Any) -> None:
        """A final `response` object: texts and calls the deltas did not bring, usage and the end."""
        if not isinstance(resp, dict):
            return
        output = resp.get("output")
        for oi, item in enumerate(output if isinstance(output, list) else ()):
            if isinstance(item, dict):
                self._item(item, [], oi)
        self._meta(response_events(resp, with_output=False))

    def _meta(self, events: list[StreamEvent]) -> None:
        for e in events:
            if type(e) is Usage:
                self.usage = e
            elif type(e) is Finish:
                self.status = e.reason
            elif type(e) is InbandError:
                self.error = e.failure

    def _item(self, item: dict[str, Any], events: list[StreamEvent], oi: Any) -> None:
        if not isinstance(oi, int):
            return
        if item.get("type") in TOOL_ITEMS:
            call = self._tool(oi)
            call.call_id = call.call_id or _str(item.get("call_id"))
            call.name = call.name or _str(item.get("name"))
            args = item.get(TOOL_ITEMS[item["type"]])
            if not call.arguments and isinstance(args, str) and args:
                call.arguments.append(args)
            return
        for key, kind, text, _part in item_texts(item, oi):
            if text and key not in self._texts:
                self._add_text(key, kind, text)  # a server that sent no deltas for it

    def _add_text(self, key: TextKey, kind: DeltaKind, text: str) -> None:
        parts = self._texts.get(key)
        if parts is None:
            parts = self._texts[key] = []
        parts.append(text)
        self._kinds[key] = kind

    def _tool(self, oi: int) -> ToolCall:
        call = self.tools.get(oi)
        if call is None:
            call = self.tools[oi] = ToolCall()
        return call

    def text(self, kind: DeltaKind = DeltaKind.CONTENT) -> str:
        """Every text of one kind, in output order."""
        return "".join("".join(parts) for key, parts in sorted(self._texts.items()) if self._kinds[key] is kind)

    def resume_key(self) -> TextKey | None:
        """The key of the text the answer can be continued from (docs/continuation.md): the latest text, an
        output_text of a message, no function call begun, the answer not ended; else None."""
        if self.finished or self.tools or not self._texts:
            return None
        key = max(self._texts)
        return key if key[1] == "content" and self._kinds[key] is DeltaKind.CONTENT else None

    def texts(self) -> dict[TextKey, str]:
        return {key: "".join(parts) for key, parts in sorted(self._texts.items())}

    def output_bytes(self) -> int:
        """UTF-8 size of the answer's texts and tool calls (see `ChatAssembler.output_bytes`)."""
        texts = sum(len(t.encode()) for parts in self._texts.values() for t in parts)
        return texts + sum(len((t.name or "").encode()) + sum(len(a.encode()) for a in t.arguments)
                     for t in self.tools.values())


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None
