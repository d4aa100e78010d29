"""A Redis that comes and goes (docs/scale-out.md, "A Redis that comes and goes"): how often a replica
switches back to shared counting, and how many operations pay the deadline, while Redis stalls for a
part of every second.

One `RedisBackend` (this checkout's, and `--baseline`'s in a process of its own) checks a limit every
10 ms against a real `redis-server` that is stopped (SIGSTOP) for `--stall-ms` of every `--every-ms`.
Printed per checkout: operations, switches back to shared counting (each may admit a limit more in its
minute), operations that waited at least 80% of `state.timeout_ms` (each paid the deadline), and the
operations' p99 wait.

    python -m bench.redis_flap [--baseline ../base] [--seconds 30] [--stall-ms 300] [--every-ms 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
TIMEOUT_S = 0.05  # state.timeout_ms's default


async def measure(seconds: float, stall_s: float, every_s: float) -> dict[str, float]:
    """In the checkout on PYTHONPATH: its backend, its test server helper."""
    from gateway.config.types import CacheConfig
    from gateway.state.redis import RedisBackend
    from tests.redis_server import RedisServer

    with RedisServer() as server:
        loop = asyncio.get_running_loop()
        modes: list[bool] = []
        backend = RedisBackend(server.url, CacheConfig(max_entries=10), op_timeout_s=TIMEOUT_S, on_mode=modes.append)
        stop = loop.time() + seconds

        async def stall() -> None:
            while loop.time() < stop:
                await asyncio.sleep(every_s - stall_s)  # the scenario's own timing, not synchronisation
                server.pause()
                try:
                    await asyncio.sleep(stall_s)
                finally:
                    server.resume()

        staller = asyncio.ensure_future(stall())
        waits: list[float] = []
        while loop.time() < stop:
            started = loop.time()
            await backend.check_request(f"k{len(waits) % 50}", 10_000, None, 0, time.time())
            waits.append(loop.time() - started)
            await asyncio.sleep(0.01)
        await staller
        await backend.close()
    waits.sort()
    return {"ops": len(waits), "switches_back": modes.count(False),
            "paid_deadline": sum(w >= 0.8 * TIMEOUT_S for w in waits),
            "p99_ms": waits[int(len(waits) * 0.99)] * 1000}


def run_in(source: Path, args: argparse.Namespace) -> dict[str, float]:
    """This file's `--measure` with `source` first on the path (run by path: the baseline may not have it)."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    out = subprocess.run([sys.executable, str(HERE), "--measure", "--seconds", str(args.seconds),
                          "--stall-ms", str(args.stall_ms), "--every-ms", str(args.every_ms)],
                         env=env, cwd=source, check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", help="another checkout, measured the same way")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--stall-ms", type=float, default=300.0)
    p.add_argument("--every-ms", type=float, default=1000.0)
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        print(json.dumps(asyncio.run(measure(args.seconds, args.stall_ms / 1000, args.every_ms / 1000))))
        return
    targets = [("this checkout", HERE.parent.parent)]
    if args.baseline:
        targets.append(("baseline", Path(args.baseline).resolve()))
    print(f"Redis stopped {args.stall_ms:.0f} ms of every {args.every_ms:.0f} ms for {args.seconds:.0f} s; "
          f"a limit checked every 10 ms; state.timeout_ms {TIMEOUT_S * 1000:.0f}")
    print("| checkout | operations | switches back to shared | paid the deadline | p99 wait ms |")
    print("| --- | --- | --- | --- | --- |")
    for name, source in targets:
        r = run_in(source, args)
        print(f"| {name} | {r['ops']:.0f} | {r['switches_back']:.0f} | {r['paid_deadline']:.0f} | {r['p99_ms']:.1f} |")


if __name__ == "__main__":
    main()
