"""Bedrock's Converse API <-> Anthropic's Messages shapes, sans I/O (docs/cloud-providers.md: every Bedrock model that
is not Claude goes through `/converse` and `/converse-stream`).

Both ways go through the Anthropic Messages shape, which the gateway already translates to and from
every client API: a chat request becomes an Anthropic body (`convert.anthropic_request`), then a Converse
body here; a Converse answer becomes an Anthropic message, a ConverseStream becomes Anthropic stream
events, read by the same parsers as Claude's own. So tools, reasoning, usage with cache reads and
writes, and stop reasons have one mapping each.

Request (Anthropic -> Converse): `system` -> `system[].text`; blocks text -> `text`, base64 image ->
`image` (format from the media type), base64 PDF -> `document`, tool_use -> `toolUse`, tool_result ->
`toolResult` (`status: error` for `is_error`), thinking -> `reasoningContent.reasoningText`,
redacted_thinking -> `reasoningContent.redactedContent`; a `cache_control` adds a `cachePoint` after its
block (a tool's: after it in `toolConfig.tools`; one inside a tool_result's content, at any depth `fit`
walks: after the toolResult); one inside another block's `content` (a `search_result`'s, a block Converse
has no form for) is dropped with it, counted by `unplaced_markers`; a top-level one (automatic caching)
adds one after the last message's last block;
`max_tokens`, `temperature`, `top_p`, `stop_sequences` -> `inferenceConfig`; `tools` and `tool_choice`
(auto, any, tool; none sends no choice) -> `toolConfig`.
Image URLs have no Converse form (only bytes or S3) and are dropped.
Answer (Converse -> Anthropic): content blocks the other way round; `stopReason` (end_turn, tool_use,
max_tokens, stop_sequence pass; guardrail_intervened and content_filtered -> refusal); `usage`
(`inputTokens` excludes cache reads and writes, as Anthropic's `input_tokens` does).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core.sse import SSEEvent
from gateway.providers.convert.cache_markers import marked_inside

Block = dict[str, Any]
_CACHE_POINT: Block = {"cachePoint": {"type": "default"}}
STOP_REASONS = {"end_turn": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens",
                "stop_sequence": "stop_sequence", "guardrail_intervened": "refusal", "content_filtered": "refusal",
                "model_context_window_exceeded": "model_context_window_exceeded"}
CONVERSE_EVENTS = frozenset({"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop",
                             "messageStop", "metadata"})


def message_id() -> str:
    """Converse answers carry no id; the Messages shape needs one."""
    return f"msg_bdrk_{os.urandom(12).hex()}"


def converse_body(anthropic: Mapping[str, Any]) -> dict[str, Any]:
    """A Converse request body for an Anthropic Messages request body (`model` and `stream` are the URL's)."""
    out: dict[str, Any] = {"messages": [_message(m) for m in anthropic.get("messages") or () if isinstance(m, dict)]}
    _automatic(anthropic, out["messages"])
    system = _system(anthropic.get("system"))
    if system:
        out["system"] = system
    config = {key: anthropic[src] for src, key in (("max_tokens", "maxTokens"), ("temperature", "temperature"),
                                                   ("top_p", "topP"), ("stop_sequences", "stopSequences"))
              if anthropic.get(src) is not None}
    if config:
        out["inferenceConfig"] = config
    tools = [spec for t in anthropic.get("tools") or () if isinstance(t, dict) and t.get("name")
             for spec in _tool(t)]
    if tools:
        out["toolConfig"] = {"tools": tools}
        choice = _tool_choice(anthropic.get("tool_choice"))
        if choice is not None:
            out["toolConfig"]["toolChoice"] = choice
    return out


def _system(system: Any) -> list[Block]:
    if isinstance(system, str):
        return [{"text": system}] if system else []
    out: list[Block] = []
    for block in system if isinstance(system, list) else ():
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            out.append({"text": block["text"]})
            if block.get("cache_control"):
                out.append(_CACHE_POINT)
    return out


def _message(m: Mapping[str, Any]) -> dict[str, Any]:
    content = m.get("content")
    blocks: list[Block] = []
    if isinstance(content, str):
        blocks.append({"text": content})
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict):
            converted = _block(block)
            blocks += converted
            # a dropped block's marker has no place (a cachePoint after nothing could open the message);
            # Converse has no cache point inside a `toolResult`: the one after it stands for those inside its
            # content, however deep (a prefix a little longer; docs/caching.md)
            if converted and (block.get("cache_control") or (block.get("type") == "tool_result"
                                                              and marked_inside(block))):
                blocks.append(_CACHE_POINT)
    return {"role": "assistant" if m.get("role") == "assistant" else "user", "content": blocks}


def _automatic(anthropic: Mapping[str, Any], messages: list[dict[str, Any]]) -> None:
    """A top-level `cache_control` (Anthropic's automatic caching: a breakpoint on the last block) is the
    cachePoint after the last message's last block, unless one is there already."""
    if anthropic.get("cache_control") is None or not messages:
        return
    content = messages[-1]["content"]
    if content and "cachePoint" not in content[-1]:
        content.append(_CACHE_POINT)


