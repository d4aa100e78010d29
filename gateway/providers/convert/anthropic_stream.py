"""Anthropic Messages stream and body -> OpenAI `chat.completion.chunk` / `chat.completion`, sans I/O.

Every event is dispatched on its JSON `type`, else on the SSE `event:` name (either may be missing). The mapping:

    message_start        the role chunk (preamble); id, model and input usage are remembered
    ping                 nothing
    content_block_start  text/thinking: nothing (or their text, if the block starts non-empty);
                         tool_use: a tool_calls delta with id, name and arguments ""
    text_delta           delta.content
    thinking_delta       delta.reasoning_content
    input_json_delta     delta.tool_calls[].function.arguments; the tool index is the order of the
                         tool_use blocks, whatever their content-block index
    content_block_stop   nothing; for a tool_use block that streamed no arguments, arguments "{}"
    message_delta        the finish chunk (stop_reason -> finish_reason), then a `choices: []` chunk
                         with usage (the pipeline forwards it only to a client that asked)
    message_stop         the end of the protocol
    error                an InbandError classified from `error.type`
    anything else        ignored (signature_delta, citations_delta, server tool blocks, new types)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson

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
from gateway.core.messages.wire import UsageCounts, classify_anthropic_error
from gateway.core.sse import SSEEvent
from gateway.providers.base import ChatChunk, ParsedBody, json_value, not_an_object
from gateway.providers.convert.chat_chunks import ChatChunks, completion_body
from gateway.providers.convert.openai_chat import parse_openai_body

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",  # a server tool paused the turn; the client may send it back to continue
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

def finish_reason(stop_reason: Any) -> str:
    return FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class AnthropicStreamParser:
    """One per attempt: remembers the message id/model, usage and the tool-call numbering."""

    __slots__ = ("_out", "_tool_args_seen", "_tools", "usage")
    shape = None  # every event is parsed: Anthropic's are translated, never forwarded as they came

    def __init__(self, created: int) -> None:
        self._out = ChatChunks(created)
        self._tools: dict[int, int] = {}  # content-block index -> OpenAI tool-call index
        self._tool_args_seen: set[int] = set()  # tool-call indices that got argument text
        self.usage = UsageCounts()

    def parse(self, event: SSEEvent) -> list[ChatChunk]:
        obj = json_value(event.data)
        if not isinstance(obj, dict):
            return not_an_object(event.data)
        kind = obj.get("type")
        if not isinstance(kind, str):
            kind = event.event or ""
        handler = _HANDLERS.get(kind)
        return handler(self, obj) if handler is not None else []

    # --- chunks ---

    def _start(self) -> list[ChatChunk]:
        """The role chunk, once: also when a non-conformant stream skips message_start."""
        return self._out.start([self.usage.event()]) if not self._out.started else []

    def _text(self, kind: DeltaKind, text: Any) -> list[ChatChunk]:
        if not isinstance(text, str) or not text:
            return []
        return [*self._start(), self._out.text(kind, text)]

    def _tool_start(self, block_index: int | None, block: dict[str, Any]) -> list[ChatChunk]:
        """A tool_use block opens. Inside message_start (block_index None) the block is already whole."""
        n = len(self._tools)
        self._tools[block_index if block_index is not None else -1 - n] = n
        tool_input = block.get("input")
        args = orjson.dumps(tool_input).decode() if isinstance(tool_input, dict) and tool_input else ""
        if not args and block_index is None:
            args = "{}"
        if args:
            self._tool_args_seen.add(n)
        call_id = str(block.get("id") or f"call_{n}")
        return [*self._start(), self._out.tool_call(n, call_id, str(block.get("name") or ""), args)]

    def _tool_args(self, block_index: int | None, partial: Any) -> list[ChatChunk]:
        n = self._tools.get(block_index) if block_index is not None else None
        if n is None or not isinstance(partial, str) or not partial:
            return []  # a server tool's input, or the empty first fragment
        self._tool_args_seen.add(n)
        return [self._out.tool_call(n, None, None, partial)]

    def _finish(self, stop_reason: Any) -> list[ChatChunk]:
        return [*self._start(), self._out.finish(finish_reason(stop_reason)), self._out.usage(self.usage.event())]

    # --- event handlers ---

    def on_message_start(self, obj: dict[str, Any]) -> list[ChatChunk]:
        msg = obj.get("message")
        msg = msg if isinstance(msg, dict) else {}
        if self._out.started:
            return []  # a duplicated message_start must not produce a second role chunk
        self._out.base["id"] = str(msg.get("id") or "")
        self._out.base["model"] = str(msg.get("model") or "")
        self.usage.update(msg.get("usage"))
        out = self._start()
        content = msg.get("content")
        for block in content if isinstance(content, list) else ():  # rare: a message that starts filled
            if isinstance(block, dict):
                out += self._block(None, block)
        if msg.get("stop_reason"):
            out += self._finish(msg["stop_reason"])
        return out

    def _block(self, index: int | None, block: dict[str, Any]) -> list[ChatChunk]:
        btype = block.get("type")
        if btype == "tool_use":
            return self._tool_start(index, block)
        if btype == "text":
            return self._text(DeltaKind.CONTENT, block.get("text"))
        if btype == "thinking":
            return self._text(DeltaKind.REASONING, block.get("thinking"))
        return []  # redacted_thinking, server tools and their results, new block types

    def on_block_start(self, obj: dict[str, Any]) -> list[ChatChunk]:
        block = obj.get("content_block")
        return self._block(_int(obj.get("index")), block) if isinstance(block, dict) else []

    def on_block_delta(self, obj: dict[str, Any]) -> list[ChatChunk]:
        delta = obj.get("delta")
        if not isinstance(delta, dict):
            return []
        dtype = delta.get("type")
        if dtype == "text_delta":
            return self._text(DeltaKind.CONTENT, delta.get("text"))
        if dtype == "thinking_delta":
            return self._text(DeltaKind.REASONING, delta.get("thinking"))
        if dtype == "input_json_delta":
            return self._tool_args(_int(obj.get("index")), delta.get("partial_json"))
        return []

    def on_block_stop(self, obj: dict[str, Any]) -> list[ChatChunk]:
        """A tool without arguments streams none at all; OpenAI clients json.loads() the arguments, so
        it gets "{}", as Anthropic's own final `input` is {}."""
        index = _int(obj.get("index"))
        n = self._tools.get(index) if index is not None else None
        if n is None or n in self._tool_args_seen:
            return []
        return self._tool_args(index, "{}")

    def on_message_delta(self, obj: dict[str, Any]) -> list[ChatChunk]:
        self.usage.update(obj.get("usage"))
        delta = obj.get("delta")
        stop = delta.get("stop_reason") if isinstance(delta, dict) else None
        if stop:
            return self._finish(stop)
        return [self._out.usage(self.usage.event())]

    def on_message_stop(self, obj: dict[str, Any]) -> list[ChatChunk]:
        return [ChatChunk([], None, done=True)]

    def on_error(self, obj: dict[str, Any]) -> list[ChatChunk]:
        return [ChatChunk([InbandError(classify_anthropic_error(obj.get("error"), None))], None)]

    def on_ignored(self, obj: dict[str, Any]) -> list[ChatChunk]:
        return []


