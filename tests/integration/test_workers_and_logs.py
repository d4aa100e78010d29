"""`--workers N` sums metrics across processes; the per-request log line has every field and no secret."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import openai
import orjson
from structlog.testing import capture_logs

from gateway.config import parse_config
from tests.chat_scripts import text_stream
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer
from tests.ports import free_port

LOG_FIELDS = {"request_id", "api", "model", "deployment", "key", "stream", "status", "outcome", "attempts",
              "ttft_ms", "duration_ms", "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens",
              "cost_usd", "redactions", "guardrails"}


def _two_workers(tmp_path: Path, provider: str) -> tuple[subprocess.Popen[bytes], int, int]:
    """`gateway serve --workers 2` with the demo model on a mock `provider` (its YAML flow mapping):
    the process, its port and its metrics port."""
    port, mport = free_port(), free_port()
    cfg = tmp_path / "gw.yaml"
    cfg.write_text("server: {host: 127.0.0.1}\nauth: {allow_unauthenticated: true}\n"
                   f"providers: {{demo: {provider}}}\n"
                   "models: [{name: demo, deployments: [{provider: demo, model: demo-1}]}]\n")
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--port", str(port),
                             "--metrics-port", str(mport), "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return proc, port, mport


def test_two_workers_share_the_port_and_metrics_sum_across_them(tmp_path: Path) -> None:
    proc, port, mport = _two_workers(tmp_path, "{type: mock, ttft_ms: 1, token_delay_ms: 0}")
    try:
        _wait_ready(port)
        total = 40
        for _ in range(total):  # a new connection each time, so the kernel spreads them over both workers
            c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=10)
            c.chat.completions.create(model="demo", messages=[{"role": "user", "content": "hi"}])
            c.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as r:
            text = r.read().decode()
        counted = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                      if line.startswith("llm_gateway_requests_total{") and 'api="chat"' in line)
        assert counted == total
        assert "llm_gateway_build_info" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    pids = {orjson.loads(line)["pid"] for line in out.splitlines() if line.startswith(b"{") and b'"request"' in line}
    assert len(pids) == 2, "both workers served requests"
    assert proc.returncode == 0


def test_the_supervisors_listening_line_names_the_port_its_workers_serve(tmp_path: Path) -> None:
    proc, port, mport = _two_workers(tmp_path, "{type: mock}")
    try:
        _wait_ready(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    lines = [orjson.loads(line) for line in out.splitlines() if line.startswith(b"{")]
    [supervisor] = [x for x in lines if x.get("event") == "listening" and "workers" in x]
    assert (supervisor["port"], supervisor["metrics_port"], supervisor["workers"]) == (port, mport, 2)
    assert proc.returncode == 0


def _wait_ready(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("workers did not start")


def test_request_log_line_has_every_field_and_no_secret(upstream: FakeUpstream,
                                                        make_gateway: Callable[..., GatewayServer]) -> None:
    secret_key, upstream_key = "gw-key-TOPSECRET-0001", "sk-upstream-TOPSECRET"
    gw = make_gateway(parse_config({
        "auth": {"keys": [{"name": "team-a", "key": secret_key}]},
        "providers": {"up": {"type": "openai", "base_url": f"{upstream.base_url}/v1", "api_key": upstream_key}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "up-model"}]}],
    }, env={}))
    upstream.enqueue("/v1/chat/completions", text_stream(["reply ", "text"]))
    message = "my password is hunter2-SECRET-PROMPT"
    with capture_logs() as logs:
        client = openai.OpenAI(base_url=gw.base_url, api_key=secret_key, max_retries=0)
        list(client.chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": message}]))
        deadline = time.monotonic() + 10  # the line is written just after the response: bounded wait
        while not [e for e in logs if e["event"] == "request"] and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = [e for e in logs if e["event"] == "request"]
    assert len(lines) == 1
    line = lines[0]
    assert set(line) >= LOG_FIELDS
    assert line["key"] == "team-a" and line["outcome"] == "ok" and line["input_tokens"] == 11
    dumped = str(logs)
    for secret in (secret_key, upstream_key, message, "reply"):
        assert secret not in dumped