def unplaced_markers(anthropic: Mapping[str, Any]) -> int:
    """The markers Converse has no place for, counted with `fit`'s in the log line's `cache_markers_dropped`
    (docs/caching.md): those inside the `content` of a message block other than a tool_result (a
    `search_result`'s, a block it has no form for and drops with them), and those on a block it drops (a
    URL image)."""
    count = 0
    for m in anthropic.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            if block.get("type") != "tool_result":
                count += marked_inside(block)
            if block.get("cache_control") and not _block(block):
                count += 1
    return count


def _block(block: Mapping[str, Any]) -> list[Block]:
    btype = block.get("type")
    if btype == "text":
        return [{"text": str(block.get("text") or "")}]
    if btype == "tool_use":
        tool_input = block.get("input")
        return [{"toolUse": {"toolUseId": str(block.get("id") or ""), "name": str(block.get("name") or ""),
                             "input": tool_input if isinstance(tool_input, dict) else {}}}]
    if btype == "tool_result":
        return [_tool_result(block)]
    if btype == "thinking":
        text = {"text": str(block.get("thinking") or "")}
        if block.get("signature"):
            text["signature"] = str(block["signature"])
        return [{"reasoningContent": {"reasoningText": text}}]
    if btype == "redacted_thinking":
        return [{"reasoningContent": {"redactedContent": str(block.get("data") or "")}}]
    if btype in ("image", "document"):
        return _media(btype, block.get("source"))
    return []


def _media(btype: str, source: Any) -> list[Block]:
    if not isinstance(source, dict) or source.get("type") != "base64":
        return []  # a URL: Converse takes bytes or S3 locations only
    fmt = str(source.get("media_type") or "").rpartition("/")[2]
    value: Block = {"format": fmt, "source": {"bytes": source.get("data")}}
    if btype == "document":
        value["name"] = "document"
    return [{btype: value}]


def _tool_result(block: Mapping[str, Any]) -> Block:
    content = block.get("content")
    parts: list[Block] = []
    if isinstance(content, str):
        parts.append({"text": content})
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict):
            parts += [p for p in _block(part) if "text" in p or "image" in p]
    result: Block = {"toolUseId": str(block.get("tool_use_id") or ""), "content": parts or [{"text": ""}]}
    if block.get("is_error"):
        result["status"] = "error"
    return {"toolResult": result}


def _tool(tool: Mapping[str, Any]) -> list[Block]:
    """A tool's spec, and a `cachePoint` after it when it carries a `cache_control`."""
    spec: Block = {"name": tool["name"], "inputSchema": {"json": tool.get("input_schema") or {"type": "object"}}}
    if tool.get("description"):
        spec["description"] = tool["description"]
    return [{"toolSpec": spec}, _CACHE_POINT] if tool.get("cache_control") else [{"toolSpec": spec}]


def _tool_choice(choice: Any) -> Block | None:
    ctype = choice.get("type") if isinstance(choice, dict) else None
    if ctype == "any":
        return {"any": {}}
    if ctype == "tool" and isinstance(choice, dict) and choice.get("name"):
        return {"tool": {"name": choice["name"]}}
    if ctype == "auto":
        return {"auto": {}}
    return None  # none: Converse has no such choice; the model answers in text when it may


# -- answers ---------------------------------------------------------------------------------------


def anthropic_usage(usage: Any) -> dict[str, int]:
    u = usage if isinstance(usage, dict) else {}

    def count(key: str) -> int:
        v = u.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0

    return {"input_tokens": count("inputTokens"), "output_tokens": count("outputTokens"),
            "cache_read_input_tokens": count("cacheReadInputTokens"),
            "cache_creation_input_tokens": count("cacheWriteInputTokens")}


def stop_reason(value: Any) -> str:
    return STOP_REASONS.get(value, "end_turn") if isinstance(value, str) else "end_turn"


def is_converse_answer(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("output"), dict)


def anthropic_message(obj: Mapping[str, Any], model: str = "") -> dict[str, Any]:
    """A Converse answer as an Anthropic Message object."""
    output = obj.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    blocks = [b for raw in content if isinstance(raw, dict) for b in _answer_block(raw)] \
        if isinstance(content, list) else []
    return {"id": message_id(), "type": "message", "role": "assistant", "model": model, "content": blocks,
            "stop_reason": stop_reason(obj.get("stopReason")), "stop_sequence": None,
            "usage": anthropic_usage(obj.get("usage"))}


def _answer_block(raw: Mapping[str, Any]) -> list[Block]:
    if isinstance(raw.get("text"), str):
        return [{"type": "text", "text": raw["text"]}]
    tool = raw.get("toolUse")
    if isinstance(tool, dict):
        tool_input = tool.get("input")
        return [{"type": "tool_use", "id": str(tool.get("toolUseId") or ""), "name": str(tool.get("name") or ""),
                 "input": tool_input if isinstance(tool_input, dict) else {}}]
    reasoning = raw.get("reasoningContent")
    if isinstance(reasoning, dict):
        text = reasoning.get("reasoningText")
        if isinstance(text, dict):
            return [{"type": "thinking", "thinking": str(text.get("text") or ""),
                     "signature": str(text.get("signature") or "")}]
        if reasoning.get("redactedContent"):
            return [{"type": "redacted_thinking", "data": str(reasoning["redactedContent"])}]
    return []


