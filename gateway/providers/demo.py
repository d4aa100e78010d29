"""The built-in `mock` provider's answers (its translators: `chat_mock`, `responses_mock`,
`messages_mock`): a deterministic OpenAI-compatible answer with realistic pacing.

It speaks the OpenAI wire format, so the demo exercises the same parser, windows and metrics as a real
upstream. This module only *describes* the answer (bytes and the pause before each); the transport in
`gateway.upstream` plays it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.sse import DONE_EVENT, encode_data, encode_event
from gateway.providers.settings import ProviderConfig

ANSWER = (
    "Hello from the llm-gateway demo. This answer is streamed token by token through the gateway's "
    "SSE parser, redaction window and metrics, exactly as a real provider's would be. Point your "
    "OpenAI SDK's base_url at this gateway and watch time to first token in Grafana."
)


@dataclass(frozen=True, slots=True)
class MockScript:
    status: int
    content_type: str
    parts: tuple[tuple[float, bytes], ...]  # (seconds to wait before, bytes to send)


def _words(text: str) -> list[str]:
    out, start = [], 0
    for i, ch in enumerate(text):
        if ch == " ":
            out.append(text[start:i + 1])
            start = i + 1
    if start < len(text):
        out.append(text[start:])
    return out


def _prompt_tokens(body: Mapping[str, Any]) -> int:
    messages = body.get("messages")
    n = 0
    if isinstance(messages, list):
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            n += 4 + (len(content.split()) if isinstance(content, str) else 0)
    return max(n, 1)


def mock_script(provider: ProviderConfig, url: str, request_body: bytes) -> MockScript:
    """The answer for one request to `mock://<provider><path>`: a stream when asked, else one body."""
    body = orjson.loads(request_body)
    if url.endswith("/responses"):
        return _responses(provider, body)
    if url.endswith("/embeddings"):
        return _embeddings(body, str(body.get("model", "demo")))
    model = str(body.get("model", "demo"))
    digest = hashlib.sha256(request_body).hexdigest()[:24]
    cid, created = f"chatcmpl-mock{digest}", 1_700_000_000
    words = _words(ANSWER)
    usage = {"prompt_tokens": _prompt_tokens(body), "completion_tokens": len(words),
             "total_tokens": _prompt_tokens(body) + len(words),
             "prompt_tokens_details": {"cached_tokens": 0},
             "completion_tokens_details": {"reasoning_tokens": 0}}
    if not body.get("stream"):
        doc = {"id": cid, "object": "chat.completion", "created": created, "model": model,
               "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER},
                            "finish_reason": "stop", "logprobs": None}], "usage": usage}
        return MockScript(200, "application/json", ((provider.ttft_ms / 1000.0, orjson.dumps(doc)),))
    base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return encode_data(orjson.dumps({**base, "choices": [
            {"index": 0, "delta": delta, "finish_reason": finish}]}))

    pace = provider.token_delay_ms / 1000.0
    parts: list[tuple[float, bytes]] = [(0.0, chunk({"role": "assistant", "content": ""}))]
    parts += [(provider.ttft_ms / 1000.0 if i == 0 else pace, chunk({"content": w}))
              for i, w in enumerate(words)]
    parts.append((0.0, chunk({}, "stop")))
    opts = body.get("stream_options")
    if isinstance(opts, dict) and opts.get("include_usage"):
        parts.append((0.0, encode_data(orjson.dumps({**base, "choices": [], "usage": usage}))))
    parts.append((0.0, DONE_EVENT))
    return MockScript(200, "text/event-stream", tuple(parts))


def _embeddings(body: Mapping[str, Any], model: str) -> MockScript:
    inputs = body.get("input")
    items = inputs if isinstance(inputs, list) else [inputs]
    data = []
    for i, item in enumerate(items):
        h = hashlib.sha256(str(item).encode()).digest()
        data.append({"object": "embedding", "index": i, "embedding": [b / 255.0 for b in h[:8]]})
    tokens = sum(len(str(item).split()) for item in items)
    doc = {"object": "list", "data": data, "model": model,
           "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
    return MockScript(200, "application/json", ((0.0, orjson.dumps(doc)),))


def _responses(provider: ProviderConfig, body: dict[str, Any]) -> MockScript:
    """The demo answer in the Responses API's shape: one message item, text deltas word by word."""
    rid = "resp_mock" + hashlib.sha256(orjson.dumps(body)).hexdigest()[:24]
    words, model = _words(ANSWER), str(body.get("model", "demo"))
    text_part = {"type": "output_text", "text": ANSWER, "annotations": []}
    item = {"id": "msg_mock", "type": "message", "role": "assistant", "status": "completed", "content": [text_part]}
    usage = {"input_tokens": 8, "output_tokens": len(words), "total_tokens": 8 + len(words),
             "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
             "output_tokens_details": {"reasoning_tokens": 0}}
    final = {"id": rid, "object": "response", "created_at": 1_700_000_000, "status": "completed", "model": model,
             "output": [item], "usage": usage}
    if not body.get("stream"):
        return MockScript(200, "application/json", ((provider.ttft_ms / 1000.0, orjson.dumps(final)),))
    start = {**final, "status": "in_progress", "output": [], "usage": None}
    ids = {"item_id": "msg_mock", "output_index": 0}
    events: list[tuple[float, dict[str, Any]]] = [
        (0.0, {"type": "response.created", "response": start}),
        (0.0, {"type": "response.in_progress", "response": start}),
        (0.0, {"type": "response.output_item.added", "output_index": 0,
               "item": {**item, "status": "in_progress", "content": []}}),
        (0.0, {"type": "response.content_part.added", **ids, "content_index": 0,
               "part": {**text_part, "text": ""}}),
    ]
    pace = provider.token_delay_ms / 1000.0
    events += [(provider.ttft_ms / 1000.0 if i == 0 else pace,
                {"type": "response.output_text.delta", **ids, "content_index": 0, "delta": w})
               for i, w in enumerate(words)]
    events += [(0.0, {"type": "response.output_text.done", **ids, "content_index": 0, "text": ANSWER}),
               (0.0, {"type": "response.content_part.done", **ids, "content_index": 0, "part": text_part}),
               (0.0, {"type": "response.output_item.done", "output_index": 0, "item": item}),
               (0.0, {"type": "response.completed", "response": final})]
    parts = tuple((delay, encode_event(e["type"], orjson.dumps({**e, "sequence_number": n})))
                  for n, (delay, e) in enumerate(events))
    return MockScript(200, "text/event-stream", parts)
