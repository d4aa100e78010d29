"""The chat-shaped output a translating parser emits (Anthropic's, Google's, Bedrock's through
Anthropic's): the `chat.completion.chunk` envelope of one answer, its role chunk once, a text or tool
call delta, the finish chunk and the usage chunk (`Usage.as_openai`, cache writes always shown: these
providers report them); and the `chat.completion` a whole answer folds into.
Sans I/O; the typed events each chunk carries are the ones the stream cores read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.core.events import DeltaKind, Finish, OutputDelta, StreamEvent, ToolCallDelta, Usage
from gateway.providers.base import ChatChunk

_TEXT_KEYS = {DeltaKind.CONTENT: "content", DeltaKind.REASONING: "reasoning_content",
              DeltaKind.REFUSAL: "refusal"}


class ChatChunks:
    """One answer's chunks: `base` is the envelope (id, object, created, model) every chunk repeats."""

    __slots__ = ("base", "started")

    def __init__(self, created: int) -> None:
        self.base: dict[str, Any] = {"id": "", "object": "chat.completion.chunk", "created": created, "model": ""}
        self.started = False

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**self.base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    def start(self, events: Sequence[StreamEvent] = ()) -> list[ChatChunk]:
        """The role chunk, once (also when a stream skips the event that should open it)."""
        if self.started:
            return []
        self.started = True
        return [ChatChunk(list(events), self.chunk({"role": "assistant", "content": ""}))]

    def text(self, kind: DeltaKind, text: str) -> ChatChunk:
        return ChatChunk([OutputDelta(0, kind, text)], self.chunk({_TEXT_KEYS[kind]: text}))

    def tool_call(self, n: int, call_id: str | None, name: str | None, args: str) -> ChatChunk:
        """A tool call's opening (with its id and name) or a later fragment of its arguments (without)."""
        call: dict[str, Any] = {"index": n, "function": {"arguments": args}}
        if call_id is not None:
            call = {"index": n, "id": call_id, "type": "function", "function": {"name": name or "", "arguments": args}}
        return ChatChunk([ToolCallDelta(0, n, call_id, name, args)], self.chunk({"tool_calls": [call]}))

    def finish(self, reason: str) -> ChatChunk:
        return ChatChunk([Finish(0, reason)], self.chunk({}, reason))

    def usage(self, usage: Usage) -> ChatChunk:
        """The `choices: []` chunk with usage (forwarded only to a client that asked for it)."""
        return ChatChunk([usage], {**self.base, "choices": [], "usage": usage.as_openai(writes_reported=True)})


def completion_body(base: dict[str, Any], message: dict[str, Any], reason: str, usage: Usage) -> dict[str, Any]:
    """A whole answer as a `chat.completion`: `base` gives its id, created and model."""
    return {"id": base["id"], "object": "chat.completion", "created": base["created"], "model": base["model"],
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reason}],
            "usage": usage.as_openai(writes_reported=True)}
