"""Helpers for the scale-out tests: gateway configs on a Redis topology and two replicas of one, statuses
through the official SDK, a small streaming load that records every answer while Redis fails over under
it, the failover itself as the cluster and Sentinel tests drive it, and a burst of checks on one backend."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import openai

from gateway.config import parse_config
from gateway.config.types import CacheConfig, Config, StateConfig
from gateway.state import lua
from gateway.state.base import LimitDecision, create_backend
from tests.harness import GatewayServer, LoopThread

PATH = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
LOAD_KEY = {"name": "load", "key": "key-load", "rpm": 100_000}  # limited, so every request touches Redis
STREAMS = 50  # concurrent streams over both replicas while Redis fails over (docs/scale-out.md)
SCRIPTS = (lua.CHECK_REQUEST, lua.SETTLE_TOKENS, lua.ADD_SPEND, lua.SEED_SPEND,
           lua.ADD_SERVED_NAME, lua.OWN_RESPONSE, lua.CACHE_SET)  # loaded on every primary
Make = Callable[..., GatewayServer]
Victim = TypeVar("Victim")


def raw(upstream_url: str, state: dict[str, Any], keys: list[dict[str, Any]]) -> dict[str, Any]:
    """The scale-out tests' config, as YAML would give it: a request of `HI` costs $0.018 (18 tokens)."""
    return {
        "auth": {"keys": keys},
        "state": {"backend": "redis", **state},
        "cache": {"enabled": True, "ttl_s": 60},
        "providers": {"up": {"type": "openai", "base_url": f"{upstream_url}/v1"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x",
                                                  "price": {"input": 1000, "output": 1000}}], "cache": True}],
    }


def config(upstream_url: str, state: dict[str, Any], keys: list[dict[str, Any]]) -> Config:
    return parse_config(raw(upstream_url, state, keys), env={})


def replicas(make: Make, upstream_url: str, state: dict[str, Any], keys: list[dict[str, Any]],
             ) -> list[GatewayServer]:
    """Two gateway replicas with one config: the scale-out tests' unit of sharing."""
    return [make(config(upstream_url, state, keys)) for _ in range(2)]


def script_sha(source: str) -> str:
    """The SHA1 Redis knows a script by (SCRIPT EXISTS)."""
    return hashlib.sha1(source.encode()).hexdigest()


def sdk(gw: GatewayServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0, timeout=20)


def status_of(gw: GatewayServer, key: str, prompt: str = "hi", **kw: Any) -> int:
    try:
        sdk(gw, key).chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}], **kw)
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


def error_code(gw: GatewayServer, key: str) -> str | None:
    try:
        sdk(gw, key).chat.completions.create(model="m", messages=HI)
    except openai.APIStatusError as exc:
        return str(exc.code)
    return None


def alternate(gws: list[GatewayServer], key: str, n: int, **kw: Any) -> list[int]:
    """`n` requests spread over the replicas, 8 at a time, each a prompt of its own (no cache hits)."""
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda i: status_of(gws[i % len(gws)], key, f"{key} {i}", **kw), range(n)))


def poll(cond: Callable[[], bool], what: str, within_s: float = 15.0) -> float:
    """Wait for a state the system changes in the background (a gauge); returns when it held."""
    deadline = time.monotonic() + within_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)  # polling a gauge: no event to wait on, bounded by the deadline
    return time.monotonic()


def degraded(gw: GatewayServer) -> bool:
    return gw.sample("llm_gateway_state_degraded") == 1


def served_locally(gws: list[GatewayServer]) -> float:
    """State operations the replicas served locally so far (`llm_gateway_state_degraded_total`)."""
    return sum(g.sample("llm_gateway_state_degraded_total") for g in gws)


def admitted_while_shared(gws: list[GatewayServer], keys: Sequence[str], n: int) -> int:
    """The 200s of `n` requests (`alternate`) under the first of `keys` whose burst ran wholly on shared
    counting. On a starved host one operation over `state.timeout_ms` sends a replica local for a moment,
    and a burst that met that says nothing about sharing; a broken sharing still fails every key."""
    for key in keys:
        poll(lambda: not any(degraded(g) for g in gws), "shared counting on both replicas")
        before = served_locally(gws)
        statuses = alternate(gws, key, n)
        if served_locally(gws) == before:
            return statuses.count(200)
    raise AssertionError(f"every burst ({len(keys)}) met a local fallback: the host is too busy for its timeout_ms")


