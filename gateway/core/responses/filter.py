"""Rewrite client-bound Responses events through the text windows (redaction, stream guardrails), sans I/O.

One window chain per text key (output_index, part, index), like the chat filter's per (choice, kind).
A delta carries only what its chain releases; a delta whose text is entirely held is dropped. When a
text ends (its `*.done` event, or the response's terminal event for a server that sends no `done`),
what the chain still held goes out as one extra delta, and from then on every copy of that text —
the `*.done` event, `content_part.done`, `output_item.done`, the final `response` object — carries
exactly the joined deltas the client was sent (docs/extensions.md, "Redaction in every script"). A text that never came
as deltas (a server that sends only `done` events) is masked whole, once, and reused for its later copies.

The client sees one lifecycle numbered 0, 1, 2, ... whatever the upstream's numbering and however many
events were dropped or added. An event the filter did not change is forwarded as the upstream's own
bytes (no re-serialisation on the hot path).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import orjson

from gateway.core.events import DeltaKind
from gateway.core.logprobs import AlignedStage, token_lengths
from gateway.core.responses.wire import (
    ERROR_TYPES,
    LIFECYCLE,
    TEXT_DELTAS,
    TEXT_DONES,
    ResponsesEvent,
    TextKey,
    map_item_texts,
    map_response_texts,
    part_text,
)
from gateway.core.sse import encode_event
from gateway.core.stages import Refusal, StageFactory, TextStage, refused

_PART_EVENTS = {"response.content_part.added": ("content", "content_index"),
                "response.content_part.done": ("content", "content_index"),
                "response.reasoning_summary_part.added": ("summary", "summary_index"),
                "response.reasoning_summary_part.done": ("summary", "summary_index")}
_ITEM_EVENTS = frozenset({"response.output_item.added", "response.output_item.done"})
_DELTA_OF = {(kind, part): etype for etype, (kind, part, _) in TEXT_DELTAS.items()}
_INDEX_FIELD = {"content": "content_index", "summary": "summary_index"}

# How a client-bound event is encoded: an SSE event (name, JSON text), unless the response is served on a
# transport that carries each event whole. WebSocket mode sets its framer for the task serving one
# `response.create` (docs/reference.md, WebSocket mode), so the one serve path writes text frames
# directly instead of SSE the socket would cut apart again (bench/README.md, "Agent turns").
# The encoder is also handed the event's object: a transport that keeps what a response produced (the
# socket keeps the terminal event's output) reads it there, not by parsing the JSON text it was just made.
EventEncoder = Callable[[str, bytes, dict[str, Any]], bytes]


def sse_event(name: str, payload: bytes, obj: dict[str, Any]) -> bytes:
    return encode_event(name, payload)


EVENT_ENCODER: ContextVar[EventEncoder] = ContextVar("responses_event_encoder", default=sse_event)


class ResponsesOutputFilter:
    """Per request. `apply` returns the SSE bytes to write for one upstream event (b"" to drop it)."""

    __slots__ = ("_encode_event", "_factory", "_final", "_ids", "_pre", "_released", "_seq", "_stages",
                 "output_released", "refusal")

    def __init__(self, factory: StageFactory | None) -> None:
        self._factory = factory
        self._encode_event = EVENT_ENCODER.get()  # SSE, or the transport's own (see EVENT_ENCODER)
        self._stages: dict[TextKey, TextStage | None] = {}
        self._released: dict[TextKey, list[str]] = {}  # what the client was sent, per streamed key
        self._final: dict[TextKey, str] = {}  # a text's final client form, once it has ended
        self._ids: dict[TextKey, tuple[str, dict[str, Any]]] = {}  # how to address an extra delta
        self._pre: list[bytes] = []  # extra deltas that must precede the event being rewritten
        self._seq = 0
        self.refusal: Refusal | None = None  # set once a stage refuses; nothing more is released
        self.output_released = False  # an output token has left the filter (the TTFT moment)

    @property
    def active(self) -> bool:
        return self._factory is not None

    def apply(self, ev: ResponsesEvent) -> bytes:
        obj = ev.obj
        if obj is None or refused(self.refusal):  # not `self.refusal is not None`: see `refused`
            return b""
        changed = self._rewrite(ev, obj) if self._factory is not None else False
        if ev.type in ERROR_TYPES and not isinstance(obj.get("error"), dict):
            obj["error"] = _error_object(ev)  # so clients that raise on an `error` object do
            changed = True
        pre, self._pre = b"".join(self._pre), []
        if self.refusal is not None and ev.type not in TEXT_DELTAS:
            return pre  # refused while ending a text: its end and the terminal event stay back
        if ev.type in TEXT_DELTAS and self._factory is not None and not obj.get("delta"):
            return pre  # all of it is held in the window
        if ev.has_token:
            self.output_released = True
        return pre + self._encode(ev, obj, changed)

    def _encode(self, ev: ResponsesEvent, obj: dict[str, Any], changed: bool) -> bytes:
        if obj.get("sequence_number") != self._seq:
            obj["sequence_number"] = self._seq
            changed = True
        self._seq += 1
        if not changed and ev.raw is not None:
            return self._encode_event(ev.type, ev.raw, obj)
        return self._encode_event(ev.type, orjson.dumps(obj), obj)

    def _rewrite(self, ev: ResponsesEvent, obj: dict[str, Any]) -> bool:
        etype = ev.type
        if ev.key is not None and ev.kind is not None:
            if etype in TEXT_DELTAS:
                return self._delta(ev.key, ev.kind, etype, obj)
            field = TEXT_DONES[etype][3]
            changed = self._set(obj, field, self._final_text(ev.key, ev.kind, _text(obj.get(field))))
            if changed and obj.get("logprobs"):
                obj["logprobs"] = []  # the whole text's tokens, before the window
            return changed
        if etype in _ITEM_EVENTS:
            oi = obj.get("output_index")
            return isinstance(oi, int) and map_item_texts(obj.get("item"), oi, self._final_text)
        part = _PART_EVENTS.get(etype)
        if part is not None:
            return self._part(obj, *part)
        if etype in LIFECYCLE:
            if etype in ("response.completed", "response.incomplete", "response.failed"):
                self._pre.append(self.flush_open())
            return map_response_texts(obj.get("response"), self._final_text)
        return False

    def _delta(self, key: TextKey, kind: DeltaKind, etype: str, obj: dict[str, Any]) -> bool:
        text = obj.get("delta")
        if not isinstance(text, str) or not text:
            return False
        entries = obj.get("logprobs")
        lens = token_lengths(entries, text) if entries else None
        stage = self._stage(key, kind, aligned=lens is not None)
        if stage is None:
            return False
        if key not in self._ids:
            index_field = _INDEX_FIELD[key[1]]
            self._ids[key] = (etype, {k: obj[k] for k in ("item_id", "output_index", index_field) if k in obj})
        kept: list[Any] | None = None  # the entries that go with what is released (None: none can)
        if lens is not None and type(stage) is AlignedStage:
            released, kept, refusal = stage.push_tokens(text, lens, obj["logprobs"])
        else:
            released, refusal = stage.push(text)
        self._refuse(refusal)
        parts = self._released.get(key)
        if parts is None:
            parts = self._released[key] = []
        parts.append(released)
        changed = released != text
        if changed:
            obj["delta"] = released
            obj.pop("obfuscation", None)  # padding sized for the original text
        if entries and (changed or lens is None):
            # they spell the text before the window: what goes out instead carries the entries of its own
            # tokens (`core.logprobs`), or none (a masked text, or entries that do not spell their text)
            obj["logprobs"] = kept if kept is not None else []
            changed = True
        return changed

    def _part(self, obj: dict[str, Any], part_name: str, index_field: str) -> bool:
        part = obj.get("part")
        oi = obj.get("output_index")
        spec = part_text(part)
        if spec is None or not isinstance(part, dict) or not isinstance(oi, int):
            return False
        index = obj.get(index_field, 0)
        key = (oi, part_name, index if isinstance(index, int) else 0)
        changed = self._set(part, spec[1], self._final_text(key, spec[0], _text(part.get(spec[1]))))
        if changed and part.get("logprobs"):
            part["logprobs"] = []
        return changed

    @staticmethod
    def _set(target: dict[str, Any], field: str, value: str) -> bool:
        if target.get(field) == value or (value == "" and field not in target):
            return False
        target[field] = value
        return True

    def _stage(self, key: TextKey, kind: DeltaKind, aligned: bool = False) -> TextStage | None:
        """`aligned`: the text's first delta came with its tokens (`core.logprobs`): they follow the text."""
        if key not in self._stages:
            stage = self._factory(kind) if self._factory is not None else None
            self._stages[key] = AlignedStage(stage) if aligned and stage is not None else stage
        return self._stages[key]

    def _refuse(self, refusal: Refusal | None) -> None:
        if refusal is not None and self.refusal is None:
            self.refusal = refusal

    def _final_text(self, key: TextKey, kind: DeltaKind, upstream: str) -> str:
        """The client's form of a text that has ended (see the module docstring)."""
        final = self._final.get(key)
        if final is not None:
            return final
        if key in self._released:
            self._pre.append(self._flush_key(key))
            return self._final[key]
        if not upstream:
            return upstream  # an empty part announced by `*.added`: its text is still to come
        stage = self._factory(kind) if self._factory is not None else None
        if stage is None:
            final = upstream
        else:
            head, refusal = stage.push(upstream)
            self._refuse(refusal)
            tail, refusal = stage.flush()
            self._refuse(refusal)
            final = head + tail
        self._final[key] = final
        return final

    def _flush_key(self, key: TextKey) -> bytes:
        """End one streamed text: release what its window held as one extra delta, fix its final form."""
        stage = self._stages.get(key)
        kept: list[Any] | None = None
        if type(stage) is AlignedStage:
            tail, kept, refusal = stage.flush_tokens()
        else:
            tail, refusal = stage.flush() if stage is not None else ("", None)
        self._refuse(refusal)
        out = b""
        if tail and self.refusal is None:
            self._released[key].append(tail)
            out = self._extra_delta(key, tail, kept)
        self._final[key] = "".join(self._released[key])
        return out

    def _extra_delta(self, key: TextKey, text: str, kept: list[Any] | None = None) -> bytes:
        """`kept`: the entries of the tokens that spell `text`, when they can go with it."""
        etype, ids = self._ids[key]
        obj: dict[str, Any] = {"type": etype, "sequence_number": self._seq, **ids, "delta": text}
        if etype == "response.output_text.delta":
            obj["logprobs"] = kept or []
        self._seq += 1
        self.output_released = True
        return self._encode_event(etype, orjson.dumps(obj), obj)

    def flush_open(self) -> bytes:
        """End every streamed text that has not ended yet (the terminal event is next, or the stream ends)."""
        return b"".join([self._flush_key(key) for key in list(self._released) if key not in self._final])

    def error_event(self, error: dict[str, Any]) -> bytes:
        """The gateway's own closing error event, numbered after everything sent. Both shapes at once:
        the documented flat `code`/`message`/`param`, and the nested `error` object the SDKs raise on."""
        obj = {"type": "error", "sequence_number": self._seq, "code": error.get("code"),
               "message": error.get("message"), "param": error.get("param"), "error": error}
        self._seq += 1
        return self._encode_event("error", orjson.dumps(obj), obj)


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _error_object(ev: ResponsesEvent) -> dict[str, Any]:
    f = ev.failure
    obj = ev.obj or {}
    message = obj.get("message")
    return {"message": message if isinstance(message, str) else (f.message if f else "upstream error"),
            "type": (f.type if f and f.type else None) or "api_error",
            "param": obj.get("param") if isinstance(obj.get("param"), str) else None,
            "code": obj.get("code") if obj.get("code") is not None else (f.code if f else None)}
