"""OpenAI Chat Completions stream and body -> OpenAI Responses events / `response` object, sans I/O (the
Responses bridge, docs/responses-bridge.md).

One lifecycle per answer, as OpenAI sends it:

    first chunk          response.created, response.in_progress (id `resp_<chat id>`, model of the chunk)
    reasoning            a `reasoning` item (`rs_…`) with one `reasoning_text` content part (the raw
                         reasoning a chat server streams, not a summary): output_item.added,
                         content_part.added, reasoning_text.delta ...
    content / refusal    a `message` item (`msg_…`) with an `output_text` (or `refusal`) part
                         a switch of kind, or a tool call, ends the open text item (its `*.done`,
                         content_part.done, output_item.done); text after it opens a new item
    tool_calls[i]        a `function_call` item (`fc_…`, `call_id` the chat call's id) per chat call index,
                         streamed live (function_call_arguments.delta); calls of a custom tool are held
                         and written whole at the finish as a `custom_tool_call` item (its free-form
                         `input` is the `input` string of the chat function's arguments, known only
                         when they are complete)
    finish_reason        ends every open item in output order; stop / tool_calls -> completed, length ->
                         incomplete (max_output_tokens), content_filter -> incomplete (content_filter)
    usage                (after the finish) the terminal `response.completed` / `response.incomplete`
                         with the whole `response` object and its usage; without a usage chunk the
                         same at `[DONE]` or at the end of the bytes (`finish`)
    error                an `error` event carrying the chat failure as classified (for the retry policy)

Item ids and output indexes are assigned in the order items begin; a parallel call's fragments land on
its own item by its output_index, so any interleaving keeps each call's arguments whole. Only choice 0
is read: the Responses API has no `n`. A non-stream body is the same machine fed the completion's
events, so both transports give one `response` object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.core.chat.assemble import ChatAssembler
from gateway.core.chat.stream import ChatChunk, StreamParser
from gateway.core.events import DeltaKind, Finish, InbandError, OutputDelta, StreamEvent, ToolCallDelta, Usage
from gateway.core.responses.wire import ResponsesEvent, ResponsesParser
from gateway.core.sse import SSEEvent
from gateway.providers.convert.responses_chat_request import CUSTOM_INPUT, Echo

# chat finish_reason -> (status, incomplete_details.reason)
_ENDS: dict[str, tuple[str, str | None]] = {"length": ("incomplete", "max_output_tokens"),
                                            "content_filter": ("incomplete", "content_filter")}
# text kind -> (item type, part type, the part's text field, delta event, done event)
_TEXT: dict[DeltaKind, tuple[str, str, str, str, str]] = {
    DeltaKind.CONTENT: ("message", "output_text", "text", "response.output_text.delta", "response.output_text.done"),
    DeltaKind.REFUSAL: ("message", "refusal", "refusal", "response.refusal.delta", "response.refusal.done"),
    DeltaKind.REASONING: ("reasoning", "reasoning_text", "text", "response.reasoning_text.delta",
                          "response.reasoning_text.done"),
}
_PREFIX = {"message": "msg", "reasoning": "rs", "function_call": "fc", "custom_tool_call": "ctc"}


def responses_usage(u: Usage | None) -> dict[str, Any] | None:
    """OpenAI-normalised usage -> `ResponseUsage` (the same semantics: input includes cached tokens)."""
    return None if u is None else u.as_responses()


@dataclass(slots=True)
class _TextItem:
    oi: int
    item: dict[str, Any]
    kind: DeltaKind
    part: int = 0  # content_index of the open part
    parts: list[str] = field(default_factory=list)  # the open part's text


@dataclass(slots=True)
class _Call:
    oi: int
    item: dict[str, Any]
    custom: bool
    arguments: list[str] = field(default_factory=list)


class ResponsesFromChat:
    """Per attempt: the chat translator's stream parser, and the Responses lifecycle built from it."""

    __slots__ = ("_calls", "_chat", "_echo", "_ended", "_meta", "_numbering", "_output", "_parser", "_seq",
                 "_started", "_status", "_text", "_usage")

    def __init__(self, chat: StreamParser | None, echo: Echo) -> None:
        self._chat = chat  # None: fed typed events directly (`response_from_completion`)
        self._echo = echo
        self._parser = ResponsesParser()
        self._seq = 0
        self._started = False
        self._meta: dict[str, Any] = {}  # id (the chat id), model, created
        self._output: list[dict[str, Any] | None] = []  # each item once done, by output_index
        self._text: _TextItem | None = None
        self._calls: dict[int, _Call] = {}  # by chat tool index, in the order they began
        self._numbering: ChatAssembler | None = None  # numbers the calls of a server that sends no index
        self._status: tuple[str, str | None] | None = None  # once the finish came
        self._usage: Usage | None = None
        self._ended = False

    # -- reading -------------------------------------------------------------------------------------

    def parse(self, event: SSEEvent) -> list[ResponsesEvent]:
        assert self._chat is not None
        out: list[ResponsesEvent] = []
        for ch in self._chat.parse(event):
            self.chunk(ch, out)
        return out

    def finish(self) -> list[ResponsesEvent]:
        """The end of the upstream's bytes: the terminal event, if the finish came and it is still owed."""
        out: list[ResponsesEvent] = []
        self._end(out)
        return out

    def chunk(self, ch: ChatChunk, out: list[ResponsesEvent]) -> None:
        if ch.done:
            self._end(out)
            return
        if not self._started and ch.obj is not None and not any(type(e) is InbandError for e in ch.events):
            self.start(ch.obj, out)
        for e in ch.events:
            self.event(e, out)

    def start(self, obj: dict[str, Any], out: list[ResponsesEvent]) -> None:
        self._started = True
        created = obj.get("created")
        self._meta = {"id": str(obj.get("id") or "gateway"), "model": str(obj.get("model") or ""),
                      "created": created if isinstance(created, int) and not isinstance(created, bool) else 0}
        start = self.response("in_progress")
        self._emit({"type": "response.created", "response": start}, out)
        self._emit({"type": "response.in_progress", "response": start}, out)

    def event(self, e: StreamEvent, out: list[ResponsesEvent]) -> None:
        t = type(e)
        if t is OutputDelta:
            assert isinstance(e, OutputDelta)
            if e.choice == 0 and e.text and self._status is None:
                self._delta(e.kind, e.text, out)
        elif t is ToolCallDelta:
            assert isinstance(e, ToolCallDelta)
            if e.choice == 0 and self._status is None:
                self._tool(e, out)
        elif t is Finish:
            assert isinstance(e, Finish)
            if e.choice == 0 and self._status is None:
                self._close_all(out)
                self._status = _ENDS.get(e.reason, ("completed", None))
        elif t is Usage:
            assert isinstance(e, Usage)
            self._usage = e
            if self._status is not None:
                self._end(out)
        elif t is InbandError:
            assert isinstance(e, InbandError)
            f = e.failure
            obj = {"type": "error", "sequence_number": self._next_seq(), "code": f.code, "message": f.message,
                   "param": f.param}
            out.append(ResponsesEvent("error", obj, None, [e]))

    # -- the answer's object -------------------------------------------------------------------------

    def response(self, status: str, incomplete: str | None = None) -> dict[str, Any]:
        """The `response` object as of now (the terminal one carries every item and the usage)."""
        meta = self._meta
        settings = dict(self._echo.settings or {})
        resp: dict[str, Any] = {
            "id": f"resp_{meta['id']}", "object": "response", "created_at": meta["created"], "status": status,
            "error": None, "incomplete_details": {"reason": incomplete} if incomplete else None,
            "instructions": settings.pop("instructions", None), "model": meta["model"],
            "output": [item for item in self._output if item is not None] if status != "in_progress" else [],
            "parallel_tool_calls": settings.pop("parallel_tool_calls", True),
            "tool_choice": settings.pop("tool_choice", "auto"), "tools": settings.pop("tools", []),
            "previous_response_id": None, "usage": responses_usage(self._usage) if status != "in_progress" else None,
        }
        resp.update(settings)
        return resp

    def final(self) -> dict[str, Any]:
        """The terminal `response` object (a body's: ended or not, it is all there is)."""
        status, reason = self._status or ("completed", None)
        return self.response(status, reason)

    # -- text items ----------------------------------------------------------------------------------

    def _delta(self, kind: DeltaKind, text: str, out: list[ResponsesEvent]) -> None:
        item_type, part_type, _, delta_type, _ = _TEXT[kind]
        cur = self._text
        if cur is not None and cur.item["type"] != item_type:
            self._close_text(out)
            cur = None
        if cur is None:
            cur = self._text = self._open_text(kind, out)
        elif cur.kind is not kind:  # output_text <-> refusal within one message: a new part
            self._close_part(cur, out)
            cur.part += 1
            cur.kind = kind
            self._open_part(cur, out)
        cur.parts.append(text)
        ids = {"item_id": cur.item["id"], "output_index": cur.oi, "content_index": cur.part}
        ev: dict[str, Any] = {"type": delta_type, **ids, "delta": text}
        if part_type == "output_text":
            ev["logprobs"] = []
        self._emit(ev, out)

    def _open_text(self, kind: DeltaKind, out: list[ResponsesEvent]) -> _TextItem:
        item_type = _TEXT[kind][0]
        oi = len(self._output)
        self._output.append(None)
        if item_type == "message":
            item: dict[str, Any] = {"id": self._id("message", oi), "type": "message", "status": "in_progress",
                                    "role": "assistant", "content": []}
        else:
            item = {"id": self._id("reasoning", oi), "type": "reasoning", "summary": [], "content": []}
        self._emit({"type": "response.output_item.added", "output_index": oi, "item": dict(item, content=[])}, out)
        cur = _TextItem(oi, item, kind)
        self._open_part(cur, out)
        return cur

    def _open_part(self, cur: _TextItem, out: list[ResponsesEvent]) -> None:
        self._emit({"type": "response.content_part.added", "item_id": cur.item["id"], "output_index": cur.oi,
                    "content_index": cur.part, "part": _part(cur.kind, "")}, out)

    def _close_part(self, cur: _TextItem, out: list[ResponsesEvent]) -> None:
        _, _, text_field, _, done_type = _TEXT[cur.kind]
        text, cur.parts = "".join(cur.parts), []
        ids = {"item_id": cur.item["id"], "output_index": cur.oi, "content_index": cur.part}
        done: dict[str, Any] = {"type": done_type, **ids, text_field: text}
        if cur.kind is DeltaKind.CONTENT:
            done["logprobs"] = []
        part = _part(cur.kind, text)
        cur.item["content"].append(part)
        self._emit(done, out)
        self._emit({"type": "response.content_part.done", **ids, "part": part}, out)

    def _close_text(self, out: list[ResponsesEvent]) -> None:
        cur, self._text = self._text, None
        if cur is None:
            return
        self._close_part(cur, out)
        if cur.item["type"] == "message":
            cur.item["status"] = "completed"
        self._done_item(cur.oi, cur.item, out)

    # -- tool calls ----------------------------------------------------------------------------------

    def _tool(self, e: ToolCallDelta, out: list[ResponsesEvent]) -> None:
        if e.index < 0:  # a server that numbers no call: numbered as the chat relay does
            if self._numbering is None:
                self._numbering = ChatAssembler()
            e = (self._numbering.feed([e]) or [e])[0]
        call = self._calls.get(e.index)
        if call is None:
            self._close_text(out)
            call = self._calls[e.index] = self._open_call(e, out)
        if e.arguments:
            call.arguments.append(e.arguments)
            if not call.custom:
                self._emit({"type": "response.function_call_arguments.delta", "item_id": call.item["id"],
                            "output_index": call.oi, "delta": e.arguments}, out)

    def _open_call(self, e: ToolCallDelta, out: list[ResponsesEvent]) -> _Call:
        oi = len(self._output)
        self._output.append(None)
        name = e.name or ""
        custom = name in self._echo.custom_tools
        itype = "custom_tool_call" if custom else "function_call"
        call_id = e.id or f"call_{self._meta.get('id', 'gateway')}_{oi}"
        item: dict[str, Any] = {"id": self._id(itype, oi), "type": itype, "status": "in_progress",
                                "call_id": call_id, "name": name}
        item["input" if custom else "arguments"] = ""
        if not custom:
            self._emit({"type": "response.output_item.added", "output_index": oi, "item": dict(item)}, out)
        return _Call(oi, item, custom)

    def _close_call(self, call: _Call, out: list[ResponsesEvent]) -> None:
        args = "".join(call.arguments)
        item, ids = call.item, {"item_id": call.item["id"], "output_index": call.oi}
        item["status"] = "completed"
        if call.custom:
            item["input"] = _custom_input(args)
            self._emit({"type": "response.output_item.added", "output_index": call.oi,
                        "item": dict(item, input="", status="in_progress")}, out)
            if item["input"]:
                self._emit({"type": "response.custom_tool_call_input.delta", **ids, "delta": item["input"]}, out)
            self._emit({"type": "response.custom_tool_call_input.done", **ids, "input": item["input"]}, out)
        else:
            item["arguments"] = args
            self._emit({"type": "response.function_call_arguments.done", **ids, "name": item["name"],
                        "arguments": args}, out)
        self._done_item(call.oi, item, out)

    # -- the end -------------------------------------------------------------------------------------

    def _close_all(self, out: list[ResponsesEvent]) -> None:
        self._close_text(out)
        for call in sorted(self._calls.values(), key=lambda c: c.oi):
            self._close_call(call, out)
        self._calls = {}

    def _end(self, out: list[ResponsesEvent]) -> None:
        """The answer's end, once, after its finish (without one the stream ended early)."""
        if self._ended or self._status is None:
            return
        self._ended = True
        status, reason = self._status
        etype = "response.completed" if status == "completed" else "response.incomplete"
        self._emit({"type": etype, "response": self.response(status, reason)}, out)
        if self._usage is not None:  # the count as the chat parser read it, for accounting (`counted`)
            end = out[-1]
            out[-1] = ResponsesEvent(end.type, end.obj, end.raw, counted(end.events, self._usage))

    # -- helpers -------------------------------------------------------------------------------------

    def _done_item(self, oi: int, item: dict[str, Any], out: list[ResponsesEvent]) -> None:
        self._output[oi] = item
        self._emit({"type": "response.output_item.done", "output_index": oi, "item": item}, out)

    def _id(self, item_type: str, oi: int) -> str:
        return f"{_PREFIX[item_type]}_{self._meta.get('id', 'gateway')}_{oi}"

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq - 1

    def _emit(self, obj: dict[str, Any], out: list[ResponsesEvent]) -> None:
        obj["sequence_number"] = self._next_seq()
        out.append(self._parser.parse(obj, None))


