"""Real clients, each reduced to what its user sees: the text, how many content deltas carried it, and the
usage (if any). Python: the official openai SDK, sync and async. Node: the official openai SDK, from
tests/e2e/node/stream.mjs. curl: `curl -N`, its raw SSE decoded with the gateway's own SSEDecoder."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import orjson

from gateway.core.sse import DONE, SSEDecoder

NODE_SCRIPT = Path(__file__).parent / "node" / "stream.mjs"


@dataclass(frozen=True)
class Answer:
    text: str
    deltas: int  # content deltas; 1 for a non-streamed answer
    usage: Any  # as the client got it (SDK object or dict), None if it got none
    finish_reason: str | None = None


def sdk(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)


def async_sdk(base_url: str, api_key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)


def python_stream(client: openai.OpenAI, model: str, body: dict[str, Any]) -> Answer:
    parts: list[str] = []
    usage, finish = None, None
    for chunk in client.chat.completions.create(model=model, stream=True, **body):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            if choice.delta.content:
                parts.append(choice.delta.content)
            finish = choice.finish_reason or finish
    return Answer("".join(parts), len(parts), usage, finish)


def python_complete(client: openai.OpenAI, model: str, body: dict[str, Any]) -> Answer:
    resp = client.chat.completions.create(model=model, **body)
    choice = resp.choices[0]
    return Answer(choice.message.content or "", 1, resp.usage, choice.finish_reason)


async def async_stream(client: openai.AsyncOpenAI, model: str, body: dict[str, Any]) -> Answer:
    parts: list[str] = []
    usage, finish = None, None
    async for chunk in await client.chat.completions.create(model=model, stream=True, **body):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            if choice.delta.content:
                parts.append(choice.delta.content)
            finish = choice.finish_reason or finish
    return Answer("".join(parts), len(parts), usage, finish)


async def async_complete(client: openai.AsyncOpenAI, model: str, body: dict[str, Any]) -> Answer:
    resp = await client.chat.completions.create(model=model, **body)
    choice = resp.choices[0]
    return Answer(choice.message.content or "", 1, resp.usage, choice.finish_reason)


def node_stream(base_url: str, api_key: str, model: str, body: dict[str, Any]) -> Answer:
    arg = json.dumps({"base_url": base_url, "api_key": api_key, "body": {**body, "model": model}})
    done = subprocess.run(["node", str(NODE_SCRIPT), arg], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"node client failed:\n{done.stderr}"
    out = json.loads(done.stdout)
    return Answer(out["text"], out["deltas"], out["usage"], out["finish_reason"])


@dataclass(frozen=True)
class RawStream:
    answer: Answer
    events: list[bytes]  # every `data:` payload, in order
    headers: dict[str, str]  # lower-cased names
    status: int


def curl_stream(url: str, api_key: str, model: str, body: dict[str, Any], header_file: Path) -> RawStream:
    """`curl -N` as a user types it; the body it prints is decoded with our SSEDecoder."""
    payload = json.dumps({**body, "model": model, "stream": True})
    done = subprocess.run(["curl", "-N", "-sS", "-D", str(header_file), "-H", "Content-Type: application/json",
                           "-H", f"Authorization: Bearer {api_key}", "--data-binary", payload,
                           f"{url}/chat/completions"], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    status, headers = _parse_headers(header_file.read_text())
    decoder = SSEDecoder()
    events = [e.data for e in decoder.feed(done.stdout)] + [e.data for e in decoder.finish()]
    parts: list[str] = []
    usage, finish = None, None
    for data in events:
        if data == DONE:
            continue
        obj = orjson.loads(data)
        usage = obj.get("usage") or usage
        for choice in obj.get("choices") or []:
            if (choice.get("delta") or {}).get("content"):
                parts.append(choice["delta"]["content"])
            finish = choice.get("finish_reason") or finish
    return RawStream(Answer("".join(parts), len(parts), usage, finish), events, headers, status)


def _parse_headers(text: str) -> tuple[int, dict[str, str]]:
    lines = text.strip().splitlines()
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers
