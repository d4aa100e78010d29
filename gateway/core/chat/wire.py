"""OpenAI Chat Completions wire shapes -> typed events, sans I/O.

One function reads a streamed chunk and a non-stream body alike (a body's `message` is a chunk's
`delta` with everything at once), so there is one parser for both. Field variants across OpenAI-compatible
servers: `reasoning_content` (DeepSeek, xAI, old vLLM) and `reasoning` (vLLM, Ollama,
OpenRouter); usage on the finish chunk or in a separate `choices: []` chunk, or under `x_groq.usage`;
a streamed tool call without `index` (Gemini's OpenAI endpoint, some routers) parsed as `UNNUMBERED`,
for the stream's assembler to number (`ChatAssembler.feed`, `number_tool_calls`); `error` as an object or
a string; an OpenRouter error chunk that also carries `finish_reason: "error"`.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from gateway.core.error_object import classify_error_object
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

UNNUMBERED = -1  # a streamed tool-call delta that came without `index`: the stream core numbers it

# delta field -> kind; both reasoning spellings map to REASONING
TEXT_FIELDS: tuple[tuple[str, DeltaKind], ...] = (
    ("content", DeltaKind.CONTENT),
    ("reasoning_content", DeltaKind.REASONING),
    ("reasoning", DeltaKind.REASONING),
    ("refusal", DeltaKind.REFUSAL),
)

# OpenRouter's `reasoning_details` (docs/extensions.md, "Reasoning said twice"): the reasoning text again, beside
# `reasoning` as entries: a `reasoning.text` entry's in `text`, a `reasoning.summary` entry's in `summary`
REASONING_DETAILS = "reasoning_details"
_DETAIL_TEXTS = ("text", "summary")


def detail_texts(details: Any) -> list[tuple[int, dict[str, Any], str]]:
    """(its `index`, the entry, the field) of each text of a `reasoning_details` list; an entry without
    an index is numbered by its place in the list."""
    found: list[tuple[int, dict[str, Any], str]] = []
    for pos, entry in enumerate(details if isinstance(details, list) else ()):
        if not isinstance(entry, dict):
            continue
        at = entry.get("index", pos)
        for field in _DETAIL_TEXTS:
            text = entry.get(field)
            if isinstance(text, str) and text:
                found.append((at if _is_index(at) else pos, entry, field))
    return found


def chunk_events(obj: Any, *, message_key: str = "delta") -> list[StreamEvent]:
    """Typed events of one chat chunk (or, with message_key="message", of a whole completion)."""
    text = content_only(obj)
    if text is not None:
        return [OutputDelta(obj["choices"][0].get("index", 0), DeltaKind.CONTENT, text)] if text else []
    return other_chunk_events(obj, message_key)


def other_chunk_events(obj: Any, message_key: str = "delta") -> list[StreamEvent]:
    """`chunk_events` of a chunk that `content_only` has already found is not content-only."""
    if not isinstance(obj, dict):
        return [InbandError(Failure(FailureKind.MALFORMED, "upstream sent a chunk that is not an object"))]
    err = obj.get("error")
    if err is not None or obj.get("object") == "error":
        return [InbandError(classify_error_object(err if err is not None else obj, None))]
    events: list[StreamEvent] = []
    choices = obj.get("choices")
    if isinstance(choices, list):
        for pos, choice in enumerate(choices):
            if isinstance(choice, dict):
                _choice_events(choice, pos, message_key, events)
    usage = parse_usage(obj)
    if usage is not None:
        events.append(usage)
    return events


def content_only(obj: Any) -> str | None:
    """The text of the most common chunk — one choice whose delta is only `content`, nothing else going
    on (no finish, usage or error) — or None for any other chunk. The per-event fast path."""
    if type(obj) is not dict or obj.get("usage") is not None or "error" in obj:
        return None
    choices = obj.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None or choice.get("logprobs"):
        return None
    delta = choice.get("delta")
    if type(delta) is not dict or len(delta) != 1:
        return None
    text = delta.get("content")
    index = choice.get("index", 0)
    return text if type(text) is str and type(index) is int else None


def _choice_events(choice: dict[str, Any], pos: int, key: str, out: list[StreamEvent]) -> None:
    index = choice.get("index", pos)
    index = index if isinstance(index, int) else pos
    delta = choice.get(key)
    if isinstance(delta, dict):
        reasoned = False
        for field, kind in TEXT_FIELDS:
            text = delta.get(field)
            if text and isinstance(text, str):
                if kind is DeltaKind.REASONING:
                    if reasoned:  # its other spelling beside it: the same text (a server that sends both)
                        continue
                    reasoned = True
                out.append(OutputDelta(index, kind, text))
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for n, call in enumerate(calls):
                if isinstance(call, dict):
                    out.append(_tool_call(index, n, call, key == "delta"))
    reason = choice.get("finish_reason")
    if reason == "error":
        out.append(InbandError(Failure(FailureKind.INBAND, "upstream reported an error in the stream",
                                       code="server_error")))
    elif isinstance(reason, str) and reason:
        out.append(Finish(index, reason))


def _tool_call(choice: int, position: int, call: dict[str, Any], streamed: bool) -> ToolCallDelta:
    """In a body, `message.tool_calls` is the list of whole calls: a call's place is its index. In a
    stream a delta's place says nothing (each chunk's list starts again at 0), so a delta without
    `index` is UNNUMBERED until the stream core, which has seen the calls before it, numbers it."""
    fn = call.get("function")
    fn = fn if isinstance(fn, dict) else {}
    args = fn.get("arguments")
    idx = call.get("index")
    return ToolCallDelta(
        choice=choice,
        index=idx if _is_index(idx) else (UNNUMBERED if streamed else position),
        id=call.get("id") if isinstance(call.get("id"), str) else None,
        name=fn.get("name") if isinstance(fn.get("name"), str) else None,
        arguments=args if isinstance(args, str) else "",
    )


def _is_index(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def number_tool_calls(obj: dict[str, Any], numbered: list[ToolCallDelta]) -> None:
    """Write the indexes the stream core gave a chunk's index-less tool-call deltas into the chunk, for
    the client (the openai SDK's `chat.completions.stream()` needs `index` on every tool-call delta).
    `numbered` are those deltas in the order `other_chunk_events` read them: the chunk's dict entries of
    `choices[].delta.tool_calls` without a valid index, in order."""
    given = iter(numbered)
    choices = obj.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        calls = delta.get("tool_calls") if isinstance(delta, dict) else None
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, dict) and not _is_index(call.get("index")):
                e = next(given, None)
                if e is not None:
                    call["index"] = e.index


def _int(d: Any, key: str) -> int:
    if not isinstance(d, dict):
        return 0
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def parse_usage(obj: dict[str, Any]) -> Usage | None:
    """OpenAI `usage` (or Groq's `x_groq.usage`) normalised. None when the chunk carries none."""
    u = obj.get("usage")
    if not isinstance(u, dict):
        xg = obj.get("x_groq")
        u = xg.get("usage") if isinstance(xg, dict) else None
        if not isinstance(u, dict):
            return None
    prompt, completion = _int(u, "prompt_tokens"), _int(u, "completion_tokens")
    details = u.get("prompt_tokens_details")
    cached = _int(details, "cached_tokens") or _int(u, "prompt_cache_hit_tokens")
    # cache writes, part of prompt_tokens, priced as writes (docs/caching.md): the newer CompletionUsage
    # field, which this gateway's own chat answers carry too (another gateway, a router in front of Claude)
    writes = _int(details, "cache_write_tokens")
    reasoning = _int(u.get("completion_tokens_details"), "reasoning_tokens")
    total = _int(u, "total_tokens")
    if reasoning and total == prompt + completion + reasoning and completion < reasoning:
        # xAI counts reasoning outside completion_tokens (total = prompt + completion + reasoning);
        # OpenAI semantics put it inside. Decided from the totals, not from the provider's name.
        completion += reasoning
    return Usage(input=prompt, output=completion, cached_input=cached, cache_creation_input=writes, reasoning=reasoning)


def has_output_token(events: list[StreamEvent]) -> bool:
    """True when the events contain an output token (docs/extensions.md, "Streams"). A loop, not `any(<genexpr>)`: a
    generator left at its first hit is closed by raising GeneratorExit into it, exception machinery a
    stream's first token would run cold (issue #34)."""
    for e in events:  # noqa: SIM110 - the loop is the point (see above)
        if type(e) is OutputDelta or type(e) is ToolCallDelta:
            return True
    return False


_FIELD = {DeltaKind.CONTENT: "content", DeltaKind.REASONING: "reasoning_content", DeltaKind.REFUSAL: "refusal"}


def continued_chunk(meta: dict[str, Any], e: StreamEvent) -> dict[str, Any]:
    """One event of a continuing attempt as a `chat.completion.chunk` of the stream it continues."""
    base = {"id": meta.get("id", ""), "object": "chat.completion.chunk", "created": meta.get("created", 0),
            "model": meta.get("model", "")}
    if type(e) is Usage:
        return {**base, "choices": [], "usage": e.as_openai()}
    delta: dict[str, Any] = {}
    finish: str | None = None
    choice = 0
    if type(e) is OutputDelta:
        choice, delta[_FIELD[e.kind]] = e.choice, e.text
    elif type(e) is ToolCallDelta:
        call: dict[str, Any] = {"index": e.index}
        if e.id:
            call.update(id=e.id, type="function")
        fn = {k: v for k, v in (("name", e.name), ("arguments", e.arguments)) if v is not None}
        call["function"] = fn
        choice, delta["tool_calls"] = e.choice, [call]
    elif type(e) is Finish:
        choice, finish = e.choice, e.reason or "stop"
    return {**base, "choices": [{"index": choice, "delta": delta, "finish_reason": finish}]}
