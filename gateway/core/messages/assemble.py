"""Fold Messages stream events into what the pipeline needs to know about an answer, sans I/O.

The assembler knows when the first output token has come, whether the answer ended (a `message_delta`
with a `stop_reason`: the protocol's terminal signal, not `message_stop` and not the end of the bytes),
the usage (`message_start` + `message_delta`, cumulative), and the text per
kind for guardrails that judge the whole answer. `message()` renders the Message object a non-stream
client would have received (for the response cache).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.events import DeltaKind, OutputDelta, ToolCallDelta, Usage
from gateway.core.messages.wire import MessagesEvent, UsageCounts, block_text


class MessagesAssembler:
    __slots__ = ("_blocks", "_json", "_texts", "block_done", "first_token", "meta", "stop_reason",
                 "stop_sequence", "stopped", "usage_counts")

    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}  # message_start's message, without content
        self._blocks: dict[int, dict[str, Any]] = {}  # index -> the block as it started
        self._texts: dict[int, list[str]] = {}  # index -> its text / thinking pieces
        self._json: dict[int, list[str]] = {}  # index -> a tool_use block's input_json pieces
        self.usage_counts = UsageCounts()
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.first_token = False
        self.block_done = False  # a content block has ended (a tool call without arguments is whole)
        self.stopped = -1  # the index of the last content block that ended

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    @property
    def usage(self) -> Usage | None:
        return self.usage_counts.event() if self.usage_counts.seen else None

    def feed(self, ev: MessagesEvent) -> None:
        etype, obj = ev.type, ev.obj
        if obj is None:
            return
        if etype == "content_block_delta":
            for e in ev.events:
                if type(e) is OutputDelta:
                    self._texts.setdefault(ev.index, []).append(e.text)
                    self.first_token = True
                elif type(e) is ToolCallDelta:
                    self._json.setdefault(ev.index, []).append(e.arguments)
                    self.first_token = True
            if not ev.events:
                self._signature(ev.index, obj.get("delta"))
        elif etype == "content_block_start":
            block = obj.get("content_block")
            if isinstance(block, dict):
                self._start_block(ev.index, block)
        elif etype == "content_block_stop":
            self.block_done = True
            self.stopped = ev.index
        elif etype == "message_delta":
            self._message_delta(obj)
        elif etype == "message_start" and not self.meta:
            msg = obj.get("message")
            if isinstance(msg, dict):
                self.meta = {k: v for k, v in msg.items() if k != "content"}
                self.usage_counts.update(msg.get("usage"))

    def add_texts(self, index: int, texts: list[str]) -> None:
        """Text deltas of one block read by the fast path (never empty: each is an output token)."""
        parts = self._texts.get(index)
        if parts is None:
            parts = self._texts[index] = []
        parts.extend(texts)
        self.first_token = True

    def _signature(self, index: int, delta: Any) -> None:
        if isinstance(delta, dict) and delta.get("type") == "signature_delta" and index in self._blocks:
            sig = delta.get("signature")
            if isinstance(sig, str):
                self._blocks[index] = {**self._blocks[index], "signature": sig}

    def _start_block(self, index: int, block: dict[str, Any]) -> None:
        self._blocks[index] = block
        spec = block_text(block)
        text = block.get(spec[0]) if spec is not None else None
        if isinstance(text, str) and text:  # a block that starts filled
            self._texts.setdefault(index, []).append(text)
            self.first_token = True

    def _message_delta(self, obj: dict[str, Any]) -> None:
        self.usage_counts.update(obj.get("usage"))
        delta = obj.get("delta")
        if isinstance(delta, dict):
            stop = delta.get("stop_reason")
            if isinstance(stop, str) and stop:
                self.stop_reason = stop
                seq = delta.get("stop_sequence")
                self.stop_sequence = seq if isinstance(seq, str) else None

    def last_block(self) -> int:
        """The index of the latest content block (-1: none yet)."""
        return max((*self._blocks, *self._texts), default=-1)

    def resume_text(self) -> str | None:
        """The text so far when the answer can be continued from it (docs/continuation.md): not ended, no tool
        call begun, its latest block text (not thinking); else None."""
        last = self.last_block()
        if self.finished or last < 0 or self._json or self._kind(last) is not DeltaKind.CONTENT:
            return None
        if any(block_text(b) is None for b in self._blocks.values()):
            return None  # a tool_use (or a block we cannot continue) is in the answer
        return self.text(DeltaKind.CONTENT) or None

    def open_text_block(self) -> int | None:
        """The latest block when it is a text block that has not ended."""
        last = self.last_block()
        if last >= 0 and last != self.stopped and self._kind(last) is DeltaKind.CONTENT:
            return last
        return None

    def text(self, kind: DeltaKind = DeltaKind.CONTENT) -> str:
        """Every text of one kind, in block order."""
        return "".join("".join(self._texts[i]) for i in sorted(self._texts) if self._kind(i) is kind)

    def _kind(self, index: int) -> DeltaKind | None:
        block = self._blocks.get(index)
        spec = block_text(block)
        return spec[1] if spec is not None else DeltaKind.CONTENT  # a delta without its start: text

    def output_bytes(self) -> int:
        """UTF-8 size of the answer's texts and tool inputs (see `ChatAssembler.output_bytes`)."""
        texts = sum(len(t.encode()) for parts in self._texts.values() for t in parts)
        return texts + sum(len(p.encode()) for parts in self._json.values() for p in parts)

    def message(self) -> dict[str, Any]:
        """The whole Message object, as a non-stream answer would carry it."""
        content: list[dict[str, Any]] = []
        for i in sorted(self._blocks):
            block = dict(self._blocks[i])
            spec = block_text(block)
            if spec is not None:
                block[spec[0]] = "".join(self._texts.get(i, ()))
            elif block.get("type") == "tool_use":
                block["input"] = _input(self._json.get(i), block.get("input"))
            content.append(block)
        u = self.usage_counts
        usage = {"input_tokens": u.input, "output_tokens": u.output, "cache_read_input_tokens": u.cache_read,
                 "cache_creation_input_tokens": u.cache_creation}
        return {**self.meta, "type": "message", "role": "assistant", "content": content,
                "stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence, "usage": usage}


def _input(pieces: list[str] | None, start: Any) -> Any:
    """A tool's input: its streamed JSON parsed at the block's end ({} for none)."""
    text = "".join(pieces or ())
    if not text:
        return start if isinstance(start, dict) else {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
