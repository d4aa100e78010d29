"""Anthropic Messages API wire shapes -> typed events, sans I/O.

One event reader for every Messages stream the gateway relays: Anthropic's own (native passthrough) and
the ones a translator builds from another protocol. An event is dispatched on its JSON `type`, else on
its SSE `event:` name (either may be missing); unknown types parse to no typed events and are
forwarded untouched (the docs: "handle unknown event types gracefully").

Output tokens (docs/extensions.md, "Streams"): a non-empty `text_delta`, `thinking_delta` or `input_json_delta`.
`message_start`, `ping` and `content_block_start` are the preamble; `signature_delta` and
`citations_delta` are carried but are not tokens. Also here, shared with the chat->Anthropic translator
(`providers.convert.anthropic_stream`): the error classification and the usage counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.core.events import (
    DeltaKind,
    Failure,
    FailureKind,
    InbandError,
    OutputDelta,
    StreamEvent,
    ToolCallDelta,
    Usage,
)

# Anthropic error type -> the HTTP status it stands for (529 = overloaded)
ERROR_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
    "permission_error": 403, "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429,
    "api_error": 500, "timeout_error": 504, "overloaded_error": 529,
}
# The error type the Messages API uses for a status the gateway answers with
ANTHROPIC_TYPE_BY_STATUS = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                            403: "permission_error", 404: "not_found_error", 405: "invalid_request_error",
                            413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                            502: "api_error", 503: "overloaded_error", 504: "timeout_error",
                            529: "overloaded_error"}
ANTHROPIC_TYPES = frozenset(ANTHROPIC_TYPE_BY_STATUS.values()) | {"timeout_error"}


def anthropic_error_type(status: int, etype: str, upstream_type: bool) -> str:
    """The Messages API's error type: an upstream's own when it is one of Anthropic's (passed through),
    else the one Anthropic uses for the status."""
    if upstream_type and etype in ANTHROPIC_TYPES:
        return etype
    return ANTHROPIC_TYPE_BY_STATUS.get(status, "invalid_request_error" if status < 500 else "api_error")


_TRANSIENT = frozenset({"overloaded_error", "api_error", "timeout_error", "rate_limit_error"})
_CLIENT = frozenset({"invalid_request_error", "not_found_error", "request_too_large"})
_AUTH = frozenset({"authentication_error", "permission_error"})

# delta type -> (its text field, the kind of text); the texts redaction and guardrails read
TEXT_DELTAS: dict[str, tuple[str, DeltaKind]] = {
    "text_delta": ("text", DeltaKind.CONTENT),
    "thinking_delta": ("thinking", DeltaKind.REASONING),
}
DELTA_OF: dict[DeltaKind, tuple[str, str]] = {kind: (dtype, fld) for dtype, (fld, kind) in TEXT_DELTAS.items()}
# content block type -> (its text field, the kind of text)
BLOCK_TEXT: dict[str, tuple[str, DeltaKind]] = {
    "text": ("text", DeltaKind.CONTENT),
    "thinking": ("thinking", DeltaKind.REASONING),
}


def block_text(block: Any) -> tuple[str, DeltaKind] | None:
    """A content block's text field and kind (`BLOCK_TEXT`); None for another block, or a block whose
    `type` is no string (an upstream's `[]` must not be looked up: it is unhashable)."""
    btype = block.get("type") if isinstance(block, dict) else None
    return BLOCK_TEXT.get(btype) if isinstance(btype, str) else None


def classify_anthropic_error(err: Any, status: int | None) -> Failure:
    """An Anthropic `error` object (HTTP body, or in-band with status None), from its `type` only."""
    err = err if isinstance(err, dict) else {}
    etype = err.get("type") if isinstance(err.get("type"), str) else None
    message = err.get("message") if isinstance(err.get("message"), str) else "upstream error"
    effective = status if status is not None else ERROR_STATUS.get(etype or "")
    inband = status is None
    if err.get("code") == "context_length_exceeded":  # only a structured field, never the message
        kind = FailureKind.CONTEXT_LENGTH
    elif etype == "billing_error" or effective == 402:
        kind = FailureKind.QUOTA
    elif etype in _AUTH or effective in (401, 403):
        kind = FailureKind.UPSTREAM_AUTH
    elif etype in _CLIENT:
        kind = FailureKind.HTTP_4XX
    elif inband:
        kind = FailureKind.INBAND  # retryable before the first token, whatever the type
    elif etype == "rate_limit_error" or effective == 429:
        kind = FailureKind.HTTP_429
    elif etype in _TRANSIENT or effective in (408, 409) or (effective or 0) >= 500:
        kind = FailureKind.HTTP_5XX
    else:
        kind = FailureKind.HTTP_4XX
    return Failure(kind, message, status=effective, code=etype, type=etype)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(slots=True)
class UsageCounts:
    """Anthropic's usage fields. `message_delta` values are cumulative and replace earlier ones."""

    input: int = 0
    cache_read: int = 0
    cache_creation: int = 0
    output: int = 0
    thinking: int = 0
    cache_creation_1h: int = 0  # `cache_creation.ephemeral_1h_input_tokens`: the 1-hour part of the writes
    seen: bool = False

    def update(self, u: Any) -> None:
        if not isinstance(u, dict):
            return
        self.seen = True
        for attr, key in (("input", "input_tokens"), ("cache_read", "cache_read_input_tokens"),
                          ("cache_creation", "cache_creation_input_tokens"), ("output", "output_tokens")):
            v = _int(u.get(key))
            if v is not None:
                setattr(self, attr, v)
        split = u.get("cache_creation")
        v = _int(split.get("ephemeral_1h_input_tokens")) if isinstance(split, dict) else None
        if v is not None:
            self.cache_creation_1h = v
        details = u.get("output_tokens_details")
        v = _int(details.get("thinking_tokens")) if isinstance(details, dict) else None
        if v is not None:
            self.thinking = v

    def event(self) -> Usage:
        # Anthropic's input_tokens excludes cache reads and writes; OpenAI's prompt_tokens includes them
        return Usage(input=self.input + self.cache_read + self.cache_creation, output=self.output,
                     cached_input=self.cache_read, cache_creation_input=self.cache_creation,
                     reasoning=self.thinking, cache_creation_input_1h=min(self.cache_creation_1h, self.cache_creation))


@dataclass(slots=True)
class MessagesEvent:
    """One Messages stream event: its JSON (`obj`, None when unparseable), its own data bytes (`raw`,
    forwarded when nothing changes; None for an event a translator built), its typed events (output
    tokens, in-band errors), and for a text delta the block and kind of text it carries."""

    type: str
    obj: dict[str, Any] | None
    raw: bytes | None = None
    events: list[StreamEvent] = field(default_factory=list)
    index: int = 0
    kind: DeltaKind | None = None

    def __init__(self, type: str, obj: dict[str, Any] | None, raw: bytes | None = None,
                 events: list[StreamEvent] | None = None, index: int = 0, kind: DeltaKind | None = None) -> None:
        self.type, self.obj, self.raw, self.index, self.kind = type, obj, raw, index, kind
        self.events = [] if events is None else events  # compiled, unlike a dataclass's own (docs/compiled.md)

    @property
    def failure(self) -> Failure | None:
        for e in self.events:
            if type(e) is InbandError:
                return e.failure
        return None


def malformed(raw: bytes | None, name: str | None) -> MessagesEvent:
    bad = InbandError(Failure(FailureKind.MALFORMED, "upstream sent an event that is not a JSON object"))
    return MessagesEvent(name or "", None, raw, [bad])


def parse_event(obj: Any, raw: bytes | None, name: str | None = None) -> MessagesEvent:
    """A decoded event's JSON (and its bytes) -> a MessagesEvent."""
    if not isinstance(obj, dict):
        return malformed(raw, name)
    etype = obj.get("type")
    if not isinstance(etype, str):
        etype = name or ""
    if etype == "content_block_delta":
        return _delta(obj, raw)
    if etype == "error":
        return MessagesEvent(etype, obj, raw, [InbandError(classify_anthropic_error(obj.get("error"), None))])
    if etype == "content_block_start" or etype == "content_block_stop":
        return MessagesEvent(etype, obj, raw, index=_int(obj.get("index")) or 0)
    return MessagesEvent(etype, obj, raw)


def _delta(obj: dict[str, Any], raw: bytes | None) -> MessagesEvent:
    index = _int(obj.get("index")) or 0
    delta = obj.get("delta")
    dtype = delta.get("type") if isinstance(delta, dict) else None
    spec = TEXT_DELTAS.get(dtype) if isinstance(dtype, str) else None
    if spec is not None and isinstance(delta, dict):
        text = delta.get(spec[0])
        token: list[StreamEvent] = [OutputDelta(0, spec[1], text)] if isinstance(text, str) and text else []
        return MessagesEvent("content_block_delta", obj, raw, token, index, spec[1])
    if dtype == "input_json_delta" and isinstance(delta, dict):
        partial = delta.get("partial_json")
        if isinstance(partial, str) and partial:
            return MessagesEvent("content_block_delta", obj, raw, [ToolCallDelta(0, index, arguments=partial)], index)
    return MessagesEvent("content_block_delta", obj, raw, index=index)


TextFn = Callable[[int, DeltaKind, str], str]
"""Maps one text (by content-block index and kind) to what the client may read."""


def map_message_texts(msg: Any, fn: TextFn) -> bool:
    """Rewrite the text of every `text` and `thinking` block of a Message object in place (a non-stream
    body, a `message_start` that starts filled). Never a signature, a tool's input or anything else.
    True when something changed."""
    content = msg.get("content") if isinstance(msg, dict) else None
    changed = False
    for i, block in enumerate(content if isinstance(content, list) else ()):
        spec = block_text(block)
        if spec is None or not isinstance(block, dict):
            continue
        text = block.get(spec[0])
        if isinstance(text, str) and text:
            new = fn(i, spec[1], text)
            if new != text:
                block[spec[0]] = new
                changed = True
    return changed


def message_stream_events(msg: dict[str, Any]) -> list[dict[str, Any]]:
    """A whole Message object as the stream Anthropic would have sent for it: message_start (content
    empty, the usage), each block as start / one delta / stop, message_delta (stop reason, usage),
    message_stop. Used to serve a body as a stream (a cache hit, a server that answers a stream request
    with a body)."""
    usage = msg.get("usage") if isinstance(msg.get("usage"), dict) else {}
    start = {**msg, "content": [], "stop_reason": None, "stop_sequence": None}
    out: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    content = msg.get("content")
    for i, block in enumerate(content if isinstance(content, list) else ()):
        if isinstance(block, dict):
            out += _block_events(i, block)
    out.append({"type": "message_delta", "delta": {"stop_reason": msg.get("stop_reason") or "end_turn",
                                                   "stop_sequence": msg.get("stop_sequence")},
                "usage": usage})
    out.append({"type": "message_stop"})
    return out


def _block_events(i: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    btype = block.get("type")
    spec = BLOCK_TEXT.get(btype) if isinstance(btype, str) else None
    deltas: list[dict[str, Any]] = []
    if spec is not None:
        empty = {**block, spec[0]: ""}
        if btype == "thinking":
            empty["signature"] = ""
            signature = block.get("signature")
        text = block.get(spec[0])
        if isinstance(text, str) and text:
            dtype = DELTA_OF[spec[1]][0]
            deltas.append({"type": dtype, spec[0]: text})
        if btype == "thinking" and isinstance(signature, str) and signature:
            deltas.append({"type": "signature_delta", "signature": signature})
        start = empty
    elif btype == "tool_use":
        start = {**block, "input": {}}
        deltas.append({"type": "input_json_delta", "partial_json": _json(block.get("input"))})
    else:
        start = block  # redacted_thinking, server tool blocks: whole in their start
    return [{"type": "content_block_start", "index": i, "content_block": start},
            *({"type": "content_block_delta", "index": i, "delta": d} for d in deltas),
            {"type": "content_block_stop", "index": i}]


def _json(value: Any) -> str:
    return orjson.dumps(value if isinstance(value, dict) else {}).decode()
