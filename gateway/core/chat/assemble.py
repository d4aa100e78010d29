"""Fold typed chat events into the final answer, and turn a final answer back into stream chunks.

The assembler knows when the first output token has come, keeps the last non-null usage (never a sum:
some servers repeat usage on every chunk), concatenates tool-call argument fragments per (choice, index),
numbers the tool-call deltas that came without an index (`_tool_index`), and renders the OpenAI
`chat.completion` object the non-stream client would have received.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.core.events import (
    DeltaKind,
    Finish,
    InbandError,
    OutputDelta,
    StreamEvent,
    ToolCallDelta,
    Usage,
)

_CONTENT = DeltaKind.CONTENT


@dataclass(slots=True)
class _ToolCall:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Choice:
    text: dict[DeltaKind, list[str]] = field(default_factory=dict)
    tools: dict[int, _ToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    last_tool: int = -1  # the index of the tool call the latest tool-call delta belonged to
    next_tool: int = 0  # one past the highest tool-call index seen
    tool_ids: dict[str, int] = field(default_factory=dict)  # call id -> index


class ChatAssembler:
    __slots__ = ("_choices", "error", "first_token", "usage")

    def __init__(self) -> None:
        self._choices: dict[int, _Choice] = {}
        self.usage: Usage | None = None
        self.first_token = False
        self.error: InbandError | None = None

    def feed(self, events: list[StreamEvent]) -> list[ToolCallDelta] | None:
        """Fold the events in. Returns the tool-call deltas that came without an index, numbered (a
        chunk's list starts again at 0, so a stream's calls can only be numbered here, in order), or
        None when there were none (always, for upstreams that send `index`)."""
        numbered: list[ToolCallDelta] | None = None
        for e in events:
            t = type(e)
            if t is OutputDelta:
                assert isinstance(e, OutputDelta)
                self._text_parts(e.choice, e.kind).append(e.text)
                self.first_token = True
            elif t is ToolCallDelta:
                assert isinstance(e, ToolCallDelta)
                c = self._choice(e.choice)
                index = e.index
                if index < 0:
                    index = _tool_index(c, e.id)
                    e = ToolCallDelta(e.choice, index, e.id, e.name, e.arguments)
                    if numbered is None:
                        numbered = []
                    numbered.append(e)
                c.last_tool = index
                call = c.tools.get(index)
                if call is None:
                    call = c.tools[index] = _ToolCall()
                    c.next_tool = max(c.next_tool, index + 1)
                if not call.id and e.id:
                    call.id = e.id
                    c.tool_ids[e.id] = index
                call.name = call.name or e.name
                if e.arguments:
                    call.arguments.append(e.arguments)
                self.first_token = True
            elif t is Finish:
                assert isinstance(e, Finish)
                self._choice(e.choice).finish_reason = e.reason
            elif t is Usage:
                assert isinstance(e, Usage)
                self.usage = e
            elif t is InbandError:
                assert isinstance(e, InbandError)
                self.error = e
        return numbered

    def add_content(self, choice: int, text: str) -> None:
        """`feed([OutputDelta(choice, CONTENT, text)])` without building the event (the relay's hot path)."""
        self._text_parts(choice, _CONTENT).append(text)
        self.first_token = True

    def add_contents(self, choice: int, texts: list[str]) -> None:
        """`add_content` for the content deltas of one read, in order."""
        if texts:
            self._text_parts(choice, _CONTENT).extend(texts)
            self.first_token = True

    def _text_parts(self, choice: int, kind: DeltaKind) -> list[str]:
        # not `setdefault(kind, [])`: that builds (and drops) a list per delta
        texts = self._choice(choice).text
        parts = texts.get(kind)
        if parts is None:
            parts = texts[kind] = []
        return parts

    def _choice(self, index: int) -> _Choice:
        c = self._choices.get(index)
        if c is None:
            c = self._choices[index] = _Choice()
        return c

    @property
    def finished(self) -> bool:
        """Every choice seen has a finish reason (the protocol's terminal signal, not `[DONE]`)."""
        return bool(self._choices) and all(c.finish_reason for c in self._choices.values())

    def text(self, kind: DeltaKind = DeltaKind.CONTENT) -> str:
        return "".join("".join(c.text.get(kind, ())) for _, c in sorted(self._choices.items()))

    def resume_text(self) -> str | None:
        """The content so far when the answer can be continued from it (docs/continuation.md): one choice, its
        content begun, no tool call or refusal, not finished; else None."""
        c = self._choices.get(0)
        if c is None or len(self._choices) != 1 or c.tools or c.finish_reason or DeltaKind.REFUSAL in c.text:
            return None
        parts = c.text.get(_CONTENT)
        return "".join(parts) if parts else None

    def finish_reason(self, choice: int = 0) -> str | None:
        c = self._choices.get(choice)
        return c.finish_reason if c is not None else None

    def output_bytes(self) -> int:
        """UTF-8 size of everything the answer said (every text kind, tool names and arguments): what a
        usage estimate counts when the provider reported none."""
        n = 0
        for c in self._choices.values():
            n += sum(len(t.encode()) for parts in c.text.values() for t in parts)
            n += sum(len((t.name or "").encode()) + sum(len(a.encode()) for a in t.arguments)
                     for t in c.tools.values())
        return n

    def completion(self, *, id: str, model: str, created: int) -> dict[str, Any]:
        """The `chat.completion` object equivalent to everything fed so far."""
        choices = [_render_choice(i, c) for i, c in sorted(self._choices.items())]
        body: dict[str, Any] = {"id": id, "object": "chat.completion", "created": created, "model": model,
                                "choices": choices}
        if self.usage is not None:
            body["usage"] = self.usage.as_openai()
        return body


def _tool_index(c: _Choice, call_id: str | None) -> int:
    """The index of a tool-call delta that came without one (Gemini's OpenAI endpoint sends each call
    whole in its own chunk, with an id and no index): a call id seen before keeps its index, a new one
    takes the choice's next; a delta with neither continues the choice's latest call (or opens the
    first)."""
    if call_id:
        return c.tool_ids.get(call_id, c.next_tool)
    return c.last_tool if c.last_tool >= 0 else c.next_tool


def _render_choice(index: int, c: _Choice) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(c.text.get(DeltaKind.CONTENT, ())) or None}
    if DeltaKind.REFUSAL in c.text:
        msg["refusal"] = "".join(c.text[DeltaKind.REFUSAL])
    if DeltaKind.REASONING in c.text:
        msg["reasoning_content"] = "".join(c.text[DeltaKind.REASONING])
    if c.tools:
        msg["tool_calls"] = [
            {"id": t.id or f"call_{index}_{i}", "type": "function",
             "function": {"name": t.name or "", "arguments": "".join(t.arguments)}}
            for i, t in sorted(c.tools.items())
        ]
    return {"index": index, "message": msg, "finish_reason": c.finish_reason or "stop", "logprobs": None}


