"""Rewrite client-bound Messages events through the text windows (redaction, stream guardrails), sans I/O.

One window chain per content block, for its `text_delta`s or `thinking_delta`s (docs/extensions.md,
"Redaction in every script"; never a
`signature_delta`, and never an `input_json_delta`, whose JSON must stay parseable). A delta carries only
what its chain releases; a delta whose text is entirely held is dropped. When the block ends
(`content_block_stop`, or the message's end for a server that sends none) what the chain still held goes
out as one extra delta of the block's kind, just before the event that ends it. An event the filter did
not change is forwarded as the upstream's own bytes (no re-serialisation on the hot path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.core.events import DeltaKind, InbandError
from gateway.core.messages.wire import DELTA_OF, TEXT_DELTAS, MessagesEvent, block_text
from gateway.core.sse import encode_event
from gateway.core.stages import Refusal, StageFactory, TextStage, refused

_ENDS = frozenset({"message_delta", "message_stop"})


class MessagesOutputFilter:
    """Per request. `apply` returns the SSE bytes to write for one event (b"" to drop it)."""

    __slots__ = ("_factory", "_kinds", "_stages", "output_released", "refusal")

    def __init__(self, factory: StageFactory | None) -> None:
        self._factory = factory
        self._stages: dict[int, TextStage | None] = {}  # open blocks by index; None: nothing to filter
        self._kinds: dict[int, DeltaKind] = {}
        self.refusal: Refusal | None = None  # set once a stage refuses; nothing more is released
        self.output_released = False  # an output token has left the filter (the TTFT moment)

    def apply(self, ev: MessagesEvent) -> bytes:
        obj = ev.obj
        if obj is None or refused(self.refusal):  # not `self.refusal is not None`: see `refused`
            return b""
        if ev.kind is not None and self._factory is not None:
            return self._delta(ev, obj)
        changed, pre = False, b""
        if self._factory is not None:
            etype = ev.type
            if etype == "content_block_start":
                changed = self._block_start(ev.index, obj)
            elif etype == "content_block_stop":
                pre = self._flush(ev.index)
            elif etype in _ENDS:
                pre = self.flush_open()
            if self.refusal is not None:
                return pre
        if ev.events and not self.output_released:
            self.output_released = any(type(e) is not InbandError for e in ev.events)
        return pre + _encode(ev, obj, changed)

    def _delta(self, ev: MessagesEvent, obj: dict[str, Any]) -> bytes:
        delta = obj["delta"]
        field = TEXT_DELTAS[delta["type"]][0]
        text = delta.get(field)
        kind = ev.kind
        assert kind is not None
        stage = self._stage(ev.index, kind)
        if stage is None or not isinstance(text, str) or not text:
            if ev.events:
                self.output_released = True
            return _encode(ev, obj, False)
        released, refusal = stage.push(text)
        if refusal is not None:
            self.refusal = refusal  # what came before the violation still goes out
        if not released:
            return b""
        self.output_released = True
        if released == text:
            return _encode(ev, obj, False)
        delta[field] = released
        return _encode(ev, obj, True)

    def _block_start(self, index: int, obj: dict[str, Any]) -> bool:
        """A block that starts with text (rare): that text goes through the block's window too."""
        block = obj.get("content_block")
        spec = block_text(block)
        if spec is None or not isinstance(block, dict):
            return False
        text = block.get(spec[0])
        stage = self._stage(index, spec[1])
        if stage is None or not isinstance(text, str) or not text:
            return False
        released, refusal = stage.push(text)
        if refusal is not None:
            self.refusal = refusal
        if released:
            self.output_released = True
        block[spec[0]] = released
        return released != text

    def text_push(self, index: int, kind: DeltaKind) -> Callable[[list[str]], list[str]] | None:
        """For the fast path: the deltas of block `index` that arrived together -> what each releases,
        when nothing can refuse them (no stage, or a redaction window alone); else None (call
        `release_text` per delta). The caller sets `output_released` once it writes released text."""
        if self.refusal is not None:
            return None
        if self._factory is None:
            return _unchanged
        stage = self._stage(index, kind)
        return _unchanged if stage is None else stage.push_together

    def release_text(self, index: int, kind: DeltaKind, text: str) -> str:
        """What the block's window releases of one delta ("" when held, or once a stage refused)."""
        if self.refusal is not None:
            return ""
        stage = self._stage(index, kind)
        if stage is None:
            return text
        released, refusal = stage.push(text)
        if refusal is not None:
            self.refusal = refusal
        return released

    def _stage(self, index: int, kind: DeltaKind) -> TextStage | None:
        try:
            return self._stages[index]
        except KeyError:
            stage = self._stages[index] = self._factory(kind) if self._factory is not None else None
            self._kinds[index] = kind
            return stage

    def _flush(self, index: int) -> bytes:
        """End one block's window: what it held, as one extra delta of its kind."""
        stage = self._stages.get(index)
        if stage is None:
            return b""
        del self._stages[index]  # ended: a (malformed) later delta of this block gets a window of its own
        tail, refusal = stage.flush()
        if refusal is not None and self.refusal is None:
            self.refusal = refusal
        if not tail or self.refusal is not None:
            return b""
        dtype, field = DELTA_OF[self._kinds[index]]
        self.output_released = True
        obj = {"type": "content_block_delta", "index": index, "delta": {"type": dtype, field: tail}}
        return encode_event("content_block_delta", orjson.dumps(obj))

    def flush_open(self) -> bytes:
        """End every block whose window is still open (the message ends, or the stream does)."""
        return b"".join([self._flush(i) for i, s in list(self._stages.items()) if s is not None])


def _unchanged(texts: list[str]) -> list[str]:
    return texts


def _encode(ev: MessagesEvent, obj: dict[str, Any], changed: bool) -> bytes:
    if not changed and ev.raw is not None:
        return encode_event(ev.type, ev.raw)
    return encode_event(ev.type, orjson.dumps(obj))


def error_event(etype: str, message: str) -> bytes:
    """Anthropic's in-stream error event."""
    return encode_event("error", orjson.dumps({"type": "error", "error": {"type": etype, "message": message}}))
