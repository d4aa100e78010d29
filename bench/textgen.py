"""The text a benchmark stream carries, and its OpenAI chat chunks, shared by the fake upstream and the
load generator so the client can check that what it assembled is exactly what the upstream sent.

The text is deterministic in (seed, chunks, chunk_chars): plain English-like words, spaces and
punctuation, no digits, no `@`, no long runs without whitespace (unless `nospace`: the same words glued
together, no whitespace at all, as text in scripts written without spaces streams through a window
that only sees runs of ASCII). That keeps it clear of every `secrets`
and `pii` rule, so redaction must leave it unchanged; it still makes the redaction window do its normal
work (hold each run of non-whitespace until it ends).
"""

from __future__ import annotations

import functools
import random

import orjson

VARIANTS = 16  # distinct texts per shape: enough to vary, few enough to cache the encoded streams

_VOCABULARY = (
    "the of and to in is that for it as with was on be by this are from at or an have not which but "
    "stream token model gateway latency window proxy request answer chunk server client reply upstream "
    "simple quiet river mountain garden yellow orange careful honest measure quickly slowly between "
    "through however therefore example question function return value string object array number"
)
_WORDS = tuple(_VOCABULARY.split())
_PUNCT = (",", ".", ";", ":", "!", "?")


@functools.lru_cache(maxsize=4096)
def pieces(seed: int, chunks: int, chunk_chars: int, words: bool = False, nospace: bool = False) -> tuple[str, ...]:
    """`chunks` content deltas of `chunk_chars` characters each; with `words`, one word per delta with
    its leading space, as LLM tokenizers split text (then `chunk_chars` is ignored)."""
    rng = random.Random(seed % VARIANTS * 1_000_003 + chunks * 131 + chunk_chars)
    if words:
        return tuple(("" if i == 0 else " ") + _word(rng) for i in range(chunks))
    want = chunks * max(1, chunk_chars)
    parts: list[str] = []
    size = 0
    while size < want:
        w = _word(rng).strip() if nospace else _word(rng)
        parts.append(w)
        size += len(w) + (0 if nospace else 1)
    text = ("" if nospace else " ").join(parts)[:want]
    step = max(1, chunk_chars)
    return tuple(text[i * step:(i + 1) * step] for i in range(chunks))


def _word(rng: random.Random) -> str:
    w = rng.choice(_WORDS)
    if rng.random() < 0.08:
        w += rng.choice(_PUNCT)
    if rng.random() < 0.02:
        w += "\n"
    return w


def expected_text(seed: int, chunks: int, chunk_chars: int, words: bool = False, nospace: bool = False) -> str:
    return "".join(pieces(seed, chunks, chunk_chars, words, nospace))


# OpenAI's own chunk envelope (id, object, created, model, system_fingerprint, logprobs), so parsing cost
# per chunk is what a real provider's stream costs.
_HEAD = b'{"id":"chatcmpl-bench0000000000000000000000","object":"chat.completion.chunk","created":1700000000,'


def _chunk(model: bytes, delta: bytes, finish: bytes = b"null") -> bytes:
    return (_HEAD + b'"model":"' + model + b'","system_fingerprint":"fp_bench","choices":[{"index":0,"delta":'
            + delta + b',"logprobs":null,"finish_reason":' + finish + b"}]}")


def sse_event(data: bytes) -> bytes:
    return b"data: " + data + b"\n\n"


@functools.lru_cache(maxsize=1024)
def stream_events(seed: int, chunks: int, chunk_chars: int, model: str, usage: bool,
                  words: bool = False, nospace: bool = False) -> tuple[bytes, ...]:
    """The SSE events of one answer: role + first content, each further content delta, then finish,
    usage (when asked) and `[DONE]` — the tail is one event string joined to the last content delta."""
    m = model.encode()
    parts = pieces(seed, chunks, chunk_chars, words, nospace)
    events = [sse_event(_chunk(m, b'{"content":' + orjson.dumps(p) + b"}")) for p in parts]
    role = sse_event(_chunk(m, b'{"role":"assistant","content":""}'))
    events[0] = role + events[0]
    tail = sse_event(_chunk(m, b"{}", b'"stop"'))
    if usage:
        n = max(1, chunks)
        tail += sse_event(_HEAD + b'"model":"' + m + b'","system_fingerprint":"fp_bench","choices":[],"usage":'
                          + orjson.dumps({"prompt_tokens": 12, "completion_tokens": n, "total_tokens": 12 + n})
                          + b"}")
    tail += sse_event(b"[DONE]")
    events[-1] += tail
    return tuple(events)


# Anthropic's own event framing (`event:` + `data:`), as the Messages API streams it (protocols.md §4.1)
def _named(event: bytes, data: bytes) -> bytes:
    return b"event: " + event + b"\ndata: " + data + b"\n\n"


@functools.lru_cache(maxsize=1024)
def messages_events(seed: int, chunks: int, chunk_chars: int, model: str, words: bool = False,
                    nospace: bool = False) -> tuple[bytes, ...]:
    """The same answer as `stream_events`, as an Anthropic Messages stream: message_start, ping and the
    text block's start joined to the first text_delta, one text_delta per further piece, then the
    block's stop, message_delta (stop reason, usage) and message_stop joined to the last."""
    parts = pieces(seed, chunks, chunk_chars, words, nospace)
    events = [_named(b"content_block_delta", b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
                     b'"text":' + orjson.dumps(p) + b"}}") for p in parts]
    start = orjson.dumps({"type": "message_start", "message": {
        "id": "msg_bench000000000000000000", "type": "message", "role": "assistant", "content": [], "model": model,
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": 1}}})
    events[0] = (_named(b"message_start", start) + _named(b"ping", b'{"type": "ping"}')
                 + _named(b"content_block_start", b'{"type":"content_block_start","index":0,'
                          b'"content_block":{"type":"text","text":""}}') + events[0])
    n = max(1, chunks)
    events[-1] += (_named(b"content_block_stop", b'{"type":"content_block_stop","index":0}')
                   + _named(b"message_delta", b'{"type":"message_delta","delta":{"stop_reason":"end_turn",'
                            b'"stop_sequence":null},"usage":{"output_tokens":' + str(n).encode() + b"}}")
                   + _named(b"message_stop", b'{"type":"message_stop"}'))
    return tuple(events)
