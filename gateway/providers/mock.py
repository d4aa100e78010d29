"""The built-in `mock` provider: a deterministic OpenAI-compatible answer with realistic pacing.

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

from gateway.config_types import ProviderConfig
from gateway.core.sse import DONE_EVENT, encode_data
from gateway.providers.chat_openai import OpenAIChat

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


def mock_script(provider: ProviderConfig, request_body: bytes) -> MockScript:
    """The answer for one request: a stream when asked, else one JSON body."""
    body = orjson.loads(request_body)
    model = str(body.get("model", "demo"))
    digest = hashlib.sha256(request_body).hexdigest()[:24]
    cid, created = f"chatcmpl-mock{digest}", 1_700_000_000
    words = _words(ANSWER)
    usage = {"prompt_tokens": _prompt_tokens(body), "completion_tokens": len(words),
             "total_tokens": _prompt_tokens(body) + len(words),
             "prompt_tokens_details": {"cached_tokens": 0},
             "completion_tokens_details": {"reasoning_tokens": 0}}
    if "input" in body and "messages" not in body:
        return _embeddings(body, model)
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


class MockChat(OpenAIChat):
    """The mock speaks OpenAI; requests go to the in-process transport instead of a socket."""

    def _url(self, path: str, model: str) -> str:
        return f"mock://{self.provider.name}{path}"
