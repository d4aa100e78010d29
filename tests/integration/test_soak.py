"""A bounded soak: thousands of concurrent streams with a seeded mix of faults injected at random points.

Properties: every stream either equals the upstream's text exactly, or ends with exactly one error event
after a prefix of it; every fault before the first token is recovered by the healthy fallback (100%);
afterwards no upstream request, task or file descriptor is left over and memory is back near its start.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
from collections import Counter

import aiohttp
import orjson
import pytest

from gateway.config import parse_config
from gateway.core.sse import SSEDecoder
from tests.chat_scripts import chunk, error_script, text_stream
from tests.fake_upstream import Close, FakeUpstream, Part, Script, sse
from tests.harness import GatewayServer, LoopThread, wait_until

# bounds memory over a long run: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

STREAMS, CONCURRENCY, SEED = 2000, 64, 20261130
WORDS = [f"w{i} " for i in range(12)]
FULL = "".join(WORDS)
ROLE = sse(chunk({"role": "assistant", "content": ""}))
BEFORE = ("http_500", "inband_before", "close_before", "malformed_before")
AFTER = ("close_after", "inband_after")


def faulty(kind: str, rng: random.Random) -> Script:
    cut = rng.randint(1, len(WORDS) - 1)  # tokens sent before an after-token fault
    head: list[Part] = [ROLE] + [sse(chunk({"content": w})) for w in WORDS[:cut]]
    scripts = {
        "http_500": error_script(500, None, "boom", "server_error"),
        "inband_before": Script([ROLE, sse({"error": {"code": "rate_limit_exceeded", "message": "x"}})]),
        "close_before": Script([ROLE, Close()]),
        "malformed_before": Script([ROLE, b"data: {broken\n\n"]),
        "close_after": Script([*head, Close()]),
        "inband_after": Script([*head, sse({"error": {"code": "server_error", "message": "x"}})]),
    }
    script = scripts[kind] if kind in scripts else text_stream(WORDS)
    script.tag = kind
    return script


async def one(session: aiohttp.ClientSession, url: str) -> tuple[str, int, bool]:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    async with session.post(url, json=body) as resp:
        assert resp.status == 200
        dec, text, errors, done = SSEDecoder(), [], 0, False
        async for data in resp.content.iter_any():
            for ev in dec.feed(data):
                if ev.data == b"[DONE]":
                    done = True
                    continue
                obj = orjson.loads(ev.data)
                if "error" in obj:
                    errors += 1
                    continue
                text += [c["delta"].get("content") or "" for c in obj["choices"]]
        return "".join(text), errors, done


async def drive(url: str, n: int) -> list[tuple[str, int, bool]]:
    sem = asyncio.Semaphore(CONCURRENCY)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        async def bounded() -> tuple[str, int, bool]:
            async with sem:
                return await one(session, url)

        return await asyncio.gather(*(bounded() for _ in range(n)))


def rss_kib() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def test_soak_with_seeded_faults(servers: LoopThread, upstream: FakeUpstream) -> None:
    rng = random.Random(SEED)
    config = parse_config({
        "server": {"keepalive_after_s": 30},
        "auth": {"allow_unauthenticated": True},
        "providers": {
            "a": {"type": "openai", "base_url": f"{upstream.base_url}/a/v1", "breaker": {"failures": 1_000_000}},
            "b": {"type": "openai", "base_url": f"{upstream.base_url}/b/v1"},
        },
        "models": [{"name": "m", "deployments": [{"provider": "a", "model": "a"}, {"provider": "b", "model": "b"}],
                    "retry": {"max_attempts": 3, "per_deployment": 1, "initial_backoff_ms": 0}}],
    }, env={})
    gw = GatewayServer(config)
    servers.run(gw.start())
    url = f"{gw.base_url}/chat/completions"
    upstream.defaults["/b/v1/chat/completions"] = text_stream(WORDS)
    kinds = [rng.choice((*BEFORE, *AFTER, "ok", "ok", "ok")) for _ in range(STREAMS + 200)]
    upstream.enqueue("/a/v1/chat/completions", *(faulty(k, rng) for k in kinds))

    asyncio.run(drive(url, 200))  # warm-up: pools, caches, lazily built objects
    fds_before, rss_before = open_fds(servers, gw), rss_kib()
    tasks_before = servers.run(_task_count())
    served_before = len(upstream.served)

    results = asyncio.run(drive(url, STREAMS))

    served = Counter(upstream.served[served_before:])
    errored = [r for r in results if r[1]]
    assert all(errors == 1 and not done and FULL.startswith(text) and text != FULL
               for text, errors, done in errored), "a failed stream: one error event after a prefix"
    assert all(text == FULL and done for text, errors, done in results if not errors)
    assert len(errored) == sum(served[k] for k in AFTER), "only faults after the first token are visible"
    assert sum(served[k] for k in BEFORE) > 500, "the mix really injected faults before the first token"

    servers.run(_settle(upstream))
    gc.collect()
    # the gateway's tasks of the closed client session finish just after it: wait for them, bounded
    servers.run(wait_until(lambda: _gateway_tasks() <= tasks_before, 5.0))
    assert open_fds(servers, gw) <= fds_before + 8
    assert rss_kib() - rss_before < 64 * 1024, "memory returns near its start"
    assert gw.sample("llm_gateway_inflight_requests", api="chat") == 0
    servers.run(gw.stop())


def open_fds(servers: LoopThread, gw: GatewayServer) -> int:
    """This process's open descriptors, with the gateway's idle keep-alive pool emptied first: the pool
    holds up to a connection per concurrent stream (two descriptors each, both ends being in this
    process), how many is a matter of timing, and it is not a leak. Counted once the fake upstream has
    seen every one of them close."""
    servers.run(_drop_idle_pool(gw))
    servers.run(wait_until(lambda: _upstream_connections() == 0, 5.0))
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


async def _drop_idle_pool(gw: GatewayServer) -> None:
    assert gw.app is not None
    gw.app.upstream.close()  # the idle pool only: a connection in use would stay (none is, here)


def _upstream_connections() -> int:
    """The fake upstream's open connections (its aiohttp server runs one task per connection)."""
    return sum(1 for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == "RequestHandler.start")


def _gateway_tasks() -> int:
    """Tasks on the servers' loop but the fake upstream's: its aiohttp server keeps one task per open
    connection, and the gateway keeps up to MAX_IDLE_PER_HOST of them in its pool (more after 2,000
    concurrent streams than after the warm-up's 200), which is not a task the gateway left behind."""
    return sum(1 for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") != "RequestHandler.start")


async def _task_count() -> int:
    return _gateway_tasks()


async def _settle(upstream: FakeUpstream) -> None:
    if upstream.active:
        await asyncio.wait_for(upstream.idle.wait(), 5)
