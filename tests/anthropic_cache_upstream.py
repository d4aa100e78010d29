"""Scripted Anthropic-format upstreams with a prompt cache per deployment, on one loopback server: Anthropic's
Messages API (`/v1/messages`), Bedrock's InvokeModel (Claude) and Converse (every other model), and Vertex's
rawPredict for Claude (its OAuth token endpoint is `FakeGoogle`'s). Bedrock's SigV4 is not verified here
(tests/fake_aws.py does that); Vertex's bearer token is.

The cache acts as Anthropic documents it (docs/caching.md): a request's blocks, in prefix order (tools,
system, then each message's content blocks), are hashed as a chain; only a prefix ending at a marked block
(`cache_control`, or the block before a Converse `cachePoint`) is ever written, and a request reads the
longest written prefix ending at one of its own markers or at one of the 20 block boundaries before each
(Anthropic's lookback). Reads and writes are reported in the provider's usage fields; a token is a
character of a block's text (a tool's JSON), to keep the arithmetic plain. Like the real APIs it refuses a
fifth marker (Anthropic's 400 `invalid_request_error`, Bedrock's `ValidationException`), a marker of
another shape, and a 1-hour marker after a 5-minute one; the markers on the blocks inside a `tool_result`
count there too (listed as `...content[j].content[k]`, before the block's own), though the cache itself
works on whole outer blocks.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests import anthropic_scripts as a
from tests import eventstream_frames as frames
from tests.fake_google import FakeGoogle

LOOKBACK = 20
MAX_MARKERS = 4


@dataclass
class Block:
    key: bytes
    tokens: int
    marker: dict[str, Any] | None  # the cache_control (Converse's cachePoint as `{"type": "ephemeral"}`)


@dataclass
class Served:
    deployment: str
    shape: str  # anthropic | bedrock | vertex | converse
    stream: bool
    markers: list[tuple[str, Any]]  # where each marker was (a path in the body) and what it said
    total: int
    read: int
    write: int
    write_1h: int

    @property
    def uncached(self) -> int:
        return self.total - self.read - self.write


class Refused(Exception):
    pass


def _text_tokens(block: dict[str, Any]) -> int:
    if block.get("type") == "text":
        return len(str(block.get("text") or ""))
    return len(orjson.dumps({k: v for k, v in block.items() if k != "cache_control"}))


def anthropic_blocks(body: dict[str, Any]) -> tuple[list[Block], list[tuple[str, Any]]]:
    """The body's blocks in prefix order, and where its markers are."""
    blocks: list[Block] = []
    where: list[tuple[str, Any]] = []

    def add(path: str, role: str, block: dict[str, Any], tokens: int) -> None:
        inner = block.get("content")  # a tool_result's blocks: their markers count, before the block's own
        for k, part in enumerate(inner if isinstance(inner, list) else ()):
            if isinstance(part, dict) and part.get("cache_control") is not None:
                where.append((f"{path}.content[{k}]", part["cache_control"]))
        cc = block.get("cache_control")
        plain = {k: v for k, v in block.items() if k != "cache_control"}
        blocks.append(Block(orjson.dumps([role, plain]), tokens, cc))
        if cc is not None:
            where.append((path, cc))

    for i, tool in enumerate(body.get("tools") or ()):
        add(f"tools[{i}]", "tool", tool, len(orjson.dumps({k: v for k, v in tool.items() if k != "cache_control"})))
    system = body.get("system")
    for i, block in enumerate([{"type": "text", "text": system}] if isinstance(system, str) else system or ()):
        add(f"system[{i}]", "system", block, _text_tokens(block))
    for i, m in enumerate(body.get("messages") or ()):
        content = m["content"]
        for j, block in enumerate([{"type": "text", "text": content}] if isinstance(content, str) else content):
            add(f"messages[{i}].content[{j}]", m["role"], block, _text_tokens(block))
    return blocks, where