def _part(kind: DeltaKind, text: str) -> dict[str, Any]:
    _, part_type, text_field, _, _ = _TEXT[kind]
    part: dict[str, Any] = {"type": part_type, text_field: text}
    if part_type == "output_text":
        part["annotations"] = []
        part["logprobs"] = []
    return part


def _custom_input(arguments: str) -> str:
    """A custom tool's free-form input: the `input` string of its chat function's arguments (a model that
    wrote something else gets its arguments as they are, so nothing it said is lost)."""
    try:
        obj = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    value = obj.get(CUSTOM_INPUT) if isinstance(obj, dict) else None
    return value if isinstance(value, str) else arguments


def counted(events: list[StreamEvent], usage: Usage | None) -> list[StreamEvent]:
    """A translated `response`'s typed events with the usage the chat parser read in place of the one its
    `usage` object gives back: that object has no field for the 1-hour part of the cache writes
    (docs/caching.md), so Anthropic's 1-hour writes would be priced as 5-minute ones."""
    if usage is None:
        return events
    return [usage if type(e) is Usage else e for e in events]


def response_from_completion(obj: dict[str, Any], events: list[StreamEvent], echo: Echo) -> dict[str, Any]:
    """A non-stream `chat.completion` and its typed events -> the `response` object (choice 0), through the
    same machine as a stream."""
    build = ResponsesFromChat(None, echo)
    out: list[ResponsesEvent] = []
    build.start(obj, out)
    # a body's message lists content before reasoning; the answer's items have the reasoning first
    for e in sorted(events, key=_body_order):
        build.event(e, out)
    build.event(Finish(0, "stop"), out)  # a body without a finish_reason has ended all the same
    return build.final()


def _body_order(e: StreamEvent) -> int:
    t = type(e)
    if t is OutputDelta:
        assert isinstance(e, OutputDelta)
        return 0 if e.kind is DeltaKind.REASONING else 1
    return {ToolCallDelta: 2, Finish: 3, Usage: 4}.get(t, 5)
