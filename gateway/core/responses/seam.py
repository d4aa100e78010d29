"""Another attempt's typed events as Responses events of the stream they continue (docs/continuation.md), sans
I/O: its text as `response.output_text.delta`s of the open message text (or of a new message item after
the last), its end as the protocol's own (the text's, part's and item's `done` events, then the terminal
event whose `response` carries the whole output and the summed usage).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.core.events import (
    DeltaKind,
    Failure,
    FailureKind,
    Finish,
    OutputDelta,
    StreamEvent,
    StreamFailed,
    ToolCallDelta,
    Usage,
)
from gateway.core.responses.assemble import ResponsesAssembler
from gateway.core.responses.wire import ResponsesEvent, ResponsesParser, TextKey

Take = Callable[[ResponsesEvent], None]


class ContinuedText:
    """The continuing text's place in the stream: its item, and whether this seam opened it."""

    __slots__ = ("asm", "key", "parser", "take")

    def __init__(self, asm: ResponsesAssembler, take: Take) -> None:
        self.asm, self.take, self.parser = asm, take, ResponsesParser()
        self.key: TextKey | None = None

    def feed(self, events: list[StreamEvent], label: str) -> None:
        """`take` each Responses event for `events`, in order (the caller folds each into `asm`)."""
        status: str | None = None
        usage: Usage | None = None
        for e in events:
            t = type(e)
            if t is OutputDelta:
                assert isinstance(e, OutputDelta)
                if e.kind is DeltaKind.CONTENT:
                    self._delta(e.text)
            elif t is ToolCallDelta:
                raise StreamFailed(Failure(FailureKind.MALFORMED, f"{label}: a tool call cannot continue this stream"))
            elif t is Finish:
                assert isinstance(e, Finish)
                status = e.reason or "completed"
            elif t is Usage:
                assert isinstance(e, Usage)
                usage = e
        if status is not None:
            self._end(status, usage)

    def _event(self, obj: dict[str, Any]) -> None:
        self.take(self.parser.parse({**obj, "sequence_number": 0}, None))  # the filter numbers it

    def _open(self) -> TextKey:
        """The message text to write into: the one the answer was in, unless its item had ended."""
        if self.key is not None:
            return self.key
        asm = self.asm
        key = asm.resume_key()
        if key is not None and key[0] not in asm.done_items:
            self.key = key
            return key
        oi = max((*asm.items, *(k[0] for k in asm.texts())), default=-1) + 1
        item = {"type": "message", "id": f"msg_cont_{oi}", "status": "in_progress", "role": "assistant",
                "content": []}
        self._event({"type": "response.output_item.added", "output_index": oi, "item": item})
        self._event({"type": "response.content_part.added", "item_id": item["id"], "output_index": oi,
                     "content_index": 0, "part": _part("")})
        self.key = (oi, "content", 0)
        return self.key

    def _ids(self, key: TextKey) -> dict[str, Any]:
        item = self.asm.items.get(key[0], {})
        return {"item_id": item.get("id", ""), "output_index": key[0], "content_index": key[2]}

    def _delta(self, text: str) -> None:
        key = self._open()
        self._event({"type": "response.output_text.delta", **self._ids(key), "delta": text, "logprobs": []})

    def _end(self, status: str, usage: Usage | None) -> None:
        key, asm = self._open(), self.asm
        text = asm.texts().get(key, "")
        self._event({"type": "response.output_text.done", **self._ids(key), "text": text, "logprobs": []})
        self._event({"type": "response.content_part.done", **self._ids(key), "part": _part(text)})
        item = {**asm.items.get(key[0], {}), "status": "completed", "content": [_part(text)]}
        self._event({"type": "response.output_item.done", "output_index": key[0], "item": item})
        resp = {**asm.meta, "status": status, "output": output(asm),
                "usage": usage.as_responses() if usage is not None else asm.meta.get("usage")}
        etype = "response.completed" if status == "completed" else "response.incomplete"
        self._event({"type": etype, "response": resp})


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def output(asm: ResponsesAssembler) -> list[dict[str, Any]]:
    """The answer's output items, each at its output_index, with the texts the stream carried."""
    texts = asm.texts()
    indexes = sorted({*asm.items, *(k[0] for k in texts)})
    out: list[dict[str, Any]] = []
    for oi in range(indexes[-1] + 1 if indexes else 0):
        item = dict(asm.items.get(oi) or {"type": "message", "role": "assistant"})
        item["status"] = "completed"
        for part_name in ("summary", "content"):
            parts = [(k[2], t) for k, t in texts.items() if k[0] == oi and k[1] == part_name]
            if parts:
                item[part_name] = [_text_part(item, part_name, t) for _, t in sorted(parts)]
        out.append(item)
    return out


def _text_part(item: dict[str, Any], part_name: str, text: str) -> dict[str, Any]:
    if part_name == "summary":
        return {"type": "summary_text", "text": text}
    if item.get("type") == "reasoning":
        return {"type": "reasoning_text", "text": text}
    return _part(text)

