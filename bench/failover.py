"""#61, acceptance 2: what a Redis failover under load adds to a request's latency.

Two gateway processes (`gateway serve`, one worker each) share rpm/tpm limits in Redis, a 6-node Redis
Cluster (3 primaries, 3 replicas) or one master + one replica + 3 Sentinels (`tests/redis_topologies.py`),
under `--streams` concurrent streamed chat requests spread over both. After a baseline, the primary
holding the key's rate-limit slot (or the Sentinel master) is killed (SIGKILL); the load goes on until
both replicas count in Redis again (`llm_gateway_state_degraded` back to 0), then a while longer. With
`--no-kill` nothing is killed (the control: what the same windows show on this machine without a failover).

Each request's time to its last byte is kept with its start. Printed: p50/p99/max over the requests
started in the baseline, during the failover (from the kill until both replicas are shared again) and
after it, and the failover's figures minus the baseline's ("added latency"), against the bound
`state.timeout_ms` + 10 ms; every non-200 answer by window; when the gauges went to 1 and back to 0;
the machine's load (load average; CPU seconds of the gateways, of this process, and of the whole machine
against its capacity: everything else that ran, the Redis servers and other work included).

    python -m bench.failover                        # cluster, 50 streams, state.timeout_ms 50
    python -m bench.failover --mode sentinel --streams 50 --timeout-ms 50
    python -m bench.failover --no-kill              # the control: the same windows, nothing killed
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from redis.crc import key_slot

from bench.procstat import usage
from bench.servers import Server, free_port, gateway_config, spawn, start_upstream
from bench.variants import BENCH_KEY, HIGH_RPM, HIGH_TPM
from gateway.state.keys import rate_key
from tests.redis_server import RedisServer
from tests.redis_topologies import RedisClusterNodes, RedisSentinels

KEY_NAME = "bench"  # its limits are counted under its name (no stored key id)
SCRAPE_S = 0.05  # how often the gauges are read


@dataclass
class Sample:
    start: float
    took_s: float
    outcome: str  # "200", "http_503", an exception's name, "no_done"


@dataclass
class Timeline:
    samples: list[Sample] = field(default_factory=list)
    degraded: dict[int, list[tuple[float, bool]]] = field(default_factory=dict)  # gateway -> (t, gauge)


class Topology:
    """The Redis under the replicas, and how to kill the node holding the key's rate limits."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._stack = contextlib.ExitStack()
        self.cluster: RedisClusterNodes | None = None
        self.sentinels: RedisSentinels | None = None
        if mode == "cluster":
            self.cluster = self._stack.enter_context(RedisClusterNodes())
        else:
            self.sentinels = self._stack.enter_context(RedisSentinels())

    def state(self, timeout_ms: int) -> dict[str, Any]:
        base: dict[str, Any] = {"backend": "redis", "timeout_ms": timeout_ms, "replicas": 2}
        if self.cluster is not None:
            return {**base, "redis_mode": "cluster", "redis_url": self.cluster.url}
        assert self.sentinels is not None
        return {**base, "redis_mode": "sentinel",
                "sentinel": {"master": self.sentinels.master, "urls": self.sentinels.urls}}

    def kill(self) -> RedisServer:
        if self.cluster is not None:
            victim = self.cluster.primary_of(self._slot())
            self.cluster.kill(victim)
            return victim
        assert self.sentinels is not None
        return self.sentinels.kill_master()

    def wait_promoted(self, old: RedisServer) -> None:
        if self.cluster is not None:
            self.cluster.wait_failover(self._slot(), old)
        else:
            assert self.sentinels is not None
            self.sentinels.wait_failover(old)

    @staticmethod
    def _slot() -> int:
        return key_slot(rate_key(KEY_NAME, "rpm", 0).encode())

    def close(self) -> None:
        self._stack.close()


def config_text(upstream_port: int, state: dict[str, Any]) -> str:
    cfg: dict[str, Any] = yaml.safe_load(gateway_config(upstream_port, redaction=False))
    cfg["auth"] = {"keys": [{"name": KEY_NAME, "key": BENCH_KEY, "rpm": HIGH_RPM, "tpm": HIGH_TPM}]}
    cfg["state"] = state
    return yaml.safe_dump(cfg, sort_keys=False)


@dataclass
class Gateway:
    server: Server
    metrics_port: int


