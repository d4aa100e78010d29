"""OpenAI Chat Completions stream and body -> Anthropic Messages events / Message, sans I/O.

The other direction of `convert.anthropic_stream`. One lifecycle per answer, as Anthropic sends it:

    first chunk          message_start (id and model of the chunk; usage 0 until the end)
    content              a `text` block: content_block_start, text_delta ...
    reasoning_content    a `thinking` block (without a signature: OpenAI's shape has none), thinking_delta ...
    tool_calls[i]        a `tool_use` block per call index (id, name, input_json_delta per fragment)
                         a switch of kind closes the open block (content_block_stop)
    finish_reason        closes the open block, then writes what was held (below); stop -> end_turn,
                         length -> max_tokens, tool_calls -> tool_use, content_filter -> refusal
    usage                (after the finish) message_delta with the stop reason and the usage, message_stop;
                         without a usage chunk the same at `[DONE]` or at the end of the bytes
    error                an `error` event carrying the chat failure as classified (for the retry policy)

Only choice 0 is read: the Messages API has no `n`.

Parallel tool calls: a chat stream may interleave the argument fragments of its calls (index 0, 1, 0,
1, ...) and send text after a call began, but a Messages stream has one open block at a time and a
block never reopens. So the first call streams live in its block, which stays open until the finish
(a later fragment of it may still come); every later call is held, as are text and thinking that come
while a call's block is open, and at the finish they follow, in order: the held text, then each held
call whole (its block's start, its arguments as one input_json_delta, its stop). Any interleaving thus
gives each call all its arguments, and the text its order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.core.chat.assemble import ChatAssembler
from gateway.core.chat.stream import ChatChunk, StreamParser
from gateway.core.events import DeltaKind, Finish, InbandError, OutputDelta, StreamEvent, ToolCallDelta, Usage
from gateway.core.messages.wire import ANTHROPIC_TYPE_BY_STATUS, MessagesEvent, parse_event
from gateway.core.sse import SSEEvent
from gateway.providers.convert.tool_arguments import arguments_object

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                "content_filter": "refusal"}


def anthropic_usage(u: Usage | None) -> dict[str, object]:
    """OpenAI-normalised usage -> Anthropic's fields (`Usage.as_anthropic`: reasoning as
    `output_tokens_details.thinking_tokens`); none reported: zeros."""
    return {"input_tokens": 0, "output_tokens": 0} if u is None else u.as_anthropic()


def error_event(e: InbandError) -> MessagesEvent:
    f = e.failure
    etype = ANTHROPIC_TYPE_BY_STATUS.get(f.status or 0, "api_error")
    return MessagesEvent("error", {"type": "error", "error": {"type": etype, "message": f.message}}, None, [e])


@dataclass(slots=True)
class _HeldCall:
    """A tool call held until the finish (see the module docstring)."""

    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class MessagesFromChat:
    """Per attempt: the chat translator's stream parser, and the Anthropic lifecycle built from it."""

    __slots__ = ("_block", "_chat", "_ended", "_held", "_held_text", "_next", "_numbering", "_started", "_stop",
                 "_tools", "_usage")
    native = False  # its events are built here, never an upstream's bytes

    def __init__(self, chat: StreamParser) -> None:
        self._chat = chat
        self._started = False
        self._block: tuple[str, int] | None = None  # the open block: (kind key, chat tool index or -1)
        self._next = 0  # the next content-block index
        self._tools: set[int] = set()  # chat tool indices seen
        self._held: dict[int, _HeldCall] = {}  # the later calls, in the order they began
        self._held_text: list[tuple[DeltaKind, str]] = []  # text that came while a call's block was open
        self._numbering: ChatAssembler | None = None  # numbers the calls of a server that sends no index
        self._stop: str | None = None  # the stop reason, once the finish came
        self._usage: Usage | None = None
        self._ended = False

    def parse(self, event: SSEEvent) -> list[MessagesEvent]:
        out: list[MessagesEvent] = []
        for ch in self._chat.parse(event):
            self._chunk(ch, out)
        return out

    def finish(self) -> list[MessagesEvent]:
        out: list[MessagesEvent] = []
        self._end(out)
        return out

    def _chunk(self, ch: ChatChunk, out: list[MessagesEvent]) -> None:
        if ch.done:
            self._end(out)
            return
        if not self._started and ch.obj is not None and not any(type(e) is InbandError for e in ch.events):
            self._start(ch.obj, out)
        for e in ch.events:
            self._event(e, out)

    def _start(self, obj: dict[str, Any], out: list[MessagesEvent]) -> None:
        self._started = True
        msg: dict[str, Any] = {"id": f"msg_{obj.get('id') or 'gateway'}", "type": "message", "role": "assistant",
                               "content": [], "model": str(obj.get("model") or ""), "stop_reason": None,
                               "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
        out.append(parse_event({"type": "message_start", "message": msg}, None))

    def _event(self, e: StreamEvent, out: list[MessagesEvent]) -> None:
        t = type(e)
        if t is OutputDelta:
            assert isinstance(e, OutputDelta)
            if e.choice == 0 and e.text and self._stop is None:
                if self._block is not None and self._block[0] == "tool":
                    self._held_text.append((e.kind, e.text))
                else:
                    self._text(e.kind, e.text, out)
        elif t is ToolCallDelta:
            assert isinstance(e, ToolCallDelta)
            if e.choice == 0 and self._stop is None:
                self._tool(e, out)
        elif t is Finish:
            assert isinstance(e, Finish)
            if e.choice == 0 and self._stop is None:
                self._close(out)
                self._write_held(out)
                self._stop = STOP_REASONS.get(e.reason, "end_turn")
        elif t is Usage:
            assert isinstance(e, Usage)
            self._usage = e
            if self._stop is not None:
                self._end(out)
        elif t is InbandError:
            assert isinstance(e, InbandError)
            out.append(error_event(e))

    def _open(self, key: tuple[str, int], block: dict[str, Any], out: list[MessagesEvent]) -> int:
        if self._block != key:
            self._close(out)
            self._block = key
            out.append(parse_event({"type": "content_block_start", "index": self._next, "content_block": block},
                                   None))
            self._next += 1
        return self._next - 1

    def _close(self, out: list[MessagesEvent]) -> None:
        if self._block is not None:
            out.append(parse_event({"type": "content_block_stop", "index": self._next - 1}, None))
            self._block = None

    def _text(self, kind: DeltaKind, text: str, out: list[MessagesEvent]) -> None:
        if kind is DeltaKind.REASONING:
            index = self._open(("thinking", -1), {"type": "thinking", "thinking": "", "signature": ""}, out)
            delta = {"type": "thinking_delta", "thinking": text}
        else:  # content, and a refusal's text (Anthropic carries a refusal as text + stop_reason)
            index = self._open(("text", -1), {"type": "text", "text": ""}, out)
            delta = {"type": "text_delta", "text": text}
        out.append(parse_event({"type": "content_block_delta", "index": index, "delta": delta}, None))

    def _tool(self, e: ToolCallDelta, out: list[MessagesEvent]) -> None:
        if e.index < 0:  # a server that numbers no call: numbered as the chat relay does
            if self._numbering is None:
                self._numbering = ChatAssembler()
            e = (self._numbering.feed([e]) or [e])[0]
        key = ("tool", e.index)
        if self._block != key and self._tools:  # a later call, or a fragment of one: held
            call = self._held.setdefault(e.index, _HeldCall())
            call.id, call.name = call.id or e.id, call.name or e.name
            if e.arguments:
                call.arguments.append(e.arguments)
            return
        self._tools.add(e.index)
        self._tool_block(key, e.id, e.name, e.arguments, out)

    def _tool_block(self, key: tuple[str, int], call_id: str | None, name: str | None, arguments: str | None,
                    out: list[MessagesEvent]) -> None:
        block = {"type": "tool_use", "id": call_id or f"toolu_{key[1]}", "name": name or "", "input": {}}
        index = self._open(key, block, out)
        if arguments:
            delta = {"type": "input_json_delta", "partial_json": arguments}
            out.append(parse_event({"type": "content_block_delta", "index": index, "delta": delta}, None))

    def _write_held(self, out: list[MessagesEvent]) -> None:
        """At the finish (the open block closed): the held text, then each held call whole."""
        for kind, text in self._held_text:
            self._text(kind, text, out)
        for i, call in self._held.items():
            self._tool_block(("tool", i), call.id, call.name, "".join(call.arguments), out)
        self._close(out)
        self._held_text, self._held = [], {}

    def _end(self, out: list[MessagesEvent]) -> None:
        """The answer's end, once, after its finish (without one the stream ended early)."""
        if self._ended or self._stop is None:
            return
        self._ended = True
        out.append(parse_event({"type": "message_delta", "delta": {"stop_reason": self._stop, "stop_sequence": None},
                                "usage": anthropic_usage(self._usage)}, None))
        out.append(parse_event({"type": "message_stop"}, None))


def message_from_completion(obj: dict[str, Any], usage: Usage | None) -> dict[str, Any]:
    """A non-stream `chat.completion` -> the Message object (choice 0)."""
    choices = obj.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    msg = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    assert isinstance(msg, dict)
    content: list[dict[str, Any]] = []
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = msg.get("content") or msg.get("refusal")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    for n, call in enumerate(msg.get("tool_calls") or ()):
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            content.append({"type": "tool_use", "id": str(call.get("id") or f"toolu_{n}"),
                            "name": str(fn.get("name") or ""), "input": arguments_object(fn.get("arguments"))})
    reason = choice.get("finish_reason")
    return {"id": f"msg_{obj.get('id') or 'gateway'}", "type": "message", "role": "assistant", "content": content,
            "model": str(obj.get("model") or ""),
            "stop_reason": STOP_REASONS.get(reason, "end_turn") if isinstance(reason, str) else "end_turn",
            "stop_sequence": None, "usage": anthropic_usage(usage)}