class ConverseEvents:
    """ConverseStream events -> Anthropic Messages stream events, one stream at a time.

    `messageStop` carries the stop reason and `metadata` (last) the usage: Anthropic's `message_delta`
    carries both, so it is sent at `metadata`, or at `finish` when a stream ends without one."""

    __slots__ = ("_open", "_stop", "ended")

    def __init__(self) -> None:
        self._open: set[int] = set()  # content blocks started
        self._stop: str | None = None
        self.ended = False

    def events(self, name: str, obj: Mapping[str, Any]) -> list[Block]:
        if name == "messageStart":
            return [{"type": "message_start", "message": {
                "id": message_id(), "type": "message", "role": "assistant", "model": "", "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}}]
        index = obj.get("contentBlockIndex")
        index = index if isinstance(index, int) and not isinstance(index, bool) else 0
        if name == "contentBlockStart":
            return self._start(index, obj.get("start"))
        if name == "contentBlockDelta":
            return self._delta(index, obj.get("delta"))
        if name == "contentBlockStop":
            return [{"type": "content_block_stop", "index": index}] if index in self._open else []
        if name == "messageStop":
            self._stop = stop_reason(obj.get("stopReason"))
            return []
        if name == "metadata":
            return self._end(obj.get("usage"))
        return []

    def finish(self) -> list[Block]:
        return self._end(None) if self._stop is not None and not self.ended else []

    def _end(self, usage: Any) -> list[Block]:
        self.ended = True
        return [{"type": "message_delta", "delta": {"stop_reason": self._stop or "end_turn", "stop_sequence": None},
                 "usage": anthropic_usage(usage)}, {"type": "message_stop"}]

    def _start(self, index: int, start: Any) -> list[Block]:
        tool = start.get("toolUse") if isinstance(start, dict) else None
        if not isinstance(tool, dict):
            return []
        self._open.add(index)
        return [{"type": "content_block_start", "index": index, "content_block": {
            "type": "tool_use", "id": str(tool.get("toolUseId") or ""), "name": str(tool.get("name") or ""),
            "input": {}}}]

    def _delta(self, index: int, delta: Any) -> list[Block]:
        if not isinstance(delta, dict):
            return []
        out: list[Block] = []
        if isinstance(delta.get("text"), str):
            out += self._open_block(index, {"type": "text", "text": ""})
            out.append(_delta_event(index, {"type": "text_delta", "text": delta["text"]}))
        elif isinstance(delta.get("toolUse"), dict):
            partial = delta["toolUse"].get("input")
            out.append(_delta_event(index, {"type": "input_json_delta",
                                            "partial_json": partial if isinstance(partial, str) else ""}))
        elif isinstance(delta.get("reasoningContent"), dict):
            out += self._reasoning(index, delta["reasoningContent"])
        return out

    def _reasoning(self, index: int, r: Mapping[str, Any]) -> list[Block]:
        out = self._open_block(index, {"type": "thinking", "thinking": "", "signature": ""})
        if isinstance(r.get("text"), str):
            out.append(_delta_event(index, {"type": "thinking_delta", "thinking": r["text"]}))
        elif isinstance(r.get("signature"), str):
            out.append(_delta_event(index, {"type": "signature_delta", "signature": r["signature"]}))
        return out

    def _open_block(self, index: int, block: Block) -> list[Block]:
        """Converse starts text and reasoning blocks with their first delta; Anthropic with a start."""
        if index in self._open:
            return []
        self._open.add(index)
        return [{"type": "content_block_start", "index": index, "content_block": block}]


def _delta_event(index: int, delta: Block) -> Block:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def converse_json(event: SSEEvent) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def anthropic_answer(body: bytes) -> bytes:
    """A non-stream answer as Anthropic's: a Converse one translated, any other as it came."""
    try:
        obj = orjson.loads(body) if body.lstrip()[:1] == b"{" else None
    except orjson.JSONDecodeError:
        return body
    return orjson.dumps(anthropic_message(obj)) if isinstance(obj, dict) and is_converse_answer(obj) else body


class ConverseStream:
    """A stream's ConverseStream events read one at a time as Anthropic's events (dicts): what both
    Bedrock stream parsers do with an event that is not Claude's. Nothing is kept before the first."""

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: ConverseEvents | None = None

    @property
    def started(self) -> bool:
        return self._events is not None

    def read(self, event: SSEEvent) -> list[Block] | None:
        """Its Anthropic events; None when its data is no JSON object."""
        obj = converse_json(event)
        if obj is None:
            return None
        if self._events is None:
            self._events = ConverseEvents()
        return self._events.events(event.event or "", obj)

    def finish(self) -> list[Block]:
        return self._events.finish() if self._events is not None else []
