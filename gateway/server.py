"""Run the API and metrics servers in one event loop; SIGTERM drains, SIGHUP reloads."""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
from aiohttp import web

from gateway import COMPILED
from gateway.app import App, Reload, create_metrics_app, server_limits
from gateway.app import serve_api as start_api
from gateway.config import ConfigError, load_config
from gateway.config.types import DEFAULT_MAX_CONNECTIONS, Config, ServerConfig
from gateway.errors import StartupError
from gateway.http import HttpServer
from gateway.observe.metrics import Metrics, create_metrics
from gateway.scheduling import Outcome, set_thread_slice

T = TypeVar("T")

log = structlog.get_logger("gateway")


async def _bind(what: str, host: str, port: int, start: Awaitable[T]) -> T:
    try:
        return await start
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)  # asyncio's message repeats the address
        raise StartupError(f"cannot listen on {host}:{port} ({what}): {reason.lower()}") from None


async def _start_metrics(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


FDS_PER_CONNECTION = 2  # a client connection and, while it streams, one upstream connection
FDS_RESERVED = 64  # listeners, the metrics server, Redis, logs, webhook calls


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard one (distributions start processes at 1024, far below
    what thousands of open streams need); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def connection_cap(configured: int | None, fd_limit: int) -> int:
    """`server.max_connections`, lowered to what the file descriptor limit can hold: past that the
    process would fail accepts (EMFILE) instead of answering 503. Unset, the default is simply what
    fits, quietly; only a value the operator chose is worth a warning when it cannot hold."""
    fits = max(1, (fd_limit - FDS_RESERVED) // FDS_PER_CONNECTION)
    if configured is None:
        return min(DEFAULT_MAX_CONNECTIONS, fits)
    if configured > fits:
        log.warning("max_connections_lowered", configured=configured, effective=fits, fd_limit=fd_limit)
    return min(configured, fits)


RELOAD_SWITCH_S = 0.0002  # the GIL's switch interval while a reload's worker thread runs


async def _reload(app: App, api: HttpServer | None, path: str | None, lock: asyncio.Lock) -> None:
    """SIGHUP. Reading, parsing and compiling the file and loading the certificate run in a worker
    thread (docs/extensions.md, "Costs a client or an upstream can impose": reload work must not stall the streams on
    the loop); the swap is one assignment on the loop. Reloads run one at a time, in signal order, each reading the
    file anew."""
    if path is None:
        log.warning("reload_ignored", reason="the embedded default has no file to reload")
        return
    async with lock:
        # the cyclic collector stops every thread: reading a large file would trigger full collections of
        # hundreds of ms each (measured: 0.2-0.5 s with 3,000 models). Off while the thread works; then
        # the new config, long-lived, joins what start-up froze (see _tune_gc) so no collection scans it.
        # The worker holds the GIL for a switch interval (5 ms) at a time, and the loop's thread must take
        # it back every time it let it go (each iteration's poll at least, and every forced switch): under
        # load that stalled the loop for 30-80 ms per reload. A short interval while the worker runs
        # bounds each wait; the reload takes a little longer.
        gc.disable()
        interval = sys.getswitchinterval()
        sys.setswitchinterval(RELOAD_SWITCH_S)
        try:
            config, prepared = await asyncio.to_thread(_prepare_reload, app, path)
        except (ConfigError, ValueError) as exc:
            errors = exc.errors if isinstance(exc, ConfigError) else [str(exc)]
            log.error("reload_rejected", errors=errors)
            return
        finally:
            sys.setswitchinterval(interval)
            gc.enable()
        was = app.runtime.config.server.sched_slice_us
        await app.apply_reload(prepared)  # under the lock: the next reload waits for these signers
        gc.freeze()
        if config.server.sched_slice_us != was:
            request_slice(config.server.sched_slice_us)
        if api is not None:
            api.tls = app.tls if api.tls is not None else None
            fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            api.set_limits(server_limits(config.server, connection_cap(config.server.max_connections, fd_limit)))
        if prepared.needs_restart:  # applied: the rest of the file; these keep their start values
            log.warning("reload_needs_restart", keys=list(prepared.needs_restart))
    log.info("reloaded", models=len(config.models))


def _prepare_reload(app: App, path: str) -> tuple[Config, Reload]:
    config = load_config(path)
    return config, app.prepare_reload(config)


def request_slice(us: int) -> Outcome:
    """`server.sched_slice_us` for the loop's thread (the caller); logged once per change. 0 at start
    makes no call: the process is left as it was started."""
    outcome, reason = set_thread_slice(us)
    level = log.warning if outcome in (Outcome.REFUSED, Outcome.IGNORED, Outcome.UNSUPPORTED) else log.info
    level("sched_slice", slice_us=us, outcome=outcome.value, **({"reason": reason} if reason else {}))
    return outcome


def _tune_gc() -> None:
    """Move everything built at start-up out of the collector's sight and collect young objects less
    often: profiles showed the cyclic GC at ~20% of CPU under streaming load, with stalls of tens of ms
    that pause every open stream. Larger thresholds make each collection a longer stall (measured)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)


STARTUP_CLEANUP_S = 5.0  # what a failed start may spend closing what it opened (the store's threads)


async def run_server(config: Config, path: str | None, *, serve_api: bool, serve_metrics: bool,
                     reuse_port: bool, metrics: Metrics | None = None,
                     forward: Callable[[int], None] | None = None,
                     workers_gone: Callable[[], Awaitable[None]] | None = None, workers: int = 0) -> int:
    """Serve until SIGTERM/SIGINT. `forward` also receives every signal (the workers' supervisor);
    `workers_gone` returns once every worker has exited: the supervisor then stops with a StartupError.
    `workers`: how many workers this supervisor started (0: none, the process serves on its own)."""
    metrics = metrics or create_metrics()
    s = config.server
    runners: list[web.AppRunner] = []
    app: App | None = None
    api: HttpServer | None = None
    try:
        if serve_api:
            app = _new_app(config, metrics)
            api = await _start_api(app, s, reuse_port)
        if serve_metrics:
            runners.append(await _bind("server.metrics_port", s.host, s.metrics_port,
                                       _start_metrics(create_metrics_app(metrics), s.host, s.metrics_port)))
    except BaseException:
        # a failed start closes what it opened (the store's connections and threads), so the process
        # can exit with its one line instead of lingering (docs/reference.md, Start-up)
        await _close_after_failed_start(app, api)
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    reload_lock = asyncio.Lock()
    reloads: set[asyncio.Task[None]] = set()

    def on_signal(sig: int) -> None:
        if forward is not None:
            forward(sig)
        if sig == signal.SIGHUP:
            if app is not None:
                task = loop.create_task(_reload(app, api, path, reload_lock))
                reloads.add(task)
                task.add_done_callback(reloads.discard)
        else:
            stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal, sig)
    watcher = _watch_workers(workers_gone, stop)
    _tune_gc()
    # a supervisor serves no API itself, its workers do, on that port: its line says where the gateway
    # listens and how many workers serve it (docs/reference.md, `gateway serve`)
    log.info("listening", host=s.host, port=s.port if serve_api or workers else None,
             metrics_port=s.metrics_port if serve_metrics else None, **({"workers": workers} if workers else {}),
             build="compiled" if COMPILED else "pure-python")
    await stop.wait()
    drain_s = app.runtime.config.server.drain_s if app is not None else s.drain_s  # a reload's, if any
    log.info("draining", drain_s=drain_s)
    if api is not None and app is not None:
        await api.shutdown(drain_s)
        await app.close()
    for runner in runners:
        await runner.cleanup()
    log.info("stopped")
    if watcher is not None and watcher.done() and not watcher.cancelled() and watcher.result():
        raise StartupError("every worker exited (their own lines above say why)")
    if watcher is not None:
        watcher.cancel()
    return 0


def _new_app(config: Config, metrics: Metrics) -> App:
    try:
        app = App(config, metrics)
    except ValueError as exc:  # a certificate that does not load
        raise StartupError(str(exc)) from None
    if config.server.sched_slice_us:
        request_slice(config.server.sched_slice_us)
    return app


async def _start_api(app: App, s: ServerConfig, reuse_port: bool) -> HttpServer:
    cap = connection_cap(s.max_connections, raise_fd_limit())
    return await _bind("server.port", s.host, s.port,
                       start_api(app, s.host, s.port, reuse_port=reuse_port, max_connections=cap))


async def _close_after_failed_start(app: App | None, api: HttpServer | None) -> None:
    """Bounded: a store that hangs must not keep a failed start alive."""
    try:
        async with asyncio.timeout(STARTUP_CLEANUP_S):
            if api is not None:
                await api.shutdown(0)
            if app is not None:
                await app.close()
    except Exception as exc:  # the start's own error is the one to report
        log.warning("startup_cleanup_failed", error=type(exc).__name__)


def _watch_workers(workers_gone: Callable[[], Awaitable[None]] | None,
                   stop: asyncio.Event) -> asyncio.Task[bool] | None:
    """The supervisor's watch: True once every worker exited before a signal asked them to (then stop)."""
    if workers_gone is None:
        return None

    async def watch() -> bool:
        await workers_gone()
        if stop.is_set():
            return False  # they exited because we asked them to
        stop.set()
        return True

    return asyncio.get_running_loop().create_task(watch())
