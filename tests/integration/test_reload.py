"""SIGHUP reloads the config file; an invalid new file is rejected and the old config stays."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai

from tests.harness import free_port

CONFIG = """
server: {{host: 127.0.0.1}}
auth: {{keys: [{{name: t, key: k}}]}}
providers: {{demo: {{type: mock, ttft_ms: 1, token_delay_ms: 0}}}}
models: [{models}]
"""


def models_of(port: int, key: str = "k") -> list[str]:
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=5)
    return [m.id for m in c.models.list()]


def wait_for(port: int, expected: list[str]) -> list[str]:
    deadline = time.monotonic() + 10
    seen: list[str] = []
    while time.monotonic() < deadline:
        try:
            seen = models_of(port)
        except openai.APIConnectionError:
            seen = []
        if seen == expected:
            return seen
        time.sleep(0.05)  # the reload is asynchronous to the signal: poll its visible effect
    return seen


def test_sighup_reloads_and_rejects_a_bad_file(tmp_path: Path) -> None:
    cfg = tmp_path / "gw.yaml"
    one = "{name: a, deployments: [{provider: demo, model: d}]}"
    cfg.write_text(CONFIG.format(models=one))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--port", str(port),
                             "--metrics-port", str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_for(port, ["a"]) == ["a"]
        cfg.write_text(CONFIG.format(models=one + ", {name: b, deployments: [{provider: demo, model: d}]}"))
        proc.send_signal(signal.SIGHUP)
        assert wait_for(port, ["a", "b"]) == ["a", "b"]
        cfg.write_text(CONFIG.format(models="{name: c, deployments: [{provider: nope, model: d}]}"))
        lines: list[bytes] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, b"")), daemon=True)
        reader.start()
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while not any(b'"reload_rejected"' in line for line in lines):
            assert time.monotonic() < deadline, "the bad file was not reported"
            time.sleep(0.02)
        assert models_of(port) == ["a", "b"], "the old config stays"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        reader.join(5)
    finally:
        if proc.poll() is None:
            proc.kill()
    rejected = next(line for line in lines if b'"reload_rejected"' in line)
    assert b'unknown provider' in rejected