_TEXT_CHUNKS = (("reasoning_content", "reasoning"), ("refusal",), ("content",))


def completion_to_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Re-emit a `chat.completion` body as `chat.completion.chunk`s (learn-once buffered fallback, cache
    hits): per choice a role chunk, one delta per text kind and the tool calls, then the finish chunk;
    usage last, in its own `choices: []` chunk, as OpenAI sends it with include_usage."""
    base = {"id": body.get("id", ""), "object": "chat.completion.chunk", "created": body.get("created", 0),
            "model": body.get("model", "")}
    chunks: list[dict[str, Any]] = []
    for pos, choice in enumerate(body.get("choices") or []):
        if not isinstance(choice, dict):
            continue
        idx = choice.get("index", pos)
        msg = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        assert isinstance(msg, dict)
        chunks.append({**base, "choices": [{"index": idx, "delta": {"role": "assistant", "content": ""},
                                            "finish_reason": None}]})
        for keys in _TEXT_CHUNKS:  # both spellings of the reasoning in one delta: the same text, read once
            delta = {k: msg[k] for k in keys if isinstance(msg.get(k), str) and msg[k]}
            if delta:
                chunks.append({**base, "choices": [{"index": idx, "delta": delta, "finish_reason": None}]})
        calls = msg.get("tool_calls")
        if isinstance(calls, list) and calls:
            deltas = [{"index": i, **{k: v for k, v in c.items() if k in ("id", "type", "function")}}
                      for i, c in enumerate(calls) if isinstance(c, dict)]
            chunks.append({**base, "choices": [{"index": idx, "delta": {"tool_calls": deltas},
                                                "finish_reason": None}]})
        chunks.append({**base, "choices": [{"index": idx, "delta": {},
                                            "finish_reason": choice.get("finish_reason") or "stop"}]})
    if isinstance(body.get("usage"), dict):
        chunks.append({**base, "choices": [], "usage": body["usage"]})
    return chunks
