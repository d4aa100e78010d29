"""`--workers N`: N API processes share the port (SO_REUSEPORT); this process serves /metrics, summing
every worker's values through prometheus-client's multiprocess mode, and forwards SIGTERM/SIGHUP."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from multiprocessing.process import BaseProcess

import structlog

from gateway.config.types import Config

log = structlog.get_logger("gateway")
REAP_SLACK_S = 30.0  # a worker still alive this long after its drain (server.drain_s) ended is killed


def _worker(config: Config, path: str | None) -> None:
    from gateway.config import ConfigError
    from gateway.errors import StartupError, say_on_stderr
    from gateway.server import run_server

    install_uvloop()
    try:
        asyncio.run(run_server(config, path, serve_api=True, serve_metrics=False, reuse_port=True))
    except ConfigError as exc:  # a key that clashes with a stored one: the config error's lines, exit 2
        for line in exc.errors:
            say_on_stderr(line)
        sys.exit(2)
    except StartupError as exc:
        say_on_stderr(f"gateway: {exc}")
        sys.exit(1)


def run_workers(config: Config, path: str | None, count: int) -> int:
    fresh_multiproc_dir()  # before any metric exists, in this process and (inherited) in the workers
    from gateway.observe.metrics import create_metrics, worker_gone
    from gateway.server import run_server

    metrics = create_metrics()
    if config.state.backend == "memory":
        # each worker keeps its own counters: a key gets up to `count` times its rpm, tpm and budget
        shared = " (budgets follow the other workers' spend through the store's ledger, a second or so late)" \
            if config.store.url is not None else ""
        log.warning("workers_with_local_limits", workers=count, message=f"--workers {count} with state.backend "
                    f"memory: every worker enforces rate limits and budgets on its own, so a key may use up "
                    f"to {count}x its limits{shared}; set state.backend: redis to share them")
        metrics.local_limits(count)
    # each worker's share of a limit while Redis is away counts the workers (docs/scale-out.md)
    config = replace(config, state=replace(config.state, workers=count))
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(config, path), daemon=False) for _ in range(count)]
    for p in procs:
        p.start()

    def forward(sig: int) -> None:
        for p in procs:
            if p.pid is not None and p.is_alive():
                os.kill(p.pid, sig)

    try:
        return asyncio.run(run_server(config, path, serve_api=False, serve_metrics=True, reuse_port=False,
                                      metrics=metrics, forward=forward, workers_gone=lambda: _all_exited(procs),
                                      workers=count))
    except BaseException:  # the supervisor cannot go on (its metrics port taken): nor do its workers
        forward(signal.SIGTERM)
        raise
    finally:
        _reap(procs, config.server.drain_s + REAP_SLACK_S, worker_gone)


async def _all_exited(procs: Sequence[BaseProcess]) -> None:
    """Returns once every worker process has exited (each one's sentinel becomes readable)."""
    loop = asyncio.get_running_loop()
    everyone_gone = loop.create_future()
    alive = {p.sentinel for p in procs}

    def exited(fd: int) -> None:
        loop.remove_reader(fd)
        alive.discard(fd)
        if not alive and not everyone_gone.done():
            everyone_gone.set_result(None)

    for fd in alive:
        loop.add_reader(fd, exited, fd)
    try:
        await everyone_gone
    finally:
        for fd in alive:
            loop.remove_reader(fd)


def _reap(procs: Sequence[BaseProcess], within_s: float, gone: Callable[[int], None]) -> None:
    """Join every worker (killed if it outlives its drain by far); its live gauges leave the aggregate."""
    deadline = time.monotonic() + within_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
        if p.pid is not None:
            gone(p.pid)


def install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every platform we ship
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def fresh_multiproc_dir() -> str:
    """prometheus-client's multiprocess files must start empty at every start."""
    path = tempfile.mkdtemp(prefix="gateway-metrics-")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path