class StreamLoad:
    """`streams` clients streaming through the replicas in turn until stopped; every outcome is kept
    (a status code, or the exception's name when the connection itself failed).

    The clients are the SDK's async client, all on one event loop of their own thread: one thread
    sharing the interpreter with the servers' loop, where a thread per client (50 of them) had the
    servers' loop wait for the GIL after each system call, slower than any `state.timeout_ms`."""

    def __init__(self, gws: list[GatewayServer], streams: int = 10) -> None:
        self._gws, self._streams = gws, streams
        self._stop = threading.Event()
        self.outcomes: list[int | str] = []
        self.timings: list[tuple[float, float]] = []  # (start, seconds to the last byte), for the report
        self._lock = threading.Lock()
        self._loop = LoopThread()
        self._done: Future[list[None]] | None = None

    def __enter__(self) -> StreamLoad:
        self._done = asyncio.run_coroutine_threadsafe(self._all(), self._loop.loop)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        try:
            if self._done is not None:
                self._done.result(30)
        finally:
            self._loop.stop()

    async def _all(self) -> list[None]:
        return await asyncio.gather(*(self._client(i) for i in range(self._streams)))

    async def _client(self, i: int) -> None:
        gw = self._gws[i % len(self._gws)]
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=str(LOAD_KEY["key"]), max_retries=0,
                                      timeout=20) as client:
            n = 0
            while not self._stop.is_set():
                n += 1
                started = time.monotonic()
                outcome = await self._one(client, f"load {i}.{n}")  # distinct prompts: no cache hits
                self._record(outcome, (started, time.monotonic() - started))

    @staticmethod
    async def _one(client: openai.AsyncOpenAI, prompt: str) -> int | str:
        try:
            stream = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": prompt}], stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            return 200 if text else "empty"
        except openai.APIStatusError as exc:
            return exc.status_code
        except openai.APIError as exc:
            return type(exc).__name__

    def _record(self, outcome: int | str, timing: tuple[float, float]) -> None:
        with self._lock:
            self.outcomes.append(outcome)
            self.timings.append(timing)

    def p99_ms(self, since: float, until: float) -> float:
        """The 99th percentile of request durations started in [since, until), in ms (printed by the
        tests as a measurement, never asserted: the machine's load decides it)."""
        with self._lock:
            took = sorted(d for s, d in self.timings if since <= s < until)
        return took[min(len(took) - 1, int(len(took) * 0.99))] * 1000 if took else float("nan")

    def count(self) -> int:
        with self._lock:
            return len(self.outcomes)

    def wait_for_more(self, n: int) -> None:
        target = self.count() + n
        poll(lambda: self.count() >= target, f"{n} more answers under load")


@dataclass(frozen=True)
class Failover:
    """When the measured window began, the primary was killed, and the replicas counted shared again."""
    started: float
    killed: float
    restored: float

    def report(self, load: StreamLoad, what: str) -> None:
        """Printed as a measurement, never asserted: the machine's load decides it."""
        print(f"{what} failover: p99 {load.p99_ms(self.started, self.killed):.0f} ms before the kill, "
              f"{load.p99_ms(self.killed, self.restored):.0f} ms until shared again "
              f"({self.restored - self.killed:.1f} s)")


def fail_over_under_load(gws: list[GatewayServer], load: StreamLoad, kill: Callable[[], Victim],
                         wait_failover: Callable[[Victim], object]) -> Failover:
    """Kill Redis's primary under `load` and wait out the failover (docs/scale-out.md): both replicas
    count locally during the gap, and shared again within 5 s of the new primary."""
    load.wait_for_more(20)  # the warm-up, not in the figure printed
    # a busy machine can hold a replica past a deadline and flip it local for a moment: shared first
    poll(lambda: not any(degraded(g) for g in gws), "shared counting before the kill")
    started = time.monotonic()
    load.wait_for_more(20)
    killed, local_before = time.monotonic(), served_locally(gws)
    victim = kill()
    poll(lambda: all(degraded(g) for g in gws), "both replicas to count locally")
    wait_failover(victim)
    promoted = time.monotonic()
    restored = poll(lambda: not any(degraded(g) for g in gws), "shared counting to resume")
    assert restored - promoted <= 5.0
    assert served_locally(gws) > local_before, "the limits were counted locally during the gap"
    load.wait_for_more(20)
    return Failover(started, killed, restored)


async def burst(state: StateConfig, names: Sequence[str]) -> tuple[list[bool], list[LimitDecision]]:
    """One check per name, all at once on one backend: the modes it switched to, and the decisions."""
    modes: list[bool] = []
    backend = create_backend(state, CacheConfig(), lambda _reason: None, modes.append)
    try:
        results = await asyncio.gather(*(backend.check_request(name, 10_000, None, 0, 1_700_000_000.0)
                                         for name in names))
    finally:
        await backend.close()
    return modes, [decision for decision, _ in results]


SPARES = 3  # keys per rpm check (`admitted_while_shared`)


def spare_keys(key: str) -> list[str]:
    return [key] + [f"{key}-{i}" for i in range(1, SPARES)]


def spares(name: str, key: str, rpm: int) -> list[dict[str, Any]]:
    """The config's keys for one rpm check: `SPARES` keys of one limit, each a fresh count."""
    return [{"name": n, "key": k, "rpm": rpm}
            for n, k in zip(spare_keys(name), spare_keys(key), strict=True)]
