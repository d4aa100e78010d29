"""Load generator: streamed chat requests (or, with `api: messages`, Anthropic Messages requests) at a
fixed concurrency, each measured and checked.

Per request it records the time to the first content delta and the total time (from just before the
request is sent), assembles the content deltas and compares them with the text the fake upstream sent
(`bench.textgen`); a wrong status, an error event, a missing `[DONE]`, a text mismatch or an exception
counts as an error by kind. Closed loop: `concurrency` workers, each sending its next request when the
previous one ends, until `requests` are done or `duration_s` has passed. Workers start spread over
`ramp_s`, so thousands of connections don't all knock at once.

Run in its own process by `bench.run` (it prints one JSON object), or in-process with `run_load`.

    python -m bench.loadgen --url http://127.0.0.1:8080/v1/chat/completions --concurrency 8 --requests 100
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import resource
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from bench.textgen import expected_text


@dataclass(frozen=True, slots=True)
class LoadSpec:
    url: str
    concurrency: int = 8
    requests: int = 0  # 0: no count limit (then duration_s bounds the run)
    duration_s: float = 0.0  # 0: no time limit
    ramp_s: float = 0.0
    ttft_ms: float = 0.0
    chunks: int = 20
    chunk_chars: int = 8
    gap_ms: float = 0.0
    tail_ms: float = 0.0
    words: bool = False
    nospace: bool = False
    model: str = "m"
    api: str = "chat"  # or "messages": POST an Anthropic Messages body, read Anthropic's events
    timeout_s: float = 120.0
    keep_samples: bool = True
    bearer: str = ""  # sent as `Authorization: Bearer …` when set (a gateway key or an IdP token)


@dataclass(slots=True)
class LoadResult:
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    ttft_s: list[float] = field(default_factory=list)  # successful requests only
    total_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    max_open: int = 0  # most streams open at once (request sent, answer not yet finished)
    cpu_s: float = 0.0  # this process's own CPU time over the run
    chunks_seen: int = 0  # SSE data events received (all requests)
    error_samples: dict[str, str] = field(default_factory=dict)  # kind -> the first such answer's start

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Run:
    def __init__(self, spec: LoadSpec, session: aiohttp.ClientSession) -> None:
        self.spec, self.session = spec, session
        self.result = LoadResult()
        self.errors: Counter[str] = Counter()
        self.next_index = 0
        self.open = 0
        self.headers = {"Content-Type": "application/json"}
        if spec.bearer:
            self.headers["Authorization"] = f"Bearer {spec.bearer}"
        self.deadline = time.perf_counter() + spec.duration_s if spec.duration_s > 0 else float("inf")

    def _take(self) -> int | None:
        spec = self.spec
        if (spec.requests and self.next_index >= spec.requests) or time.perf_counter() >= self.deadline:
            return None
        self.next_index += 1
        return self.next_index - 1

    async def worker(self, n: int) -> None:
        if self.spec.ramp_s > 0:
            await asyncio.sleep(self.spec.ramp_s * n / self.spec.concurrency)
        while (i := self._take()) is not None:
            await self.one(i)

    async def one(self, i: int) -> None:
        spec = self.spec
        req: dict[str, Any] = {
            "model": spec.model, "stream": True, "messages": [{"role": "user", "content": "benchmark"}],
            "bench": {"ttft_ms": spec.ttft_ms, "chunks": spec.chunks, "chunk_chars": spec.chunk_chars,
                      "gap_ms": spec.gap_ms, "seed": i, "tail_ms": spec.tail_ms,
                      "words": spec.words, "nospace": spec.nospace},
        }
        if spec.api == "messages":
            req["max_tokens"] = 4096
        body = orjson.dumps(req)
        self.open += 1
        self.result.max_open = max(self.result.max_open, self.open)
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(spec.timeout_s):
                kind, t_first, n_events = await self._exchange(body, i, t0)
        except TimeoutError:
            kind, t_first, n_events = "timeout", 0.0, 0
        except (aiohttp.ClientError, OSError) as exc:
            kind, t_first, n_events = type(exc).__name__, 0.0, 0
            self.result.error_samples.setdefault(kind, str(exc)[:300])
        finally:
            self.open -= 1
        t_end = time.perf_counter()
        self.result.chunks_seen += n_events
        if kind:
            self.errors[kind] += 1
            return
        self.result.ok += 1
        if spec.keep_samples:
            self.result.ttft_s.append(t_first - t0)
            self.result.total_s.append(t_end - t0)

    async def _exchange(self, body: bytes, i: int, t0: float) -> tuple[str, float, int]:
        """('' or an error kind, time of the first content delta, events seen)."""
        spec = self.spec
        async with self.session.post(spec.url, data=body, headers=self.headers) as resp:
            if resp.status != 200:
                kind = f"http_{resp.status}"
                self.result.error_samples.setdefault(kind, (await resp.read())[:300].decode(errors="replace"))
                return kind, 0.0, 0
            parser = _SSEText() if spec.api == "chat" else _MessagesText()
            async for data in resp.content.iter_any():
                now = time.perf_counter()  # arrival, before this process spends time parsing it
                parser.feed(data)
                if parser.t_first == 0.0 and parser.parts:
                    parser.t_first = now
            if parser.error:
                return parser.error, 0.0, parser.events
            if not parser.done:
                return "no_done", 0.0, parser.events
            if "".join(parser.parts) != expected_text(i, spec.chunks, spec.chunk_chars, spec.words, spec.nospace):
                return "text_mismatch", 0.0, parser.events
            return "", parser.t_first, parser.events


class _SSEText:
    """Just enough SSE for these streams: events end with a blank line, `data: ` lines carry JSON."""

    __slots__ = ("buf", "done", "error", "events", "parts", "t_first")

    def __init__(self) -> None:
        self.buf = b""
        self.parts: list[str] = []
        self.done = False
        self.error = ""
        self.events = 0
        self.t_first = 0.0

    def feed(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.rfind(b"\n\n")
        if end < 0:
            return
        block, self.buf = self.buf[:end], self.buf[end + 2:]
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                self._data(line[5:].strip())

    def _data(self, payload: bytes) -> None:
        self.events += 1
        if payload == b"[DONE]":
            self.done = True
            return
        obj = orjson.loads(payload)
        if "error" in obj:
            self.error = "error_event"
            return
        for choice in obj.get("choices") or ():
            text = (choice.get("delta") or {}).get("content")
            if text:
                self.parts.append(text)


class _MessagesText(_SSEText):
    """The same for Anthropic's events: text_delta text, `message_stop` ends, `error` is an error."""

    __slots__ = ()

    def _data(self, payload: bytes) -> None:
        self.events += 1
        obj = orjson.loads(payload)
        etype = obj.get("type")
        if etype == "content_block_delta":
            delta = obj.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                self.parts.append(delta["text"])
        elif etype == "message_stop":
            self.done = True
        elif etype == "error":
            self.error = "error_event"


