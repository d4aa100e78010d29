"""Hypothesis strategies for valid upstream streams, as any server may legally send them.

An answer is drawn as a value (`ChatAnswer`, a Message, ...), rendered to the upstream protocol's events
in an order its protocol allows (a chat stream interleaves the argument fragments of parallel tool calls
and its text freely; an Anthropic stream has one block open at a time), then framed as an event stream
in any legal way (`framed`: CR, LF or CRLF line ends, a BOM, keep-alive comments, `id:`, `retry:` and
unknown fields, data split over several `data:` lines, `data:` without its space) and cut into reads
(`reads`). The tests compare what the official SDKs make of the gateway's bytes with the one-shot
conversion of the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import orjson
from hypothesis import strategies as st

from tests.responses_scripts import Answer, number

# text with what JSON must escape (quotes, backslashes, control characters), U+2028, non-BMP characters
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
SOME_TEXT = st.lists(TEXT, max_size=4)
_KEY = st.text("abcxyz_", min_size=1, max_size=4)
_SCALAR = st.none() | st.booleans() | st.integers(-1000, 1000) | TEXT
ARGS = st.dictionaries(_KEY, _SCALAR | st.lists(_SCALAR, max_size=2), max_size=3)

Event = tuple[str | None, Any]  # (SSE event name, JSON value or the data's own bytes)


@st.composite
def split_text(draw: st.DrawFn, text: str, max_pieces: int = 4) -> list[str]:
    """`text` cut into pieces at any character boundaries (an empty piece allowed)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=max_pieces - 1)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in pairwise(bounds)]


# -- framing and reads ---------------------------------------------------------------------------------

_EXTRA = st.sampled_from([b"id: 7", b"id", b"retry: 3000", b"x-unknown: y", b": note", b"idx: 1"])


@st.composite
def framed(draw: st.DrawFn, events: list[Event]) -> bytes:
    """The events as one legal event stream (WHATWG HTML §9.2.5)."""
    ending = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    lines: list[bytes] = [b"\xef\xbb\xbf: stream"] if draw(st.booleans()) else []
    for name, value in events:
        if draw(st.integers(0, 9)) == 0:
            lines += [b": keep-alive", b""]
        event = draw(st.lists(_EXTRA, max_size=1)) if draw(st.integers(0, 4)) == 0 else []
        if name is not None:
            event.append(b"event: " + name.encode())
        event += _data_lines(draw, value)
        lines += [*event, b""]
    return ending.join(lines) + ending


def _data_lines(draw: st.DrawFn, value: Any) -> list[bytes]:
    if isinstance(value, bytes):
        return [b"data: " + value]
    style = draw(st.sampled_from(["compact", "compact", "compact", "multi", "bare"]))
    if style == "compact":
        return [b"data: " + orjson.dumps(value)]
    if style == "bare":  # no space after the colon
        return [b"data:" + orjson.dumps(value)]
    lines = [b"data: " + line for line in orjson.dumps(value, option=orjson.OPT_INDENT_2).split(b"\n")]
    return [b"data:", *lines] if draw(st.booleans()) else lines  # an empty first line: data "\n{..."


@st.composite
def reads(draw: st.DrawFn, raw: bytes) -> list[bytes]:
    """`raw` cut into reads: at random points, or in small reads of one size (a partial line grows)."""
    size = draw(st.sampled_from([0, 0, 0, 1, 5, 64]))
    if size:
        return [raw[i:i + size] for i in range(0, len(raw), size)]
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=8)))
    bounds = [0, *cuts, len(raw)]
    return [raw[a:b] for a, b in pairwise(bounds)]


# -- OpenAI Chat Completions -------------------------------------------------------------------------

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18,
         "prompt_tokens_details": {"cached_tokens": 3}}


