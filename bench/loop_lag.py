"""The event loop's lag, measured inside the gateway: a timer that notes how late it fires (issue #34).

`python /path/to/bench/loop_lag.py OUT_PREFIX serve --config ...` runs `gateway` (from the current
directory, so a baseline checkout works too) with a probe on each of its event loops: every `INTERVAL_S`
a `call_later` timer fires and notes how much later than asked it ran. A loop busy with one long step
(a compile, a big JSON, a GC pause) runs every timer late by that much, so the lateness distribution is
the stall every stream on that loop saw. Each process writes `OUT_PREFIX-<pid>.txt`, one line per tick
(`unix time, lateness ms, own lateness ms`), flushed every 10 ticks; `samples` reads them back for a
time window. The lateness also holds the time the OS ran other processes instead: on a 2-core machine
the load generator and the fake upstream compete with the gateway for the cores, and a runnable thread
waits its turn on the run queue for milliseconds. The loop's own lateness is the lateness less that wait
(the thread's run-queue time since the timer was set, from `/proc/thread-self/schedstat`, which the
kernel keeps per thread): what the loop itself spent on other work before it could run the timer.
Without schedstat it falls back to the lateness capped at the thread's CPU time since the timer was set.

The probe is installed by wrapping the gateway's uvloop policy (its one `install_uvloop` hook, which
forked `--workers` children inherit): a bench harness around the gateway, nothing in the gateway itself.
It costs one timer callback per 10 ms.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

INTERVAL_S = 0.01
FLUSH_EVERY = 10  # ticks: the bench reads a round's samples right after it


class Probe:
    def __init__(self, loop: asyncio.AbstractEventLoop, prefix: str,
                 on_flush: Callable[[], None] | None = None) -> None:
        self._loop, self._prefix, self._on_flush = loop, prefix, on_flush
        self._lines: list[str] = []
        self._file: TextIO | None = None
        self._due = self._cpu = 0.0
        self._closed = False

    def start(self) -> None:
        self._due, self._cpu = time.perf_counter() + INTERVAL_S, _waited_or_cpu()
        self._loop.call_later(INTERVAL_S, self._tick)

    def _tick(self) -> None:
        if self._closed:
            return
        now, mark = time.perf_counter(), _waited_or_cpu()
        # libuv timers have millisecond resolution: a timer may fire up to ~1 ms early or late by that
        late = max(0.0, now - self._due)
        own = max(0.0, late - (mark - self._cpu)) if _SCHEDSTAT else min(late, mark - self._cpu)
        self._lines.append(f"{time.time():.3f} {late * 1000:.3f} {own * 1000:.3f}\n")
        if len(self._lines) >= FLUSH_EVERY:
            self.flush()
        self._due, self._cpu = now + INTERVAL_S, _waited_or_cpu()
        self._loop.call_later(INTERVAL_S, self._tick)

    def flush(self) -> None:
        if self._file is None:  # opened in the process that runs the loop (a forked worker: its own pid)
            self._file = open(f"{self._prefix}-{os.getpid()}.txt", "a")  # noqa: SIM115 - kept open
        self._file.write("".join(self._lines))
        self._file.flush()
        self._lines.clear()
        if self._on_flush is not None:
            self._on_flush()

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            self._file.close()


_SCHEDSTAT = os.path.exists("/proc/thread-self/schedstat")


def _waited_or_cpu() -> float:
    """Seconds this thread has waited on the run queue (runnable, not running); without schedstat, its
    CPU time."""
    if not _SCHEDSTAT:
        return time.thread_time()
    with open("/proc/thread-self/schedstat", "rb") as f:
        return int(f.read().split()[1]) / 1e9


def samples(prefix: Path, t0: float, t1: float) -> list[tuple[float, float]]:
    """(lateness, the loop's own lateness) in ms of every tick between unix times t0 and t1, over all of a
    target's processes."""
    out: list[tuple[float, float]] = []
    for path in prefix.parent.glob(f"{prefix.name}-*.txt"):
        for line in path.read_text().splitlines():
            try:
                at, late, own = map(float, line.split())
            except ValueError:
                continue  # a line cut by a process that was killed mid-write
            if t0 <= at <= t1:
                out.append((late, own))
    return out


def _install(prefix: str) -> None:
    import uvloop

    class ProbedPolicy(uvloop.EventLoopPolicy):  # type: ignore[misc]
        def new_event_loop(self) -> asyncio.AbstractEventLoop:
            loop: asyncio.AbstractEventLoop = super().new_event_loop()
            Probe(loop, prefix).start()
            return loop

    def install() -> None:
        asyncio.set_event_loop_policy(ProbedPolicy())

    import gateway.cli
    import gateway.workers

    gateway.cli.install_uvloop = install  # type: ignore[attr-defined]
    gateway.workers.install_uvloop = install


def main() -> None:
    prefix, argv = sys.argv[1], sys.argv[2:]
    sys.path[0] = os.getcwd()  # the checkout whose `gateway` runs, not bench/ (run as a file, not with -m)
    _install(prefix)
    from gateway.cli import main as gateway_main

    sys.exit(gateway_main(argv))


if __name__ == "__main__":
    main()