def start_gateways(workdir: Path, config: Path) -> list[Gateway]:
    out = []
    for n in range(2):
        port, mport = free_port(), free_port()
        argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port),
                "--metrics-port", str(mport), "--workers", "1"]
        server = spawn(f"gateway-{n}", argv, workdir, port)
        server.wait_ready("/healthz")
        out.append(Gateway(server, mport))
    return out


class Load:
    def __init__(self, gws: list[Gateway], streams: int, timeline: Timeline) -> None:
        self._gws, self._streams, self._timeline = gws, streams, timeline
        self.stop = asyncio.Event()

    async def run(self, session: aiohttp.ClientSession) -> None:
        await asyncio.gather(*(self._client(session, i) for i in range(self._streams)), self._scrape(session))

    async def _client(self, session: aiohttp.ClientSession, i: int) -> None:
        url = self._gws[i % len(self._gws)].server.url
        headers = {"Authorization": f"Bearer {BENCH_KEY}", "Content-Type": "application/json"}
        n = 0
        while not self.stop.is_set():
            n += 1
            body = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": f"{i}.{n}"}],
                                 "bench": {"ttft_ms": 20, "chunks": 20, "chunk_chars": 8, "gap_ms": 1, "seed": n}})
            started = time.monotonic()
            outcome = await self._one(session, url, body, headers)
            self._timeline.samples.append(Sample(started, time.monotonic() - started, outcome))

    @staticmethod
    async def _one(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]) -> str:
        try:
            async with asyncio.timeout(30), session.post(url, data=body, headers=headers) as resp:
                data = await resp.read()
                if resp.status != 200:
                    return f"http_{resp.status}"
                return "200" if b"[DONE]" in data else "no_done"
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return type(exc).__name__

    async def _scrape(self, session: aiohttp.ClientSession) -> None:
        while not self.stop.is_set():
            for n, gw in enumerate(self._gws):
                value = await degraded_gauge(session, gw.metrics_port)
                self._timeline.degraded.setdefault(n, []).append((time.monotonic(), value))
            await asyncio.sleep(SCRAPE_S)  # a sampling interval, not synchronisation


async def degraded_gauge(session: aiohttp.ClientSession, port: int) -> bool:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        text = await resp.text()
    return any(line.startswith("llm_gateway_state_degraded ") and float(line.split()[1]) == 1
               for line in text.splitlines())


def all_shared(timeline: Timeline) -> bool:
    return all(points and not points[-1][1] for points in timeline.degraded.values()) and len(timeline.degraded) == 2


async def wait_until(cond: Any, what: str, within_s: float = 30.0) -> float:
    deadline = time.monotonic() + within_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)  # polling the scraped gauges, bounded by the deadline
    return time.monotonic()


@dataclass
class Marks:
    baseline_from: float = 0.0
    killed: float = 0.0
    promoted: float = 0.0
    restored: float = 0.0
    ended: float = 0.0


async def drive(topology: Topology, gws: list[Gateway], args: argparse.Namespace) -> tuple[Timeline, Marks]:
    timeline, marks = Timeline(), Marks()
    load = Load(gws, args.streams, timeline)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        running = asyncio.ensure_future(load.run(session))
        await asyncio.sleep(args.warmup_s)  # the warm-up: connections opened, scripts loaded
        await wait_until(lambda: all_shared(timeline), "both replicas to count in Redis")
        marks.baseline_from = time.monotonic()
        await asyncio.sleep(args.baseline_s)  # the baseline's length
        marks.killed = time.monotonic()
        if args.no_kill:  # the control: the same windows, nothing killed
            await asyncio.sleep(args.control_gap_s)  # as long as a failover's gap
            marks.promoted = marks.restored = time.monotonic()
        else:
            old = await asyncio.to_thread(topology.kill)
            await asyncio.to_thread(topology.wait_promoted, old)
            marks.promoted = time.monotonic()
            marks.restored = await wait_until(lambda: all_shared(timeline) and time.monotonic() > marks.promoted,
                                              "both replicas to count in Redis again")
        await asyncio.sleep(args.after_s)  # the window after the failover
        marks.ended = time.monotonic()
        load.stop.set()
        await running
    return timeline, marks


