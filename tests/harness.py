"""Run the real gateway and the fake upstream on 127.0.0.1 in a background event loop thread, so tests
can drive them with the official `openai` SDK, sync or async, exactly as users do."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import uvloop
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from gateway.app import App, create_metrics_app, serve_api
from gateway.config import parse_config
from gateway.config.types import Config
from gateway.http import HttpServer
from gateway.observe.metrics import Metrics, create_metrics

T = TypeVar("T")


class LoopThread:
    """The servers' event loop, on its own thread: uvloop, as `gateway serve` runs (its transports are not
    asyncio's classes, so code that only worked on asyncio's loop would pass here otherwise)."""

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="servers", daemon=True)
        self._thread.start()

    def cpu_time(self) -> float:
        """Seconds of CPU the loop's thread has used: what the loop spent running (a loop-stall bound
        measured this way leaves out the time the OS gave other processes: a busy test machine)."""
        assert self._thread.ident is not None
        return time.clock_gettime(time.pthread_getcpuclockid(self._thread.ident))

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class GatewayServer:
    """The real app on real sockets: the API port and the metrics port."""

    def __init__(self, config: Config):
        self.config = config
        self.metrics: Metrics = create_metrics(CollectorRegistry())
        self.port = 0
        self.metrics_port = 0
        self.app: App | None = None
        self.api: HttpServer | None = None
        self._runners: list[web.AppRunner] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        self.app = App(self.config, self.metrics)
        self.api = await serve_api(self.app, "127.0.0.1", 0)
        self.port = self.api.port
        self.metrics_port = await self._serve(create_metrics_app(self.metrics), 1.0)

    async def _serve(self, app: web.Application, shutdown: float) -> int:
        runner = web.AppRunner(app, shutdown_timeout=shutdown, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runners.append(runner)
        return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.api is not None and self.app is not None:
            await self.api.shutdown(30.0)
            await self.app.close()
        for r in self._runners:
            await r.cleanup()

    def scrape(self) -> str:
        """/metrics over HTTP, from the metrics port."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def registry_text(self) -> str:
        assert self.metrics.registry is not None
        return generate_latest(self.metrics.registry).decode()

    def sample(self, name: str, **labels: str) -> float:
        """The sum of every series of `name` whose labels include `labels` (a test names only the labels
        it checks: `tokens_total` also has `key`)."""
        assert self.metrics.registry is not None
        return sum(s.value for family in self.metrics.registry.collect() for s in family.samples
                   if s.name == name and labels.items() <= s.labels.items())


def gateway_config(upstream_url: str, **overrides: Any) -> Config:
    """A config with one OpenAI-compatible provider `up` at the fake upstream and model `m`."""
    raw: dict[str, Any] = {
        "server": {"keepalive_after_s": 30},
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": f"{upstream_url}/v1", "api_key": "sk-upstream-SECRET",
                             "timeouts": {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 60}}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "up-model"}]}],
    }
    for key, value in overrides.items():
        raw[key] = value
    return parse_config(raw, env={})


async def wait_until(cond: Callable[[], bool], deadline_s: float = 2.0) -> None:
    """Wait for a condition the system under test offers no event for (a gauge settling after the
    response has been sent). Bounded; fails loudly at the deadline."""
    async with asyncio.timeout(deadline_s):
        while not cond():  # noqa: ASYNC110 - there is no event to wait on
            await asyncio.sleep(0.005)


class ProcessLog:
    """The output lines of a `gateway serve` subprocess (stdout and stderr together), read by a thread of
    its own; `wait` blocks until enough lines carry an event, woken by each line read, never by a timer."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        assert proc.stdout is not None
        self.lines: list[bytes] = []
        self._out = proc.stdout
        self._ended = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in iter(self._out.readline, b""):
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def with_event(self, event: str) -> list[bytes]:
        tag = f'"event":"{event}"'.encode()
        with self._changed:
            return [line for line in self.lines if tag in line]

    def wait(self, event: str, count: int = 1, timeout_s: float = 15.0, what: str = "") -> list[dict[str, Any]]:
        """The first `count` lines of `event`, parsed; fails at the deadline or when the output ends first."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while len(found := self.with_event(event)) < count:
                left = deadline - time.monotonic()
                # the message is formatted only when the assertion fails, not on every line read
                assert left > 0 and not self._ended, \
                    what or f"{len(found)} {event} lines, expected {count}: {self.lines!r}"
                self._changed.wait(left)
        return [json.loads(line) for line in found[:count]]

    def join(self, timeout_s: float) -> None:
        self._reader.join(timeout_s)