_Handler = Callable[[AnthropicStreamParser, dict[str, Any]], list[ChatChunk]]
_HANDLERS: dict[str, _Handler] = {
    "message_start": AnthropicStreamParser.on_message_start,
    "content_block_start": AnthropicStreamParser.on_block_start,
    "content_block_delta": AnthropicStreamParser.on_block_delta,
    "content_block_stop": AnthropicStreamParser.on_block_stop,
    "message_delta": AnthropicStreamParser.on_message_delta,
    "message_stop": AnthropicStreamParser.on_message_stop,
    "ping": AnthropicStreamParser.on_ignored,
    "error": AnthropicStreamParser.on_error,
}


def message_events(msg: dict[str, Any]) -> tuple[dict[str, Any], list[StreamEvent]]:
    """A whole Anthropic message -> (the OpenAI assistant message, its typed events, usage and finish
    excluded)."""
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    events: list[StreamEvent] = []
    content = msg.get("content")
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif btype == "thinking" and isinstance(block.get("thinking"), str):
            thinking.append(block["thinking"])
        elif btype == "tool_use":
            tool_input = block.get("input")
            args = orjson.dumps(tool_input if isinstance(tool_input, dict) else {}).decode()
            call_id, name = str(block.get("id") or f"call_{len(calls)}"), str(block.get("name") or "")
            events.append(ToolCallDelta(0, len(calls), call_id, name, args))
            calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": args}})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None, "refusal": None}
    if thinking:
        message["reasoning_content"] = "".join(thinking)
        events.insert(0, OutputDelta(0, DeltaKind.REASONING, message["reasoning_content"]))
    if message["content"]:
        events.insert(1 if thinking else 0, OutputDelta(0, DeltaKind.CONTENT, message["content"]))
    if calls:
        message["tool_calls"] = calls
    return message, events


def parse_anthropic_body(body: bytes, created: int) -> ParsedBody:
    """A Messages API body -> an OpenAI `chat.completion` body and its events.

    An OpenAI `chat.completion` body is read as such: the pipeline re-reads the body it already
    translated (after redaction), and must get the same events back, cache writes included."""
    obj = json_value(body)
    if not isinstance(obj, dict):
        return ParsedBody({}, [InbandError(Failure(FailureKind.MALFORMED, "upstream body is not a JSON object"))])
    if obj.get("object") == "chat.completion":
        return _reread_openai(body, obj)
    if obj.get("type") == "error" or (obj.get("error") is not None and "content" not in obj):
        return ParsedBody({}, [InbandError(classify_anthropic_error(obj.get("error"), None))])
    message, events = message_events(obj)
    reason = finish_reason(obj.get("stop_reason"))
    counts = UsageCounts()
    counts.update(obj.get("usage"))
    usage = counts.event()
    events += [Finish(0, reason), usage]
    base = {"id": str(obj.get("id") or ""), "created": created, "model": str(obj.get("model") or "")}
    return ParsedBody(completion_body(base, message, reason, usage), events)


def _reread_openai(body: bytes, obj: dict[str, Any]) -> ParsedBody:
    parsed = parse_openai_body(body)
    details = obj.get("usage", {}).get("prompt_tokens_details") if isinstance(obj.get("usage"), dict) else None
    writes = details.get("cache_write_tokens") if isinstance(details, dict) else None
    if not isinstance(writes, int) or isinstance(writes, bool) or not writes:
        return parsed
    events: list[StreamEvent] = [dataclasses.replace(e, cache_creation_input=writes) if isinstance(e, Usage) else e
                                 for e in parsed.events]
    return ParsedBody(parsed.obj, events)
