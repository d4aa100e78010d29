"""Helpers of the control-plane tests: a gateway config with a store and an admin key, the admin API over
plain HTTP, and a gateway process of its own (`gateway serve --config`), alone or as replicas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from gateway.config import parse_config
from gateway.config.types import Config
from tests.ports import free_port

ADMIN_KEY = "adm-" + "k" * 40
CONFIG_KEY = "sk-config-key-" + "c" * 20


def raw_config(store_url: str, **store: Any) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1"},
        "auth": {"keys": [{"name": "from-config", "key": CONFIG_KEY}]},
        "providers": {"mock": {"type": "mock", "ttft_ms": 1, "token_delay_ms": 1}},
        "models": [{"name": "m", "deployments": [{"provider": "mock", "model": "mock-1",
                                                   "price": {"input": 1.0, "output": 2.0}}]},
                   {"name": "other", "deployments": [{"provider": "mock", "model": "mock-2"}]}],
        "admin": {"keys": [{"name": "platform", "key": ADMIN_KEY}]},
        "store": {"url": store_url, "poll_s": 0.2, **store},
    }


def store_config(store_url: str, **store: Any) -> Config:
    return parse_config(raw_config(store_url, **store), env={})


def admin_call(port: int, method: str, path: str, body: Any = None, key: str = ADMIN_KEY) -> tuple[int, Any]:
    """(status, JSON answer) of one admin API call."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}/admin/v1/{path}", data=data, method=method,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class GatewayProcess:
    """`gateway serve --config` in a process of its own (so it can be killed with SIGKILL)."""

    def __init__(self, tmp: Path, raw: dict[str, Any], name: str = "gw", extra_args: tuple[str, ...] = ()):
        self.port, self.metrics_port = free_port(), free_port()
        self.extra_args = extra_args  # e.g. ("--workers", "2")
        self.config_path = tmp / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(raw))
        self.log_path = tmp / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [sys.executable, "-m", "gateway", "serve", "--config", str(self.config_path),
                "--port", str(self.port), "--metrics-port", str(self.metrics_port), *self.extra_args]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.02)  # polling a child process for readiness, bounded by the deadline
        raise AssertionError("the gateway did not start: " + self.log_path.read_text()[-2000:])

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@contextmanager
def running(*gws: GatewayProcess) -> Iterator[None]:
    """The processes started in order; on leaving, every one stopped (a graceful stop commits what it
    holds), also when a start failed or the body raised."""
    try:
        for gw in gws:
            gw.start()
        yield
    finally:
        for gw in gws:
            gw.stop()


@contextmanager
def two_replicas(tmp: Path, raw: dict[str, Any]) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    """Two gateway processes, `a` and `b`, with one config: replicas on one store."""
    a, b = GatewayProcess(tmp, raw, "a"), GatewayProcess(tmp, raw, "b")
    with running(a, b):
        yield a, b