async def run_load(spec: LoadSpec) -> LoadResult:
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=spec.timeout_s)
    cpu0 = _cpu()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        run = _Run(spec, session)
        t0 = time.perf_counter()
        await asyncio.gather(*(run.worker(n) for n in range(spec.concurrency)))
        run.result.wall_s = time.perf_counter() - t0
    run.result.errors = dict(run.errors)
    run.result.cpu_s = _cpu() - cpu0
    return run.result


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _parse(argv: list[str] | None) -> tuple[LoadSpec, str | None]:
    p = argparse.ArgumentParser(description="streamed chat load generator (prints one JSON object)")
    p.add_argument("--url", required=True)
    for f in dataclasses.fields(LoadSpec):
        if f.name in ("url", "keep_samples", "words", "nospace"):
            continue
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    p.add_argument("--words", action="store_true", help="one word per delta, with its leading space")
    p.add_argument("--nospace", action="store_true", help="the words glued together: no whitespace at all")
    p.add_argument("--no-samples", action="store_true")
    p.add_argument("--out", help="write the JSON result to this file instead of stdout")
    args = vars(p.parse_args(argv))
    args["keep_samples"] = not args.pop("no_samples")
    out = args.pop("out")
    return LoadSpec(**args), out


def main(argv: list[str] | None = None) -> None:
    spec, out = _parse(argv)
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        result = asyncio.run(run_load(spec))
    else:
        result = uvloop.run(run_load(spec))
    data = orjson.dumps(result.as_json())
    if out:
        with open(out, "wb") as f:
            f.write(data)
        return
    os.set_blocking(sys.stdout.fileno(), True)  # the event loop may have left it non-blocking: no short write
    sys.stdout.write(data.decode() + "\n")


if __name__ == "__main__":
    main()