def converse_blocks(body: dict[str, Any]) -> tuple[list[Block], list[tuple[str, Any]]]:
    blocks: list[Block] = []
    where: list[tuple[str, Any]] = []

    def walk(path: str, role: str, items: list[dict[str, Any]]) -> None:
        for i, item in enumerate(items):
            if "cachePoint" in item:
                if not blocks:
                    raise Refused("a cachePoint must follow a block")
                blocks[-1].marker = {"type": "ephemeral"}
                where.append((f"{path}[{i}]", item))
                continue
            tokens = len(str(item["text"])) if set(item) == {"text"} else len(orjson.dumps(item))
            blocks.append(Block(orjson.dumps([role, item]), tokens, None))

    walk("toolConfig.tools", "tool", (body.get("toolConfig") or {}).get("tools") or [])
    walk("system", "system", body.get("system") or [])
    for i, m in enumerate(body.get("messages") or ()):
        walk(f"messages[{i}].content", m["role"], m["content"])
    return blocks, where


def check_markers(where: list[tuple[str, Any]], converse: bool) -> None:
    if len(where) > MAX_MARKERS:
        raise Refused(f"A maximum of {MAX_MARKERS} blocks with cache_control may be provided. Found {len(where)}.")
    short_seen = False
    for path, cc in where:
        if converse:
            if cc != {"cachePoint": {"type": "default"}}:
                raise Refused(f"{path}: malformed cachePoint")
            continue
        if not isinstance(cc, dict) or cc.get("type") != "ephemeral" or set(cc) - {"type", "ttl"} \
                or cc.get("ttl", "5m") not in ("5m", "1h"):
            raise Refused(f"{path}.cache_control: invalid")
        if cc.get("ttl") == "1h" and short_seen:
            raise Refused("a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block")
        short_seen = short_seen or cc.get("ttl", "5m") == "5m"


@dataclass
class PromptCache:
    """One deployment's cache: the hashes of the prefixes written."""

    written: set[bytes] = field(default_factory=set)

    def use(self, blocks: list[Block]) -> tuple[int, int, int]:
        """(read, write, of which written for an hour) for one request, writing its marked prefixes."""
        hashes, sizes = [], []
        h, size = b"", 0
        for b in blocks:
            h = hashlib.sha256(h + b.key).digest()
            size += b.tokens
            hashes.append(h)
            sizes.append(size)
        marked = [i for i, b in enumerate(blocks) if b.marker is not None]
        read_at = -1
        for p in marked:
            for i in range(p, max(-1, p - LOOKBACK - 1), -1):
                if hashes[i] in self.written:
                    read_at = max(read_at, i)
                    break
        read = sizes[read_at] if read_at >= 0 else 0
        write = write_1h = 0
        start = read
        for p in marked:
            if p > read_at:
                span = sizes[p] - start
                write += span
                write_1h += span if (blocks[p].marker or {}).get("ttl") == "1h" else 0
                start = sizes[p]
            self.written.add(hashes[p])
        return read, write, write_1h


class CachingClaudeUpstream(FakeGoogle):
    """Anthropic, Bedrock and Vertex Claude deployments (and Bedrock Converse ones) with their caches."""

    def __init__(self) -> None:
        super().__init__()
        self.caches: dict[str, PromptCache] = {}
        self.log: list[Served] = []
        self.sent: list[dict[str, Any]] = []  # every model request body, in order
        # the next answers' content, each its content-block events and stop reason; then "answer <n>" texts
        self.replies: deque[tuple[list[dict[str, Any]], str]] = deque()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/token" or path == "/" or path.startswith("/computeMetadata/"):
            return await super()._handle(request)
        shape, deployment, stream = _route(path)
        if shape == "vertex":
            refused = self._authorized(request)
            if refused is not None:
                return refused
        body = orjson.loads(await request.read())
        self.sent.append(body)
        if shape == "anthropic":
            deployment, stream = body["model"], bool(body.get("stream"))
        try:
            blocks, where = converse_blocks(body) if shape == "converse" else anthropic_blocks(body)
            check_markers(where, shape == "converse")
        except Refused as exc:
            return _refusal(shape, str(exc))
        read, write, write_1h = self.caches.setdefault(f"{shape}/{deployment}", PromptCache()).use(blocks)
        served = Served(deployment, shape, stream, where, sum(b.tokens for b in blocks), read, write, write_1h)
        self.log.append(served)
        reply = self.replies.popleft() if self.replies else None
        return await _answer(request, served, len(self.log), reply)