@dataclass
class ChatAnswer:
    reasoning: str
    text: str
    refusal: bool  # the text is a refusal (`refusal`, not `content`)
    tools: list[tuple[str, str, str]]  # (id, name, arguments JSON)
    finish: str
    usage: str  # "finish" (on the finish chunk), "apart" (a chunk of its own), "none"
    done: bool  # `[DONE]` at the end

    def completion(self) -> dict[str, Any]:
        """The non-stream answer the same server would have given."""
        msg: dict[str, Any] = {"role": "assistant", "content": None if self.refusal else (self.text or None)}
        if self.refusal:
            msg["refusal"] = self.text
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        if self.tools:
            msg["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                 for i, n, a in self.tools]
        out = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
               "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": self.finish}]}
        if self.usage != "none":
            out["usage"] = USAGE
        return out


@st.composite
def chat_answers(draw: st.DrawFn, max_tools: int = 3) -> ChatAnswer:
    tools = [(f"call_{i}", draw(_KEY), orjson.dumps(draw(ARGS)).decode())
             for i in range(draw(st.integers(0, max_tools)))]
    finish = "tool_calls" if tools else draw(st.sampled_from(["stop", "length", "content_filter"]))
    return ChatAnswer(draw(TEXT), draw(TEXT), draw(st.integers(0, 5)) == 0, tools, finish,
                      draw(st.sampled_from(["finish", "apart", "none"])), draw(st.integers(0, 4)) > 0)


def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": choices, **extra}


@st.composite
def chat_events(draw: st.DrawFn, answer: ChatAnswer) -> list[Event]:
    """The answer as chat chunks: its reasoning, text and each tool call's fragments in any interleaving
    (a call's first fragment, with its id and name, after the previous call's first); fragments of
    different calls may share a chunk. Or, as some servers send them, calls without `index`: each
    call's fragments in a row, the first with its id (the relay numbers them)."""
    field = "refusal" if answer.refusal else "content"
    tracks: list[list[dict[str, Any]]] = [
        [{"reasoning_content": p} for p in draw(split_text(answer.reasoning)) if p],
        [{field: p} for p in draw(split_text(answer.text))]]
    indexed = draw(st.integers(0, 4)) > 0
    calls: list[dict[str, Any]] = []
    for n, (cid, name, args) in enumerate(answer.tools):
        pieces = draw(split_text(args, 5))
        at = {"index": n} if indexed else {}
        calls += [{**at, "id": cid, "type": "function", "function": {"name": name, "arguments": pieces[0]}},
                  *({**at, "function": {"arguments": p}} for p in pieces[1:])]
        if indexed:
            tracks.append([{"tool_calls": [c]} for c in calls])
            calls = []
    if not indexed:
        tracks.append([{"tool_calls": [c]} for c in calls])
    deltas = _merge_calls(draw, _interleave(draw, tracks, first_tool=2)) if indexed else \
        _interleave(draw, tracks, first_tool=2)
    events: list[Event] = [(None, chunk({"role": "assistant", "content": ""}))]
    events += [(None, chunk(d)) for d in deltas]
    usage = {"usage": USAGE} if answer.usage == "finish" else {}
    events.append((None, chunk({}, answer.finish, **usage)))
    if answer.usage == "apart":
        events.append((None, chunk(None, usage=USAGE)))
    if answer.done:
        events.append((None, b"[DONE]"))
    return events


def _merge_calls(draw: st.DrawFn, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive fragments of different calls, some in one chunk's `tool_calls` list."""
    out: list[dict[str, Any]] = []
    for d in deltas:
        last = out[-1]["tool_calls"] if out and "tool_calls" in out[-1] else None
        call = d.get("tool_calls", [None])[0]
        if last is not None and call is not None and all(c["index"] != call["index"] for c in last) \
                and draw(st.booleans()):
            last.append(call)
        else:
            out.append({"tool_calls": [dict(call)]} if call is not None else d)
    return out


def _interleave(draw: st.DrawFn, tracks: list[list[Any]], first_tool: int) -> list[Any]:
    """The tracks merged in an order drawn by hypothesis, each track in its own order; track k > first_tool
    starts only after track k-1 has (tool calls begin in index order)."""
    pos = [0] * len(tracks)
    out: list[Any] = []
    while True:
        ready = [k for k, t in enumerate(tracks) if pos[k] < len(t) and (k <= first_tool or pos[k - 1] > 0)]
        if not ready:
            return out
        k = ready[draw(st.integers(0, len(ready) - 1))]
        out.append(tracks[k][pos[k]])
        pos[k] += 1


# -- Anthropic Messages ---------------------------------------------------------------------------------

@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    """A whole Message: thinking, text and tool_use blocks in any order, a stop reason, usage."""
    kinds = draw(st.lists(st.sampled_from(["thinking", "text", "tool_use"]), max_size=4))
    content: list[dict[str, Any]] = []
    for n, kind in enumerate(kinds):
        if kind == "thinking":
            content.append({"type": "thinking", "thinking": draw(TEXT), "signature": "sig" + str(n)})
        elif kind == "text":
            content.append({"type": "text", "text": draw(TEXT)})
        else:
            content.append({"type": "tool_use", "id": f"toolu_{n}", "name": draw(_KEY), "input": draw(ARGS)})
    stop = "tool_use" if "tool_use" in kinds else draw(st.sampled_from(["end_turn", "max_tokens", "stop_sequence"]))
    usage = {"input_tokens": draw(st.integers(0, 50)), "output_tokens": draw(st.integers(0, 50)),
             "cache_read_input_tokens": draw(st.integers(0, 9)), "cache_creation_input_tokens": 0}
    return {"id": "msg_1", "type": "message", "role": "assistant", "content": content, "model": "claude-x",
            "stop_reason": stop, "stop_sequence": None, "usage": usage}


@st.composite
def message_events(draw: st.DrawFn, msg: dict[str, Any]) -> list[Event]:
    """The Message as Anthropic streams it: one block at a time, its text and JSON in any pieces."""
    usage = msg["usage"]
    start = {**msg, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    objs: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(msg["content"]):
        if draw(st.integers(0, 4)) == 0:
            objs.append({"type": "ping"})
        objs += _block_events(draw, index, block)
    objs.append({"type": "message_delta", "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                 "usage": {"output_tokens": usage["output_tokens"]}})
    objs.append({"type": "message_stop"})
    return [(o["type"], o) for o in objs]


def _block_events(draw: st.DrawFn, index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    kind = block["type"]
    if kind == "tool_use":
        head, deltas = {**block, "input": {}}, [
            {"type": "input_json_delta", "partial_json": p} for p in draw(split_text(orjson.dumps(block["input"])
                                                                                      .decode(), 5))]
    elif kind == "thinking":
        head = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": p} for p in draw(split_text(block["thinking"])) if p]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        head = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in draw(split_text(block["text"])) if p]
    return [{"type": "content_block_start", "index": index, "content_block": head},
            *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
            {"type": "content_block_stop", "index": index}]


# -- OpenAI Responses ------------------------------------------------------------------------------------

@st.composite
def responses_answers(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the stream's events, the body) of one answer: reasoning, messages, refusals and function calls,
    the events of its output items interleaved (each item's own in order, items added in output order),
    usage on the terminal event."""
    answer = Answer()
    for n, kind in enumerate(draw(st.lists(st.sampled_from(["reasoning", "message", "refusal", "function_call"]),
                                           max_size=4))):
        if kind == "function_call":
            answer.function_call(draw(_KEY), f"call_{n}", draw(split_text(orjson.dumps(draw(ARGS)).decode(), 5)))
        elif kind == "reasoning":
            answer.reasoning(draw(split_text(draw(TEXT))))
        else:
            answer.message(draw(split_text(draw(TEXT))), refusal=kind == "refusal")
    head, items = answer.events[:2], answer.events[2:]
    tracks: list[list[dict[str, Any]]] = [[] for _ in answer.output]
    for ev in items:
        tracks[ev["output_index"]].append(ev)
    events = [*head, *_interleave(draw, tracks, first_tool=0),
              {"type": "response.completed", "response": answer.body()}]
    return number(events), answer.body()
