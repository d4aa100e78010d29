"""`--workers N`: N API processes share the port (SO_REUSEPORT); this process serves /metrics, summing
every worker's values through prometheus-client's multiprocess mode, and forwards SIGTERM/SIGHUP."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import sys
import tempfile
from dataclasses import replace

import structlog

from gateway.config.types import Config

log = structlog.get_logger("gateway")


def _worker(config: Config, path: str | None) -> None:
    from gateway.errors import StartupError
    from gateway.server import run_server

    install_uvloop()
    try:
        asyncio.run(run_server(config, path, serve_api=True, serve_metrics=False, reuse_port=True))
    except StartupError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        sys.exit(1)


def run_workers(config: Config, path: str | None, count: int) -> int:
    fresh_multiproc_dir()  # before any metric exists, in this process and (inherited) in the workers
    from gateway.observe.metrics import create_metrics, worker_gone
    from gateway.server import run_server

    metrics = create_metrics()
    if config.state.backend == "memory":
        # each worker keeps its own counters: a key gets up to `count` times its rpm, tpm and budget
        log.warning("workers_with_local_limits", workers=count, message=f"--workers {count} with state.backend "
                    f"memory: every worker enforces rate limits and budgets on its own, so a key may use up "
                    f"to {count}x its limits; set state.backend: redis to share them")
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

    code = asyncio.run(run_server(config, path, serve_api=False, serve_metrics=True, reuse_port=False,
                                  metrics=metrics, forward=forward))
    for p in procs:
        p.join()
        if p.pid is not None:
            worker_gone(p.pid)
    return code


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