def percentiles(took: list[float]) -> tuple[float, float, float]:
    if not took:
        return float("nan"), float("nan"), float("nan")
    s = sorted(took)
    return s[len(s) // 2] * 1000, s[min(len(s) - 1, int(len(s) * 0.99))] * 1000, s[-1] * 1000


def report(timeline: Timeline, marks: Marks, args: argparse.Namespace, cpu: dict[str, float],
           load_avg: tuple[float, float]) -> None:
    windows = {"baseline": (marks.baseline_from, marks.killed), "failover": (marks.killed, marks.restored),
               "after": (marks.restored, marks.ended)}
    control = " (control: nothing killed)" if args.no_kill else ""
    print(f"mode {args.mode}{control}, {args.streams} streams over 2 gateways, state.timeout_ms {args.timeout_ms}: "
          f"bound on added p99 {args.timeout_ms + 10} ms")
    print(f"kill -> new primary {marks.promoted - marks.killed:.2f} s; new primary -> both shared "
          f"{marks.restored - marks.promoted:.2f} s")
    for n, points in sorted(timeline.degraded.items()):
        flips = [(round(t - marks.killed, 2), int(v)) for (t, v), (_, was) in zip(points[1:], points[:-1], strict=True)
                 if v != was]
        print(f"gateway-{n} gauge changes (s from the kill, value): {flips}")
    base = percentiles(took_in(timeline, *windows["baseline"]))
    print("| window | requests | not 200 | p50 ms | p99 ms | max ms | added p50 | added p99 | added max |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, (lo, hi) in windows.items():
        picked = [s for s in timeline.samples if lo <= s.start < hi]
        p = percentiles([s.took_s for s in picked])
        bad = sorted({s.outcome for s in picked if s.outcome != "200"})
        nbad = f"{sum(s.outcome != '200' for s in picked)} {' '.join(bad)}".strip()
        added = " | ".join(f"{a - b:+.1f}" for a, b in zip(p, base, strict=True))
        print(f"| {name} | {len(picked)} | {nbad} | {p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} | {added} |")
    print(f"machine: {os.cpu_count()} cores, load average (1 min) {load_avg[0]:.2f} before, {load_avg[1]:.2f} after;"
          " CPU s over the run: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))


def took_in(timeline: Timeline, lo: float, hi: float) -> list[float]:
    return [s.took_s for s in timeline.samples if lo <= s.start < hi]


@contextlib.contextmanager
def running(mode: str, timeout_ms: int) -> Iterator[tuple[Topology, list[Gateway]]]:
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        workdir = Path(tmp)
        topology = Topology(mode)
        upstream: Server | None = None
        gws: list[Gateway] = []
        try:
            upstream = start_upstream(workdir)
            config = workdir / "gateway.yaml"
            config.write_text(config_text(upstream.port, topology.state(timeout_ms)))
            gws = start_gateways(workdir, config)
            yield topology, gws
        finally:
            for gw in gws:
                gw.server.stop()
            if upstream is not None:
                upstream.stop()
            topology.close()


def machine_busy() -> tuple[float, float]:
    """CPU seconds the whole machine spent busy, and its capacity, so far (/proc/stat): what else ran."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / tick, sum(fields) / tick


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("cluster", "sentinel"), default="cluster")
    p.add_argument("--streams", type=int, default=50)
    p.add_argument("--timeout-ms", type=int, default=50, help="state.timeout_ms (the gateway's default: 50)")
    p.add_argument("--warmup-s", type=float, default=3.0)
    p.add_argument("--baseline-s", type=float, default=10.0)
    p.add_argument("--after-s", type=float, default=5.0)
    p.add_argument("--no-kill", action="store_true",
                   help="the control run: nothing is killed; the 'failover' window is --control-gap-s long")
    p.add_argument("--control-gap-s", type=float, default=4.0)
    args = p.parse_args()
    with running(args.mode, args.timeout_ms) as (topology, gws):
        before = os.getloadavg()[0]
        pids = {f"gateway-{n}": gw.server.pid for n, gw in enumerate(gws)}
        start_cpu = {k: usage(pid).cpu_s for k, pid in pids.items()}
        machine_start = machine_busy()
        self_start = time.process_time()
        timeline, marks = asyncio.run(drive(topology, gws, args))
        cpu = {k: usage(pid).cpu_s - start_cpu[k] for k, pid in pids.items()}
        busy, total = (b - a for a, b in zip(machine_start, machine_busy(), strict=True))
        cpu["whole machine (busy)"] = busy
        cpu["machine capacity"] = total
        cpu["load generator"] = time.process_time() - self_start
        report(timeline, marks, args, cpu, (before, os.getloadavg()[0]))


if __name__ == "__main__":
    main()