def _route(path: str) -> tuple[str, str, bool]:
    if path == "/v1/messages":
        return "anthropic", "", False
    if path.startswith("/model/"):
        model, _, action = path[len("/model/"):].rpartition("/")
        return ("converse" if action.startswith("converse") else "bedrock", model,
                action in ("invoke-with-response-stream", "converse-stream"))
    model, _, action = path.rpartition("/")[2].partition(":")
    return "vertex", model, action == "streamRawPredict"


def _refusal(shape: str, message: str) -> web.Response:
    if shape in ("bedrock", "converse"):
        return web.json_response({"message": message}, status=400,
                                 headers={"x-amzn-ErrorType": "ValidationException:http://internal.amazon.com/"})
    return web.json_response({"type": "error", "error": {"type": "invalid_request_error", "message": message}},
                             status=400)


def anthropic_usage(s: Served) -> dict[str, Any]:
    return {"input_tokens": s.uncached, "cache_creation_input_tokens": s.write, "cache_read_input_tokens": s.read,
            "cache_creation": {"ephemeral_5m_input_tokens": s.write - s.write_1h,
                               "ephemeral_1h_input_tokens": s.write_1h},
            "output_tokens": 1}


OUTPUT_TOKENS = 5


async def _answer(request: web.Request, s: Served, n: int,
                  reply: tuple[list[dict[str, Any]], str] | None) -> web.StreamResponse:
    text = f"answer {n}"
    if s.shape == "converse":
        return await _converse_answer(request, s, text)
    usage = anthropic_usage(s)
    blocks, stop = reply if reply is not None else (a.text_block(0, [text]), "end_turn")
    events = [a.message_start(f"msg_{n}", usage), a.ping(), *blocks,
              a.message_delta(stop, {"output_tokens": OUTPUT_TOKENS}), a.message_stop()]
    if not s.stream:
        assert reply is None, "scripted replies are streamed"
        return web.json_response({"id": f"msg_{n}", "type": "message", "role": "assistant", "model": s.deployment,
                                  "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                                  "stop_sequence": None, "usage": {**usage, "output_tokens": OUTPUT_TOKENS}})
    if s.shape == "bedrock":
        return await _write(request, b"".join(frames.chunk(e) for e in events), frames_type=True)
    return await _write(request, b"".join(a.event(e) for e in events), frames_type=False)


async def _converse_answer(request: web.Request, s: Served, text: str) -> web.StreamResponse:
    usage = {"inputTokens": s.uncached, "outputTokens": OUTPUT_TOKENS, "totalTokens": s.total + OUTPUT_TOKENS,
             "cacheReadInputTokens": s.read, "cacheWriteInputTokens": s.write}
    if not s.stream:
        return web.json_response({"output": {"message": {"role": "assistant", "content": [{"text": text}]}},
                                  "stopReason": "end_turn", "usage": usage, "metrics": {"latencyMs": 1}})
    events = [("messageStart", {"role": "assistant"}),
              ("contentBlockDelta", {"delta": {"text": text}, "contentBlockIndex": 0}),
              ("contentBlockStop", {"contentBlockIndex": 0}), ("messageStop", {"stopReason": "end_turn"}),
              ("metadata", {"usage": usage, "metrics": {"latencyMs": 1}})]
    return await _write(request, b"".join(frames.event(name, e) for name, e in events), frames_type=True)


async def _write(request: web.Request, data: bytes, frames_type: bool) -> web.StreamResponse:
    ctype = "application/vnd.amazon.eventstream" if frames_type else "text/event-stream"
    resp = web.StreamResponse(headers={"Content-Type": ctype})
    await resp.prepare(request)
    await resp.write(data)
    await resp.write_eof()
    return resp
